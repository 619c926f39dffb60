"""Dead letters a user can act on (issue 39): a real topology on local Spark whose function
raises sends its failures to the dead-letter topic with the user's own stack trace;
``streams-eos dlq`` summarizes them; ``streams-eos dlq replay`` sends them back after a fix,
each once however often it runs, even when the replay is killed mid-commit."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from common.config import StreamsConfig
from common.handlers import build_dead_letter_queue_record
from common.handlers_api import ErrorHandlerContext
from common.serdes import Serdes
from runtime.app.app import StreamsApp
from runtime.app.dead_letter_replay import read_positions, replay_dead_letters
from runtime.app.dead_letters import LetterFilter, read_dead_letters
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from streams.testkit.driver import TopologyTestDriver
from tests.clitools import cli
from topology import Consumed, Produced, StreamsBuilder, Topology

S = Serdes.String()
APP = "dlq-app"
DLQ = "orders-dlq"
INPUT = [(f"k{i}", f"bad-{i}" if i % 7 == 3 else f"order-{i}") for i in range(24)]


def parse(value: str, *, fixed: bool) -> str:
    """The user's function: rejects ``bad-`` values until it is fixed."""
    if value.startswith("bad-") and not fixed:
        raise ValueError(f"cannot parse {value!r}")
    return value.upper()


def topology(*, fixed: bool) -> Topology:
    b = StreamsBuilder()
    (
        b.stream("orders", Consumed.with_(S, S))
        .map_values(lambda v: parse(v, fixed=fixed))
        .to("out", Produced.with_(S, S))
    )
    return b.build()


def config(root: str, tmp_path: Path) -> StreamsConfig:
    return StreamsConfig.from_dict(
        {
            "application.id": APP,
            "topics.root": root,
            "state.dir": str(tmp_path / "state"),
            "processing.guarantee": "exactly_once_v2",
            "commit.interval.ms": 50,
            "group.initial.rebalance.delay.ms": 0,
            "processing.exception.handler": "log-and-continue",
            "errors.dead.letter.queue.topic.name": DLQ,
        }
    )


def produce_input(admin: TopicAdmin) -> None:
    admin.create("orders", 2)
    admin.create("out", 2)
    producer = Producer(admin)
    for i, (key, value) in enumerate(INPUT):
        producer.send("orders", key.encode(), value.encode(), timestamp=1000 + i,
                      headers=[("trace", f"t{i}".encode())])  # fmt: skip
    producer.flush()


def run_app(spark: SparkSession, root: str, tmp_path: Path, *, fixed: bool) -> None:
    app = StreamsApp(topology(fixed=fixed), config(root, tmp_path), spark=spark)
    app.run_until_idle()


def out_records(root: str) -> Counter[tuple[str, str]]:
    reader = TopicReader(root)
    found: Counter[tuple[str, str]] = Counter()
    for p in reader.end_offsets("out"):
        for r in reader.records("out", p, 0):
            found[(r.key.decode(), r.value.decode())] += 1  # type: ignore[union-attr]
    return found


def clean_run() -> Counter[tuple[str, str]]:
    """The outputs of the fixed topology over the input, without a failure (the driver)."""
    found: Counter[tuple[str, str]] = Counter()
    with TopologyTestDriver(topology(fixed=True), {"application.id": APP}) as driver:
        for i, (key, value) in enumerate(INPUT):
            driver.pipe_raw("orders", key.encode(), value.encode(), 1000 + i)
        for r in driver.output_queue("out"):
            found[(r.key.decode(), r.value.decode())] += 1
    return found


def dlq_json(root: str, *args: str) -> dict[str, Any]:
    done = cli(root, "dlq", *args, "--topic", DLQ, "--json")
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def test_replay_after_a_fix_equals_a_run_without_poison_and_sends_each_once(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    produce_input(admin)
    poison = [(k, v) for k, v in INPUT if v.startswith("bad-")]
    run_app(spark, root, tmp_path, fixed=False)
    letters = list(read_dead_letters(admin, DLQ))
    assert sorted((lt.key, lt.value) for lt in letters) == sorted(
        (k.encode(), v.encode()) for k, v in poison
    )
    for letter in letters:  # the user's error, its own trace: not the runtime's
        assert letter.exception == "builtins.ValueError"
        assert letter.message.startswith("cannot parse 'bad-")
        assert letter.stacktrace.rstrip().endswith(f"ValueError: {letter.message}")
        assert ", in parse\n" in letter.stacktrace
        assert "FileNotFoundError" not in letter.stacktrace, letter.stacktrace
        assert "During handling" not in letter.stacktrace, letter.stacktrace
        assert letter.headers[0][0] == "trace" and letter.source_topic == "orders"

    summary = cli(root, "dlq", "--topic", DLQ)
    assert summary.returncode == 0, summary.stderr
    assert f"dead-letter topic {DLQ}: {len(poison)} records" in summary.stdout
    assert "BY ERROR" in summary.stdout and "builtins.ValueError" in summary.stdout
    data = dlq_json(root)
    assert data["total"] == len(poison)
    assert sum(e["count"] for e in data["by_error"]) == len(poison)
    assert {s["source"] for s in data["by_source"]} <= {"orders-0", "orders-1"}
    assert data["samples"][0]["headers"]["trace"].startswith("t")

    dry = dlq_json(root, "replay", "--dry-run")
    assert len(dry["sent"]) == len(poison) and dry["dry_run"]
    assert sum(TopicReader(root).end_offsets("orders").values()) == len(INPUT)  # nothing sent

    replayed = dlq_json(root, "replay")
    assert len(replayed["sent"]) == len(poison) and {s["to"] for s in replayed["sent"]} == {
        "orders"
    }
    run_app(spark, root, tmp_path, fixed=True)
    assert out_records(root) == clean_run()

    again = cli(root, "dlq", "replay", "--topic", DLQ)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"sent 0 dead letters of {DLQ}; {len(poison)} replayed before")
    assert sum(TopicReader(root).end_offsets("orders").values()) == len(INPUT) + len(poison)


# -- replay's selection and positions, on letters produced directly (no Spark) -----------


def produce_letters(admin: TopicAdmin, specs: list[tuple[str, int, Exception]]) -> None:
    """Dead letters of ``(value, source partition, error)``, as a handler builds them."""
    admin.create("src", 2)
    admin.create(DLQ, 1)
    producer = Producer(admin)
    for offset, (value, partition, exc) in enumerate(specs):
        context = ErrorHandlerContext(
            "src", partition, offset, (("h", b"1"),), "node", "0_0", 5000 + offset
        )
        rec = build_dead_letter_queue_record(DLQ, b"k", value.encode(), context, exc)
        producer.send(DLQ, rec.key, rec.value, timestamp=rec.timestamp, headers=list(rec.headers))
    producer.flush()


def src_values(admin: TopicAdmin) -> list[str]:
    reader = TopicReader(admin)
    out = []
    for p in reader.end_offsets("src"):
        for r in reader.records("src", p, 0):
            assert r.headers == [("h", b"1")]  # the record's own headers, no error headers
            out.append((r.value or b"").decode())
    return sorted(out)


def test_filters_leave_unselected_letters_waiting_and_replay_each_once(admin: TopicAdmin) -> None:
    produce_letters(
        admin,
        [("a", 0, KeyError("x")), ("b", 1, ValueError("y")), ("c", 0, ValueError("z"))],
    )
    first = replay_dead_letters(admin, DLQ, selection=LetterFilter.parse(["exception=ValueError"]))
    assert [lt.value for lt, _ in first.sent] == [b"b", b"c"] and first.waiting == 1
    assert read_positions(admin, DLQ)[0].offset == 0  # "a" waits at offset 0
    assert src_values(admin) == ["b", "c"]
    second = replay_dead_letters(admin, DLQ, selection=LetterFilter.parse(["source=src-1"]))
    assert second.sent == [] and second.already_replayed == 2 and second.waiting == 1
    third = replay_dead_letters(admin, DLQ)  # the KeyError fixed too: everything left
    assert [lt.value for lt, _ in third.sent] == [b"a"]
    assert read_positions(admin, DLQ)[0].offset == 3
    assert replay_dead_letters(admin, DLQ).sent == []
    assert src_values(admin) == ["a", "b", "c"]


def test_skip_unselected_moves_past_for_good(admin: TopicAdmin) -> None:
    produce_letters(admin, [("a", 0, KeyError("x")), ("b", 1, ValueError("y"))])
    result = replay_dead_letters(
        admin, DLQ, selection=LetterFilter.parse(["exception=builtins.ValueError"]),
        skip_unselected=True,
    )  # fmt: skip
    assert [lt.value for lt, _ in result.sent] == [b"b"] and result.skipped == 1
    assert read_positions(admin, DLQ)[0].offset == 2
    assert replay_dead_letters(admin, DLQ).sent == []  # "a" was skipped for good
    assert src_values(admin) == ["b"]


def test_a_replay_killed_mid_commit_neither_loses_nor_duplicates(
    admin: TopicAdmin, root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    produce_letters(admin, [(v, i % 2, ValueError(v)) for i, v in enumerate("abcdef")])
    monkeypatch.setenv("STREAMS_FAULT_POINT", "after_participant_1")
    killed = cli(root, "dlq", "replay", "--topic", DLQ)
    assert killed.returncode == -9, killed.stderr  # SIGKILLed between two participants
    monkeypatch.delenv("STREAMS_FAULT_POINT")
    again = cli(root, "dlq", "replay", "--topic", DLQ, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["sent"] == []  # the decided commit was rolled forward
    assert src_values(admin) == list("abcdef")
    assert cli(root, "dlq", "replay", "--topic", DLQ).stdout.startswith("sent 0")


def test_bad_arguments_name_what_to_fix(admin: TopicAdmin, root: str) -> None:
    produce_letters(admin, [("a", 0, KeyError("x"))])
    bad = cli(root, "dlq", "replay", "--topic", DLQ, "--filter", "colour=red")
    assert bad.returncode != 0 and "expected KEY=VALUE with KEY one of" in bad.stderr
    missing = cli(root, "dlq", "--topic", "nope")
    assert missing.returncode != 0 and "dead-letter topic 'nope' does not exist" in missing.stderr
    to_self = cli(root, "dlq", "replay", "--topic", DLQ, "--to", DLQ)
    assert to_self.returncode != 0 and "the dead-letter topic itself" in to_self.stderr
    assert os.path.isdir(root)
