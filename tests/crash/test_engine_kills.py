"""Operators the examples do not use, SIGKILLed five times on local Spark: a session
window, a stream-time punctuator with its store (and, as their topologies land here, the
global-table and foreign-key joins) end exactly as the reference run."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.crashtest import crashtest
from tests.crash.conftest import FAST_JVM, RUN_CONFIG

TOPOLOGIES = Path(__file__).resolve().parent / "topologies"
QUICK = {**RUN_CONFIG, "max.poll.records": "3"}


def topology_files() -> list[str]:
    return sorted(p.stem for p in TOPOLOGIES.glob("*.py") if p.stem != "__init__")


@pytest.mark.slow
@pytest.mark.parametrize("name", topology_files())
def test_five_kills_leave_exactly_the_reference(name: str, tmp_path: Path) -> None:
    report = crashtest(
        TOPOLOGIES / f"{name}.py",
        generate=80,
        kills=5,
        seed=5,
        workdir=tmp_path,
        config=QUICK,
        env=FAST_JVM,
        report=tmp_path / "report.json",
    )
    assert report.exactly_once, report.text()
    assert len(report.kills) == 5 and report.restarts == 5
    assert report.duplicates == report.losses == 0
    assert report.records_out == report.records_expected > 0
    assert report.stores and all(s["ok"] for s in report.stores)
