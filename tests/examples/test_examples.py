"""Each example, run on local Spark until idle on generated input, writes exactly what the
TopologyTestDriver writes for the same input; one also runs through ``streams-eos run``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import polars as pl
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from runtime.app.app import StreamsApp
from runtime.app.topology_file import generated_records
from runtime.storage.partitioner import partition_for_key
from runtime.storage.topics import TopicAdmin
from tests.delta_readers import every_table_agrees
from tests.examples.harness import (
    EXAMPLES,
    Out,
    Outputs,
    assert_same_outputs,
    count,
    driver_outputs,
    load_example,
    output_topics,
    produce,
    topic_outputs,
    values,
)
from topology import Topology

N = 300


def run_on_spark(
    spark: SparkSession,
    example: ModuleType,
    root: str,
    state_dir: Path,
    *,
    topology: Topology | None = None,
    metrics: dict[str, float] | None = None,
    **extra: Any,
) -> Outputs:
    """Run the example until idle (several small batches); return its output topics (and
    put the application's metrics into ``metrics``)."""
    config: dict[str, Any] = {
        **example.CONFIG,
        "topics.root": root,
        "state.dir": str(state_dir),
        "commit.interval.ms": 50,
        "group.initial.rebalance.delay.ms": 0,  # one instance: no one to wait for
        "max.poll.records": 40,
        **extra,
    }
    topology = topology or example.build_topology()
    app = StreamsApp(topology, config, spark=spark)
    app.run_until_idle()
    assert every_table_agrees(TopicAdmin(root), root) > 2  # every Delta reader, every table
    if metrics is not None:
        metrics.update(app.metrics().by_name("stream-thread-metrics"))
    return topic_outputs(root, output_topics(example))


def check_against_driver(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path, name: str, **extra: Any
) -> tuple[ModuleType, Outputs]:
    example = load_example(name)
    records = produce(admin, example, N)
    got = run_on_spark(spark, example, root, tmp_path / "state", **extra)
    return example, assert_equal(example, got, driver_outputs(example, records))


def assert_equal(example: ModuleType, got: Outputs, expected: Outputs, **kw: Any) -> Outputs:
    assert_same_outputs(got, expected, **kw)
    assert all(count(got, t) for t in output_topics(example)), "an output topic is empty"
    return got


def test_flash_sale_matches_the_driver_and_never_oversells(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    example, got = check_against_driver(spark, admin, root, tmp_path, "flash_sale")
    accepted = values(got, example.ACCEPTED, json.loads)
    rejected = values(got, example.REJECTED, json.loads)
    assert len(accepted) + len(rejected) == N
    sold = Counter[str]()
    for order in accepted:
        sold[order["item"]] += order["qty"]
    for item, units in sold.items():
        assert units <= example.INITIAL_STOCK[item], f"{item} oversold: {units}"
    assert any(units == example.INITIAL_STOCK[i] for i, units in sold.items())  # sold out
    assert {r["reason"] for r in rejected} <= {"sold out", "not enough stock"}


def by_source_partition(example: ModuleType) -> Any:
    """Movements of one SKU keep their order among those of one input partition (the
    order of records of different input tasks in one output partition is not defined)."""
    partitions = example.TOPICS[example.INPUT]

    def group(record: Out) -> tuple[bytes | None, int]:
        order_id = json.loads(record[1] or b"{}")["order_id"]
        return record[0], partition_for_key(order_id.encode(), partitions)

    return group


def test_order_inventory_writes_both_topics_like_the_driver(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    example = load_example("order_inventory")
    records = produce(admin, example, N)
    got = run_on_spark(spark, example, root, tmp_path / "state")
    expected = driver_outputs(example, records)
    order = {example.INVENTORY: by_source_partition(example)}
    assert_equal(example, got, expected, order=order)
    confirmations = values(got, example.CONFIRMATIONS, json.loads)
    movements = values(got, example.INVENTORY, json.loads)
    confirmed = {c["order_id"]: c["units"] for c in confirmations if c["status"] == "confirmed"}
    assert len(confirmations) == N and 0 < len(confirmed) < N
    units = Counter[str]()
    for m in movements:
        units[m["order_id"]] -= m["delta"]
    assert units == confirmed  # every confirmed order moved its units, nothing else moved


def test_pageviews_emits_the_drivers_final_counts_once_per_window(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    example, got = check_against_driver(spark, admin, root, tmp_path, "pageviews")
    results = values(got, example.OUTPUT, json.loads)
    windows = [(r["page"], r["window_start"]) for r in results]
    assert len(windows) == len(set(windows)), "a window was emitted twice"
    assert len({w for _, w in windows}) >= 3
    assert 0 < sum(r["views"] for r in results) < N


def test_enrichment_joins_like_the_driver(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    # Polls of 5 records per partition cut the customers table (about 17 per partition)
    # across batches: a purchase must wait until the profiles stamped before it are read
    # (max.task.idle.ms=0, the default).
    example = load_example("enrichment")
    records = produce(admin, example, N)
    metrics: dict[str, float] = {}
    got = run_on_spark(
        spark, example, root, tmp_path / "state", metrics=metrics, **{"max.poll.records": 5}
    )
    assert_equal(example, got, driver_outputs(example, records))
    enriched = values(got, example.OUTPUT, json.loads)
    assert len(enriched) == N
    tiers = Counter(p["tier"] for p in enriched)
    assert tiers["guest"] and tiers["gold"] and len(tiers) >= 4
    assert metrics["held-back-records-total"] > 0


def test_enrichment_without_waiting_joins_purchases_too_early(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    """max.task.idle.ms=-1: each batch is processed as read, so purchases of the first
    batches find only part of the customers table (the waiting above is what fixes it)."""
    example = load_example("enrichment")
    records = produce(admin, example, N)
    got = run_on_spark(
        spark,
        example,
        root,
        tmp_path / "state",
        **{"max.task.idle.ms": -1, "max.poll.records": 5},
    )
    expected = driver_outputs(example, records)
    assert count(got, example.OUTPUT) == N
    guests = Counter(p["tier"] for p in values(got, example.OUTPUT, json.loads))["guest"]
    want = Counter(p["tier"] for p in values(expected, example.OUTPUT, json.loads))["guest"]
    assert guests > want


def test_streams_eos_run_generates_and_runs_an_example(root: str, tmp_path: Path) -> None:
    example = load_example("flash_sale")
    n = 120
    env = {**os.environ, "STREAMS_ROOT": root, "PYSPARK_PYTHON": sys.executable}
    cmd = [
        str(Path(sys.executable).with_name("streams-eos")),
        "run",
        str(EXAMPLES / "flash_sale.py"),
        "--generate",
        str(n),
        "--until-idle",
        "--config",
        f"topics.root={root}",
        "--config",
        f"state.dir={tmp_path / 'state'}",
        "--config",
        "commit.interval.ms=100",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"produced {n} records to {example.INPUT}" in result.stderr
    # what a person sees: where the logs go, a bar while producing, a line per batch, and
    # none of Spark's log lines (they are in the log file)
    err = result.stderr.splitlines()
    log_file = tmp_path / "state" / "flash-sale" / "logs" / "streams-eos.log"
    assert err[0] == f"log: {log_file} (--verbose: logs on the terminal)"
    assert any(line.startswith(f"producing to {example.INPUT} [####") for line in err)
    batches = [line for line in err if re.match(r"batch \d+: in [\d,]+ out [\d,]+ lag", line)]
    assert (
        batches and sum(int(b.split(" in ")[1].split()[0].replace(",", "")) for b in batches) >= n
    )
    assert not [line for line in err if " WARN " in line or "Traceback" in line], err
    assert log_file.is_file()
    summary = json.loads(result.stderr.strip().splitlines()[-1])
    assert summary["application.id"] == "flash-sale" and summary["batches"] >= 1
    expected = driver_outputs(example, generated_records(example, n))
    assert_equal(example, topic_outputs(root, output_topics(example)), expected)


@pytest.mark.parametrize(
    "name", ["flash_sale", "order_inventory", "pageviews", "enrichment", "global_enrichment"]
)
def test_an_example_describes_and_generates_deterministically(name: str) -> None:
    example = load_example(name)
    assert str(example.build_topology().describe()).startswith("Topologies:")
    first = generated_records(example, 50)
    assert first == generated_records(example, 50)
    assert set(first) <= set(example.TOPICS)
    assert all(ts is not None for raws in first.values() for _, _, ts in raws)


def test_the_clicks_job_upserts_the_counts_of_its_files(
    spark: Any, root: str, tmp_path: Path
) -> None:
    """examples/clicks_job.py: JSON files -> join with the users table -> windowed count
    -> upserted Delta table, equal to the counts computed from the files."""
    example = load_example("clicks_job")
    example.fill_users(root)
    inputs = str(tmp_path / "in")
    clicks = example.write_clicks(400, inputs)
    config = {
        **example.CONFIG,
        "topics.root": root,
        "state.dir": str(tmp_path / "state"),
        "commit.interval.ms": 50,
        "group.initial.rebalance.delay.ms": 0,
    }
    stream = example.file_stream(spark, inputs)
    app = StreamsApp(example.build_topology(), config, spark=spark, sources={"clicks": stream})
    app.run_until_idle()
    assert example.table_rows(root) == example.reference(clicks)
    sink = os.path.join(root, "tables", example.TABLE)  # every Delta reader reads it alike
    ours = sorted(map(str, DeltaTable(sink).to_pyarrow_table().to_pylist()))
    assert sorted(map(str, pl.read_delta(sink).to_arrow().to_pylist())) == ours
    assert every_table_agrees(TopicAdmin(root), root) > 2
