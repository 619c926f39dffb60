"""``streams-eos status`` on a running and on a stopped application."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from runtime.app.app import StreamsApp
from runtime.storage.producer import Producer
from runtime.storage.topics import TopicAdmin
from streams.cli import main
from tests.runtime.spark.helpers import eos_config
from topology import Materialized, StreamsBuilder


def word_count() -> Any:
    b = StreamsBuilder()
    b.stream("lines").flat_map_values(str.split).group_by(lambda _k, w: w).count(
        Materialized.as_("word-counts")
    ).to_stream().to("counts-out")
    return b.build()


def status(root: str, capsys: pytest.CaptureFixture[str], *extra: str) -> Any:
    capsys.readouterr()
    assert main(["status", "--root", root, "--application-id", "status-app", *extra]) == 0
    out = capsys.readouterr().out
    return json.loads(out) if "--json" in extra else out


def test_status_shows_instances_threads_tasks_lag_transactions_and_stores(
    spark: SparkSession,
    admin: TopicAdmin,
    root: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    admin.create("lines", 2)
    admin.create("counts-out", 2)
    producer = Producer(admin)
    for i in range(60):
        producer.send("lines", f"k{i}".encode(), f"a b w{i % 7}".encode(), timestamp=1000 + i)
    producer.flush()
    config = eos_config("status-app", root, str(tmp_path / "state"), **{"max.poll.records": 10})
    app = StreamsApp(word_count(), config, spark=spark)
    app.start()
    try:
        deadline = time.monotonic() + 120
        while not (app.thread and app.thread.batches >= 2 and app.thread.caught_up()):
            assert time.monotonic() < deadline, "the application did not catch up"
            time.sleep(0.1)
        time.sleep(6)  # a batch after the status interval rewrites the record
        producer.send("lines", b"k", b"late words", timestamp=5000)
        producer.flush()
        time.sleep(2)
        running = status(root, capsys, "--json")
        text = status(root, capsys)
    finally:
        app.close()
    [instance] = running["instances"]
    assert instance["state"] == "RUNNING" and instance["heartbeating"]
    [thread] = instance["threads"]
    assert thread["alive"] and thread["batches"] >= 2
    assert sorted(thread["tasks"]) == ["0_0", "0_1", "1_0", "1_1"]
    assert thread["commit_latency_avg_ms"] > 0
    lags = {(x["topic"], x["partition"]): x for x in running["lag"]}
    assert {x["lag"] for x in lags.values() if x["topic"] == "lines"} == {0}
    assert all(x["owner"] for x in lags.values() if x["topic"] == "lines")
    [txn] = running["transactions"]
    assert txn["transactional.id"].startswith("status-app-") and txn["sequence"] >= 2
    stores = {(s["store"], s["partition"]): s for s in running["stores"]}
    assert set(stores) == {("word-counts", 0), ("word-counts", 1)}
    assert sum(s["changelog_records"] for s in stores.values()) >= 9
    assert all(s["keys"] is not None for s in stores.values())
    assert running["group"]["state"] == "Stable" and len(running["group"]["members"]) == 1
    for header in ("INSTANCE", "THREAD", "TOPIC", "TRANSACTIONAL ID", "STORE"):
        assert header in text
    assert "RUNNING" in text
    # stopped: the record says so, the thread is not alive, nothing heartbeats
    stopped = status(root, capsys, "--json")
    [instance] = stopped["instances"]
    assert instance["state"] == "NOT_RUNNING" and not instance["heartbeating"]
    assert not instance["threads"][0]["alive"]
    assert stopped["group"]["members"] == []
    assert {x["lag"] for x in stopped["lag"] if x["topic"] == "lines"} == {0}
    assert "NOT_RUNNING" in status(root, capsys)
