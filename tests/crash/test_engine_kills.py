"""Operators the examples do not use, SIGKILLed five times on local Spark: a session
window, a stream-time punctuator with its store (and, as their topologies land here, the
global-table and foreign-key joins) end exactly as the reference run."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.crash.harness import crashtest
from tests.crash.conftest import EXAMPLES, FAST_JVM, RUN_CONFIG

TOPOLOGIES = Path(__file__).resolve().parent / "topologies"
QUICK = {**RUN_CONFIG, "max.poll.records": "3"}
#: Each topology with enough input for five kills while it runs.
CASES = {
    **{p.stem: (p, 80) for p in sorted(TOPOLOGIES.glob("*.py")) if p.stem != "__init__"},
    "global_enrichment": (EXAMPLES / "global_enrichment.py", 400),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_five_kills_leave_exactly_the_reference(name: str, tmp_path: Path) -> None:
    path, records = CASES[name]
    report = crashtest(
        path,
        generate=records,
        kills=5,
        seed=5,
        workdir=tmp_path,
        config=QUICK,
        env=FAST_JVM,
        report=tmp_path / "report.json",
    )
    assert report.exactly_once, report.text()
    assert not any("ran out" in note for note in report.notes), report.text()
    assert len(report.kills) == 5 and report.restarts == 5
    assert report.duplicates == report.losses == 0
    assert report.records_out == report.records_expected > 0
    assert all(s["ok"] for s in report.stores)  # a global table's only store is global
