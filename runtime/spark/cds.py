"""A class-data-sharing (CDS) archive for the driver JVM of the sessions built here.

A local Spark driver loads thousands of classes from its jars at start. The first session
this project builds on a machine has its JVM write them to a JDK dynamic CDS archive when
it exits normally (``-XX:ArchiveClassesAtExit``); the following sessions map that archive
(``-XX:SharedArchiveFile``) instead of loading and verifying the classes again, which
halves the JVM's start (SparkSession and first job: about 2.5 s less on two cores).

Safety: the JVM checks an archive before using it (JDK build, base archive, class path,
the size and time of every jar) and ignores one that does not match, so a stale archive
costs only its speed-up. An archive is written under a name of its own, and adopted under
its final name only once complete: the JVM writes the header, which begins with
:data:`MAGIC`, last. The writer claims its name (an empty file) when it plans to write, so
the sessions started meanwhile (a long test run's command-line subprocesses) neither write
archives of their own nor wait for them at exit. Archives live in ``$STREAMS_CDS_DIR`` (default
``$XDG_CACHE_HOME/spark-streams-eos/cds``), one per JDK, Spark and JVM setting;
``STREAMS_CDS_DIR=off`` turns them off.

The directory is a cache with a bound: an archive is about 160 MB, and every new virtual
environment, Spark or JDK (or JVM setting) makes a new one, so each session keeps only the
:data:`KEEP` most recently used archives (using one touches it) and removes the rest,
adopts the complete archives of writers that have gone (a ``.tmp`` whose process exited
before anyone with its key started again) or removes them when they are incomplete or
their archive exists already. Removing an archive a running JVM has mapped is harmless on
POSIX (the mapping stays); a JVM that finds its archive gone starts without it.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass

import pyspark

log = logging.getLogger(__name__)

CDS_DIR_ENV = "STREAMS_CDS_DIR"

#: How many archives the directory keeps (the most recently used; each is about 160 MB).
KEEP = 4

#: The first bytes of a complete JDK dynamic archive (little-endian ``0xf00baba8``).
MAGIC = (0xF00BABA8).to_bytes(4, "little")

#: The JVM's own CDS messages (e.g. classes it skips) would only be noise in the logs.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"

#: Environment variables that change the driver JVM's class path or its options.
_JVM_ENV = (
    "JAVA_HOME",
    "SPARK_HOME",
    "SPARK_CONF_DIR",
    "HADOOP_CONF_DIR",
    "YARN_CONF_DIR",
    "SPARK_DIST_CLASSPATH",
    "JDK_JAVA_OPTIONS",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
)

#: Spark settings that change the driver JVM's class path or its heap.
_JVM_CONF = (
    "spark.driver.extraClassPath",
    "spark.driver.extraJavaOptions",
    "spark.driver.memory",
)


@dataclass(frozen=True)
class CdsPlan:
    """What the next driver JVM does with the archive."""

    #: Options to add to ``spark.driver.extraJavaOptions`` ("" for none).
    java_options: str
    #: Whether the JVM writes the archive when it exits (wait for it at exit).
    dumps: bool


def plan(conf: Mapping[str, str]) -> CdsPlan:
    """Return how the driver JVM of a session built with ``conf`` uses the archive: map it
    when there is one, write it at exit when there is none (and nobody is writing it)."""
    directory = cds_dir()
    java = _java()
    if directory is None or java is None:
        return CdsPlan("", dumps=False)
    try:
        os.makedirs(directory, exist_ok=True)
        archive = os.path.join(directory, f"spark-{_key(java, conf)}.jsa")
        tidy(directory, keep=archive)
        if _complete(archive):
            with contextlib.suppress(OSError):
                os.utime(archive)  # used: the least recently used ones go first
            return CdsPlan(f"-XX:SharedArchiveFile={archive} {QUIET}", dumps=False)
        if _being_written(archive):
            return CdsPlan("", dumps=False)
    except OSError as exc:  # a read-only or full cache: run without the archive
        log.debug("no CDS archive: %s", exc)
        return CdsPlan("", dumps=False)
    tmp = f"{archive}.{os.getpid()}.tmp"
    try:  # claim it now: the JVM writes only at exit, and others must see a writer meanwhile
        with open(tmp, "xb"):
            pass
    except OSError as exc:
        log.debug("no CDS archive: %s", exc)
        return CdsPlan("", dumps=False)
    return CdsPlan(f"-XX:ArchiveClassesAtExit={tmp} {QUIET}", dumps=True)


def cds_dir() -> str | None:
    """The archive directory, or None when archives are off."""
    value = os.environ.get(CDS_DIR_ENV)
    if value is not None:
        return None if value.strip().lower() in ("", "off", "0", "false") else value
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "spark-streams-eos", "cds")


def _java() -> str | None:
    """The java that ``spark-submit`` runs (``$JAVA_HOME/bin/java``, else the one on PATH)."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(java) if java and os.path.exists(java) else None


def _key(java: str, conf: Mapping[str, str]) -> str:
    """Name an archive after everything that decides whether the JVM could use it."""
    jars = os.path.join(os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__), "jars")
    parts = [java, _stamp(java), pyspark.__version__, jars, _stamp(jars)]
    parts += [f"{k}={os.environ.get(k, '')}" for k in _JVM_ENV]
    parts += [f"{k}={conf.get(k, '')}" for k in _JVM_CONF]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _stamp(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return "-"
    return f"{st.st_size}:{st.st_mtime_ns}"


def _complete(path: str) -> bool:
    """Whether ``path`` is a completely written dynamic archive."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


def _writers(archive: str) -> list[tuple[str, int]]:
    """The temporary archives of ``archive`` with the id of the process that made each."""
    out = []
    for tmp in glob.glob(f"{glob.escape(archive)}.*.tmp"):
        owner, pid = _writer_of(tmp)
        if owner == archive:
            out.append((tmp, pid))
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def tidy(directory: str, keep: str | None = None) -> None:
    """Bound the archive directory: adopt every complete temporary archive (or drop it when
    its archive exists), drop the incomplete ones of writers that have gone, then keep the
    :data:`KEEP` most recently used archives (``keep``, the one about to be used or written,
    always among them) and remove the others."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        tmp = os.path.join(directory, name)
        archive, pid = _writer_of(tmp)
        if archive is None:
            continue
        with contextlib.suppress(OSError):
            if _complete(tmp):  # the JVM writes the header last: this one is done
                if _complete(archive):
                    os.remove(tmp)
                else:
                    os.replace(tmp, archive)
            elif not _alive(pid):  # killed before or while it wrote
                os.remove(tmp)
    archives = []
    with contextlib.suppress(OSError):
        names = os.listdir(directory)
    for name in names:
        path = os.path.join(directory, name)
        if name.startswith("spark-") and name.endswith(".jsa") and path != keep:
            with contextlib.suppress(OSError):
                archives.append((os.stat(path).st_mtime_ns, path))
    archives.sort(reverse=True)
    room = KEEP - 1 if keep is not None else KEEP  # ``keep`` is used or written next
    for _, path in archives[max(room, 0) :]:
        with contextlib.suppress(OSError):
            os.remove(path)
            log.debug("removed the least recently used CDS archive %s", path)


def _writer_of(path: str) -> tuple[str | None, int]:
    """For a temporary archive ``<archive>.<pid>.tmp``: its archive and the writer's pid."""
    if not path.endswith(".tmp"):
        return None, 0
    archive, _, pid = path[: -len(".tmp")].rpartition(".")
    if not pid.isdigit() or not archive.endswith(".jsa"):
        return None, 0
    return archive, int(pid)


def _being_written(archive: str) -> bool:
    """Whether a live process is writing ``archive`` (then another writer would be waste)."""
    return any(_alive(pid) for _, pid in _writers(archive))
