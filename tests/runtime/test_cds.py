"""The driver JVM's class-data-sharing archive: one writer, claimed when it plans to write."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from runtime.spark import cds

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="needs java")


def test_the_first_session_claims_the_archive_and_the_next_ones_neither_write_nor_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cds.CDS_DIR_ENV, str(tmp_path))
    first = cds.plan({})
    assert first.dumps and "-XX:ArchiveClassesAtExit=" in first.java_options
    claimed = list(tmp_path.glob("*.tmp"))
    assert [p.name.rsplit(".", 2)[-2] for p in claimed] == [str(os.getpid())]
    second = cds.plan({})  # started while the first one runs: sees its writer
    assert second == cds.CdsPlan("", dumps=False)
    # the writer is gone without writing (killed): its claim is dropped, the next one claims
    (tmp,) = claimed
    dead = tmp.with_name(tmp.name.replace(f".{os.getpid()}.", ".999999999."))
    tmp.rename(dead)
    third = cds.plan({})
    assert third.dumps and not dead.exists()
    # a complete archive is adopted and mapped
    (mine,) = tmp_path.glob("*.tmp")
    mine.write_bytes(cds.MAGIC + b"rest")
    mapped = cds.plan({})
    assert not mapped.dumps and "-XX:SharedArchiveFile=" in mapped.java_options


def test_archives_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cds.CDS_DIR_ENV, "off")
    assert cds.plan({}) == cds.CdsPlan("", dumps=False)


def test_the_directory_keeps_the_most_recently_used_archives_and_no_leftovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each new venv, Spark or JDK makes a ~160 MB archive: the cache keeps ``KEEP`` of
    them, adopts a gone writer's complete archive, drops its incomplete or redundant ones."""
    monkeypatch.setenv(cds.CDS_DIR_ENV, str(tmp_path))
    old = []
    for i in range(cds.KEEP + 3):  # older ones first
        path = tmp_path / f"spark-old{i}.jsa"
        path.write_bytes(cds.MAGIC + b"x")
        os.utime(path, ns=(10**18 + i * 10**9, 10**18 + i * 10**9))
        old.append(path)
    gone = 999999999  # a process id nobody has
    orphan = tmp_path / f"spark-orphan.jsa.{gone}.tmp"  # complete, its writer exited
    orphan.write_bytes(cds.MAGIC + b"y")
    os.utime(orphan, ns=(10**17, 10**17))  # written long ago: adopted, then the oldest
    redundant = tmp_path / f"spark-old{cds.KEEP + 2}.jsa.{gone}.tmp"  # its archive exists
    redundant.write_bytes(cds.MAGIC + b"z")
    unfinished = tmp_path / f"spark-killed.jsa.{gone}.tmp"  # the writer was killed mid-dump
    unfinished.write_bytes(b"\0" * 8)
    writing = tmp_path / f"spark-busy.jsa.{os.getpid()}.tmp"  # a live writer: left alone
    writing.write_bytes(b"")
    first = cds.plan({})  # this key has no archive: it claims one, the others make room
    assert first.dumps
    archives = sorted(p.name for p in tmp_path.glob("*.jsa"))
    newest = [p.name for p in old[-(cds.KEEP - 1) :]]
    assert archives == sorted(newest), "keeps the most recently used, with room for its own"
    assert not orphan.exists() and not redundant.exists() and not unfinished.exists()
    assert writing.exists()
    # the claimed one is written (as the JVM does at exit) and used: it is the newest
    (claim,) = (p for p in tmp_path.glob("*.tmp") if p != writing)
    claim.write_bytes(cds.MAGIC + b"archive")
    os.utime(claim, ns=(10**17, 10**17))
    used = cds.plan({})
    assert not used.dumps and "-XX:SharedArchiveFile=" in used.java_options
    mine = Path(used.java_options.split("=", 1)[1].split()[0])
    assert mine.exists() and mine.stat().st_mtime_ns > old[-1].stat().st_mtime_ns
    assert len(list(tmp_path.glob("*.jsa"))) == cds.KEEP


def test_a_gone_writers_complete_archive_is_adopted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cds.CDS_DIR_ENV, str(tmp_path))
    claimed = cds.plan({})
    assert claimed.dumps
    (tmp,) = tmp_path.glob("*.tmp")
    tmp.write_bytes(cds.MAGIC + b"written at exit")
    dead = tmp.with_name(tmp.name.replace(f".{os.getpid()}.", ".999999999."))
    tmp.rename(dead)  # its process has exited since
    cds.tidy(str(tmp_path))
    assert not dead.exists()
    assert [p.name for p in tmp_path.iterdir()] == [dead.name.rsplit(".", 2)[0]]
