"""The faults of a campaign (:mod:`streams.crash.campaign`), one kind at a time.

Instance faults hit one instance (all its processes: driver, JVMs, workers):

* ``kill``: SIGKILL, restarted 1 to 3 s later;
* ``fault-point``: restarted with a fault point of the commit protocol armed
  (:mod:`runtime.txn.faults`): it kills itself there, and is restarted clean;
* ``pause``: SIGSTOP past ``session.timeout.ms`` and ``transaction.timeout.ms`` (another
  instance takes its tasks), then SIGCONT: a zombie that wakes up mid-batch or mid-commit;
* ``executor``: SIGKILL one of its executor JVMs (``local-cluster`` masters only);
* ``python-worker``: SIGKILL one of its Python workers or task hosts;
* ``disk-full``: its ``state.dir`` (a small filesystem of its own) is filled to the last
  byte for a while, then emptied again.

Storage faults hit every instance at once, through the fault proxy in front of the object
store (:mod:`streams.crash.s3proxy`), for a while:

* ``storage-errors``: 500 InternalError and 503 SlowDown answers;
* ``storage-resets``: connections reset, and requests left unanswered until they time out;
* ``lost-answers``: conditional writes that took effect, whose answers are lost (the
  ambiguous commit);
* ``storage-latency``: slow answers.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from streams.crash.inputs import CrashTestError
from streams.crash.instances import Instance
from streams.crash.s3proxy import FaultProxy, FaultRule

#: What the command lines of an instance's Python workers and task hosts name.
WORKER_DAEMON = "runtime.spark.worker_daemon"
INSTANCE_KINDS = ("kill", "fault-point", "pause", "executor", "python-worker", "disk-full")
STORAGE_KINDS = ("storage-errors", "storage-resets", "lost-answers", "storage-latency")
FAULT_KINDS = INSTANCE_KINDS + STORAGE_KINDS
#: The faults that take an instance out (its tasks move, or it starts again): one at a time
#: in a campaign, so that another instance is always there to take the tasks over. The
#: others (a Python worker, the object store) overlap with them.
TAKE_OUT_KINDS = ("kill", "fault-point", "pause", "executor", "disk-full")
#: How long a storage fault or a full disk lasts.
SPAN_S = 8.0
#: How long an instance restarted with a fault point armed may take to reach it (its
#: start and first commit, on an object store under other faults: up to two minutes).
FAULT_POINT_WAIT_S = 120.0
#: The size of each instance's state directory filesystem, with ``disk-full``.
DISK_MB = 512
_CHUNK = b"\0" * (1 << 20)


@dataclass
class Applied:
    """What applying one fault did: which instance (or ``storage``), in detail."""

    target: str
    detail: str


class Nemesis:
    """Applies faults to the campaign's instances and storage.

    Args:
        instances: the campaign's instances.
        proxy: the fault proxy in front of the object store (None: a local root).
        points: the fault points of the application's commits.
        pause_s: how long a pause lasts (past the session and transaction timeouts).
        seed: the random seed.
        tick: called while a fault lasts (the campaign supervises its instances).
    """

    def __init__(
        self,
        instances: Sequence[Instance],
        proxy: FaultProxy | None,
        points: Sequence[str],
        *,
        pause_s: float,
        seed: int,
        tick: Callable[[], object],
    ) -> None:
        self.instances = list(instances)
        self.proxy = proxy
        self.points = list(points)
        self.pause_s = pause_s
        self.rng = random.Random(seed)
        self.tick = tick

    def possible(self, kind: str, cluster: bool) -> str | None:
        """Why ``kind`` cannot be applied in this campaign (None: it can)."""
        if kind not in FAULT_KINDS:
            return f"unknown fault kind {kind!r}: one of {', '.join(FAULT_KINDS)}"
        if kind in STORAGE_KINDS and self.proxy is None:
            return f"{kind} needs the root on an object store behind the fault proxy"
        if kind == "executor" and not cluster:
            return "executor faults need a cluster master (--master local-cluster[2,1,1024])"
        if kind == "pause" and len(self.instances) < 2:
            return "a pause needs another instance to take the paused one's tasks"
        if kind == "disk-full" and os.geteuid() != 0:
            return (
                "disk-full faults mount a small filesystem on each instance's state.dir: run "
                "as root, or as 'unshare -Urm streams-eos crashtest ...'"
            )
        return None

    def pick(self, kind: str, avoid: Sequence[str] = ()) -> str:
        """Whom a fault of ``kind`` would hit: ``storage``, or a running instance (one
        not named in ``avoid`` if there is one)."""
        if kind in STORAGE_KINDS:
            return "storage"
        running = [i for i in self.instances if i.alive()] or self.instances
        return self.rng.choice([i for i in running if i.name not in avoid] or running).name

    def apply(self, kind: str, target: str | None = None, avoid: Sequence[str] = ()) -> Applied:
        """Apply one fault of ``kind`` to ``target`` (default: :meth:`pick`) and heal it
        (blocking for its span). A Python worker fault goes to another running instance
        (not in ``avoid``) when ``target`` has no worker now (it restarted moments ago)."""
        target = target or self.pick(kind, avoid)
        if kind in STORAGE_KINDS:
            return Applied("storage", self._storage(kind))
        instance = next(i for i in self.instances if i.name == target)
        if kind == "python-worker":
            instance = self._with_workers(instance, avoid)
        return Applied(instance.name, getattr(self, "_" + kind.replace("-", "_"))(instance))

    def _with_workers(self, preferred: Instance, avoid: Sequence[str]) -> Instance:
        """``preferred`` if it runs Python workers, else another running instance that
        does, waiting for one at most a minute (then ``preferred``)."""
        others = [i for i in self.instances if i is not preferred and i.name not in avoid]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for instance in (preferred, *others):
                if instance.alive() and instance.pids("python", WORKER_DAEMON):
                    return instance
            self._wait(0.5)
        return preferred

    # -- instance faults -------------------------------------------------------------------

    def _kill(self, target: Instance) -> str:
        target.held = True
        try:
            target.kill()
            down = self.rng.uniform(1.0, 3.0)
            self._wait(down)
            target.start()
        finally:
            target.held = False
        return f"SIGKILL, restarted after {down:.1f} s"

    def _fault_point(self, target: Instance) -> str:
        point = self.rng.choice(self.points)  # armed for the restart's first commit
        target.held = True
        try:
            target.kill()
            target.start({"STREAMS_FAULT_POINT": point, "STREAMS_FAULT_HIT": "1"})
            deadline = time.monotonic() + FAULT_POINT_WAIT_S
            while target.alive() and time.monotonic() < deadline:
                self._wait(0.2)
            reached = target.ended() == -signal.SIGKILL
            target.kill()
            target.start()
        finally:
            target.held = False
        waited = "reached" if reached else f"not reached in {FAULT_POINT_WAIT_S:.0f} s"
        return f"{point} {waited}, restarted"

    def _pause(self, target: Instance) -> str:
        target.pause()
        self._wait(self.pause_s)
        target.resume()
        return f"SIGSTOP for {self.pause_s:.0f} s, then SIGCONT"

    def _executor(self, target: Instance) -> str:
        executor = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
        return self._kill_one(target.pids("java", executor), "executor JVM")

    def _python_worker(self, target: Instance) -> str:
        workers = target.pids("python", WORKER_DAEMON)
        return self._kill_one(workers, "Python worker or task host")

    def _kill_one(self, pids: list[int], what: str) -> str:
        if not pids:
            return f"no {what} running"
        pid = self.rng.choice(pids)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return f"SIGKILL of {what} {pid} (of {len(pids)})"

    def _disk_full(self, target: Instance) -> str:
        filler = os.path.join(target.state_dir, ".filler")
        written = fill(filler)
        self._wait(SPAN_S)
        with contextlib.suppress(FileNotFoundError):
            os.remove(filler)
        return f"state.dir full ({written >> 20} MiB written to fill it) for {SPAN_S:.0f} s"

    # -- storage faults ----------------------------------------------------------------------

    def _storage(self, kind: str) -> str:
        assert self.proxy is not None
        rules = {
            "storage-errors": [FaultRule("500", rate=0.1), FaultRule("503", rate=0.15)],
            "storage-resets": [FaultRule("reset", rate=0.1), FaultRule("timeout", rate=0.02)],
            "lost-answers": [FaultRule("lose-answer", rate=0.3, conditional=True)],
            "storage-latency": [FaultRule("latency", rate=0.5, latency_ms=300)],
        }[kind]
        added = [self.proxy.add(rule) for rule in rules]
        self._wait(SPAN_S)
        for rule in added:
            self.proxy.remove(rule)
        hits = ", ".join(f"{r.kind} x{r.hits}" for r in added)
        return f"{SPAN_S:.0f} s of {hits}"

    def _wait(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.tick()
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def fill(path: str) -> int:
    """Write zeros to ``path`` until its filesystem is full; return the bytes written."""
    written = 0
    with open(path, "wb") as f:
        try:
            while True:
                f.write(_CHUNK)
                written += len(_CHUNK)
                f.flush()
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
        with contextlib.suppress(OSError):  # the last partial chunk
            os.fsync(f.fileno())
    return written


def mount_small_disk(path: str, megabytes: int = DISK_MB) -> None:
    """Mount a ``megabytes`` tmpfs on ``path`` (root, or a user namespace's root).

    Raises:
        CrashTestError: the mount failed.
    """
    os.makedirs(path, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", path],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise CrashTestError(f"cannot mount a small filesystem on {path}: {done.stderr.strip()}")


def unmount(path: str) -> None:
    """Unmount what :func:`mount_small_disk` mounted (lazily: a process may hold it)."""
    subprocess.run(["umount", "-l", path], capture_output=True, check=False)
