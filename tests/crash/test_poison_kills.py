"""Poison records under SIGKILLs (issue 39): 2% of the word count's input cannot be
deserialized; five kills later each is in the dead-letter topic exactly once (by source
partition and offset) and the rest of the output equals the reference without them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.errors import ConfigError
from streams.crash.harness import CrashTestError, crashtest
from streams.crash.inputs import InputRecord
from streams.crash.poison import POISON_PREFIX, is_poison, poison_records
from streams.crash.workspace import Workspace
from tests.clitools import cli
from tests.crash.conftest import EXAMPLES, FAST_JVM, RUN_CONFIG

WORDCOUNT = EXAMPLES / "wordcount.py"
BYTES_TOPOLOGY = """
from topology import StreamsBuilder

CONFIG = {"application.id": "bytes", "default.key.serde": "bytes",
          "default.value.serde": "bytes"}


def build_topology():
    b = StreamsBuilder()
    b.stream("in").to("out")
    return b.build()
"""


def test_poison_replaces_the_chosen_fraction_and_keeps_the_rest() -> None:
    records = [InputRecord("t", f"k{i}", f"v{i}", i) for i in range(400)]
    poisoned = poison_records(records, 0.02, seed=3)
    bad = [r for r in poisoned if is_poison(r.value)]
    assert len(bad) == 8 and poison_records(records, 0.02, seed=3) == poisoned
    assert all(isinstance(r.value, bytes) and r.value.startswith(POISON_PREFIX) for r in bad)
    assert [(r.key, r.timestamp) for r in poisoned] == [(r.key, r.timestamp) for r in records]
    with pytest.raises(ConfigError, match=r"--poison 1.5"):
        poison_records(records, 1.5, seed=0)


def test_a_topology_that_accepts_the_poison_is_refused_before_any_run(tmp_path: Path) -> None:
    app = tmp_path / "bytes_app.py"
    app.write_text(BYTES_TOPOLOGY)
    inputs = [InputRecord("in", "k", "v", 1), InputRecord("in", "k2", "v2", 2)]
    test = Workspace(app, inputs=inputs, workdir=tmp_path / "w", poison=0.5)
    with pytest.raises(CrashTestError, match=r"cannot be deserialized on in"):
        test.setup()


@pytest.mark.slow
def test_five_kills_with_two_percent_poison_hold(tmp_path: Path) -> None:
    report = crashtest(
        WORDCOUNT,
        generate=400,
        kills=5,
        seed=11,
        workdir=tmp_path,
        config={**RUN_CONFIG, "max.poll.records": "3"},
        env=FAST_JVM,
        poison=0.02,
        report=tmp_path / "report.json",
    )
    assert report.exactly_once, report.text()
    assert len(report.kills) == 5 and report.restarts == 5
    assert report.dead_letters is not None
    assert report.dead_letters["expected"] == report.dead_letters["found"] == 8
    assert report.records_out == report.records_expected > 0
    print(report.text())


@pytest.mark.slow
def test_the_command_line_takes_poison(tmp_path: Path) -> None:
    done = cli(
        str(tmp_path / "root"),
        "crashtest", str(WORDCOUNT), "--generate", "150", "--kills", "1", "--poison", "0.02",
        "--workdir", str(tmp_path), "--report", str(tmp_path / "r.json"),
        "--config", "group.initial.rebalance.delay.ms=0",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "dead letters (crashtest-dead-letters): each poison record once" in done.stdout
    assert json.loads((tmp_path / "r.json").read_text())["dead_letters"]["found"] == 3
