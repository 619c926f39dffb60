"""Examples SIGKILLed again and again on local Spark end exactly as the reference run.

Each kill takes the whole process group (driver, Spark JVM, Python workers) at a fault
point of the commit, at a random moment, or right after a table commit; the application is
started again with the same application.id and state directory, and after the last run the
outputs hold exactly the reference output, the stores equal the reference, nothing hangs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from streams.crash.harness import crashtest
from streams.testing import crashtest as crashtest_from_testing
from tests.crash.conftest import FAST_JVM, RUN_CONFIG, example, runnable_examples

#: Records per example and kill count: enough batches (max.poll.records=2 per partition)
#: for every kill.
GENERATE = {("wordcount", 2): 150, ("wordcount", 5): 160, ("flash_sale", 5): 300}
QUICK = {**RUN_CONFIG, "max.poll.records": "2"}


# two kills (at a fault point of the commit, at a random moment) in the default suite; five
# kills take three minutes an example: slow
@pytest.mark.parametrize(
    ("name", "kills"),
    [
        ("wordcount", 2),
        pytest.param("wordcount", 5, marks=pytest.mark.slow),
        pytest.param("flash_sale", 5, marks=pytest.mark.slow),
    ],
)
def test_kills_under_exactly_once_v2_leave_exactly_the_reference(
    name: str, kills: int, tmp_path: Path
) -> None:
    path = example(name)
    report = crashtest(
        path,
        generate=GENERATE[name, kills],
        kills=kills,
        seed=11,
        workdir=tmp_path,
        config=QUICK,
        env=FAST_JVM,
        report=tmp_path / "report.json",
    )
    assert report.exactly_once, report.text()
    assert len(report.kills) == kills and report.restarts == kills
    assert {k.kind for k in report.kills} >= {"fault", "random"}
    assert report.duplicates == report.losses == 0
    assert report.records_out == report.records_expected > 0
    assert report.stores and all(s["ok"] for s in report.stores)
    assert report.recovery_p50 is not None and report.recovery_max is not None
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["exactly_once"] is True and len(saved["kills"]) == kills


@pytest.mark.slow
def test_at_least_once_under_kills_reports_duplicates_never_losses(tmp_path: Path) -> None:
    """Kills after the outputs are committed, before the positions are (the fault point
    ``before_offsets_commit``): the batch is processed again. The command reports the
    duplicates and exits non-zero."""
    report_path = tmp_path / "report.json"
    result = subprocess.run(
        [
            sys.executable, "-m", "streams.cli", "crashtest", str(example("wordcount")),
            "--generate", "60", "--kills", "2", "--kind", "fault",
            "--guarantee", "at_least_once", "--workdir", str(tmp_path / "work"),
            "--config", "max.poll.records=5", "--report", str(report_path),
        ],
        env={**os.environ, **FAST_JVM},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(report_path.read_text())
    assert len(report["kills"]) == 2
    assert report["duplicates"] > 0, result.stdout
    assert report["losses"] == 0, result.stdout
    assert report["open_transactions"] == [] and report["offsets_lag"] == {}
    assert "exactly-once VIOLATED" in result.stdout
    assert f"duplicates={report['duplicates']} losses=0" in result.stdout


def test_exactly_once_broken_on_purpose_is_caught(tmp_path: Path) -> None:
    """The test-only switch commits outputs before PrepareCommit; one kill in between and
    the replayed batch counts its words twice."""
    report = crashtest(
        example("wordcount"),
        generate=60,
        kills=1,
        kinds=["fault"],
        points=["before_prepare"],
        workdir=tmp_path,
        config={**RUN_CONFIG, "max.poll.records": "5"},
        env={**FAST_JVM, "STREAMS_FAULT_BREAK": "commit_before_prepare"},
    )
    assert not report.exactly_once and report.exit_code == 1
    assert report.duplicates > 0, report.text()
    assert report.diff and "word-counts-out" in report.diff[0]
    assert any(not s["ok"] for s in report.stores), report.text()


def test_the_crash_test_is_exported_by_streams_testing() -> None:
    assert crashtest_from_testing is crashtest


@pytest.mark.slow
@pytest.mark.parametrize("name", runnable_examples())
def test_fifty_kills_on_every_example(name: str, tmp_path: Path) -> None:
    report = crashtest(
        example(name),
        generate=800,  # about two batches per kill, and the rest for the last run
        kills=50,
        seed=50,
        workdir=tmp_path,
        config=QUICK,
        env=FAST_JVM,
        report=tmp_path / "report.json",
    )
    assert report.exactly_once, report.text()
    assert len(report.kills) == 50
