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
