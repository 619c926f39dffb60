"""Streaming DataFrames as sources: a file stream feeds the topology exactly as a topic
does, replayed batches are skipped, and a DataFrame that cannot be a source says why."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession

from common.errors import ConfigError, StreamsError
from runtime.app.app import StreamsApp
from runtime.spark.delta_table_source import delta_table_stream
from runtime.spark.session import check_local_workers
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from streams import Serdes, StreamsBuilder
from streams.cli import main
from tests.runtime.spark.test_app import (
    load_example,
    output_counts,
    produce_lines,
    reference_counts,
)
from topology.api.options import Consumed, Grouped, Materialized

FILE_SCHEMA = "key string, value string, timestamp long"


def write_json(directory: Path, name: str, rows: list[dict[str, Any]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.replace(tmp, directory / name)  # a file source must never see a half-written file


def line_files(directory: Path, lines: list[tuple[str | None, str]], per_file: int) -> None:
    for i in range(0, len(lines), per_file):
        rows = [
            {"key": k, "value": v, "timestamp": 1_000 + i + j}
            for j, (k, v) in enumerate(lines[i : i + per_file])
        ]
        write_json(directory, f"part-{i:05d}.json", rows)


def config_for(example: Any, root: str, tmp_path: Path, app_id: str) -> dict[str, Any]:
    return {
        **example.CONFIG,
        "application.id": app_id,
        "topics.root": root,
        "state.dir": str(tmp_path / "state"),
        "commit.interval.ms": 50,
        "group.initial.rebalance.delay.ms": 0,
        "num.partitions": 2,
    }


def test_a_file_stream_gives_the_same_outputs_as_the_topic_it_replaces(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    example = load_example("wordcount")
    lines = example.generate(120)
    # the topic way
    admin.create(example.INPUT, 2)
    admin.create(example.OUTPUT, 2)
    produce_lines(admin, example.INPUT, lines)
    StreamsApp(
        example.build_topology(), config_for(example, root, tmp_path, "by-topic"), spark=spark
    ).run_until_idle()
    by_topic, _ = output_counts(root, example.OUTPUT)
    # the DataFrame way: another root, the same lines as JSON files (key, value, timestamp)
    root2 = str(tmp_path / "root2")
    admin2 = TopicAdmin(root2)
    admin2.create(example.OUTPUT, 2)
    files = tmp_path / "incoming"
    line_files(files, lines, per_file=25)
    stream = spark.readStream.schema(FILE_SCHEMA).option("maxFilesPerTrigger", 2).json(str(files))
    app = StreamsApp(
        example.build_topology(),
        config_for(example, root2, tmp_path / "b", "by-frame"),
        spark=spark,
        sources={example.INPUT: stream},
    )
    app.run_until_idle()  # every file present at the start: 5 files, 2 a batch
    (ingest,) = app.ingests
    assert ingest.records == len(lines) and ingest.batches == 3
    assert admin2.describe(example.INPUT).num_partitions == 2  # created: num.partitions
    by_frame, _ = output_counts(root2, example.OUTPUT)
    assert by_frame == by_topic == reference_counts(example, lines)
    # the records keep the file's timestamps; keys partition with Kafka's partitioner
    reader = TopicReader(root2)
    stamps = sorted(
        ts
        for p in range(2)
        for ts in reader.read(example.INPUT, p, 0).column("timestamp").to_pylist()
    )
    assert stamps == list(range(1_000, 1_000 + len(lines)))


def test_a_batch_spark_replays_after_its_commit_landed_is_skipped(
    spark: SparkSession, root: str, tmp_path: Path
) -> None:
    """Spark replays a batch whose end it did not record (a crash between the ingest's
    commit and Spark's commit log): the replay must add nothing."""
    example = load_example("wordcount")
    lines = example.generate(60)
    admin = TopicAdmin(root)
    admin.create(example.OUTPUT, 2)
    files = tmp_path / "incoming"
    line_files(files, lines, per_file=20)
    config = config_for(example, root, tmp_path, "replayed")

    def run() -> StreamsApp:
        stream = spark.readStream.schema(FILE_SCHEMA).json(str(files))
        app = StreamsApp(
            example.build_topology(), config, spark=spark, sources={example.INPUT: stream}
        )
        app.run_until_idle()
        return app

    first = run()
    assert first.ingests[0].records == 60
    checkpoint = Path(first.checkpoint_location().removeprefix("file:"), "sources", example.INPUT)
    commits = sorted((checkpoint / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    commits[-1].unlink()  # Spark forgets that the last batch ended: it runs it again
    (commits[-1].parent / f".{commits[-1].name}.crc").unlink(missing_ok=True)
    second = run()
    assert second.ingests[0].skipped == 1 and second.ingests[0].records == 0
    total = sum(TopicReader(root).end_offsets(example.INPUT).values())
    assert total == 60  # nothing twice
    latest, _ = output_counts(root, example.OUTPUT)
    assert latest == reference_counts(example, lines)


def test_a_dataframe_that_cannot_be_a_source_is_refused_with_what_to_change(
    spark: SparkSession, root: str, tmp_path: Path
) -> None:
    example = load_example("wordcount")
    config = config_for(example, root, tmp_path, "refused")
    files = tmp_path / "in"
    write_json(files, "a.json", [{"k": "a", "value": "x"}])

    def attempt(sources: dict[str, Any]) -> str:
        with pytest.raises(ConfigError) as info:
            StreamsApp(example.build_topology(), config, spark=spark, sources=sources)
        return str(info.value)

    reader = spark.readStream.schema("k string, value string, n int, timestamp string")
    stream = reader.json(str(files))
    assert "no column 'key'" in attempt({example.INPUT: stream})
    assert "withColumnRenamed" in attempt({example.INPUT: stream})
    keyed = stream.withColumnRenamed("k", "key")
    typed = keyed.drop("timestamp", "value").withColumnRenamed("n", "value")
    assert "column 'value' is int; it must be binary or string" in attempt({example.INPUT: typed})
    bad_ts = keyed.drop("n")
    assert "column 'timestamp' is string" in attempt({example.INPUT: bad_ts})
    ok = bad_ts.drop("timestamp")
    assert "reads no topic 'clicks'" in attempt({"clicks": ok})
    batch = spark.createDataFrame([("a", "b")], "key string, value string")
    assert "batch DataFrame" in attempt({example.INPUT: batch})


def test_a_record_for_a_partition_the_topic_lacks_stops_the_app_naming_it(
    spark: SparkSession, root: str, tmp_path: Path
) -> None:
    example = load_example("wordcount")
    admin = TopicAdmin(root)
    admin.create(example.INPUT, 2)
    admin.create(example.OUTPUT, 2)
    files = tmp_path / "in"
    write_json(files, "a.json", [{"key": "a", "value": "x y", "partition": p} for p in (0, 1, 7)])
    stream = spark.readStream.schema("key string, value string, partition int").json(str(files))
    app = StreamsApp(
        example.build_topology(),
        config_for(example, root, tmp_path, "partitioned"),
        spark=spark,
        sources={example.INPUT: stream},
    )
    with pytest.raises(StreamsError, match=r"row 2: partition 7 is not a partition of topic"):
        app.run_until_idle()
    assert sum(TopicReader(root).end_offsets(example.INPUT).values()) == 0  # none ingested


def test_an_existing_delta_table_is_read_as_it_grows_each_row_once(
    spark: SparkSession, root: str, tmp_path: Path
) -> None:
    """A Delta table of the user's own schema: key, value and timestamp columns named;
    what later versions add is read on the next run, nothing twice."""
    lake = str(tmp_path / "lake" / "orders")

    def orders(first: int, n: int) -> pa.Table:
        return pa.table(
            {
                "order_id": [f"o{i}" for i in range(first, first + n)],
                "customer": [f"c{i % 3}" for i in range(first, first + n)],
                "amount": [float(i) for i in range(first, first + n)],
                "created_at": [
                    datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
                    + datetime.timedelta(seconds=i)
                    for i in range(first, first + n)
                ],
            }
        )

    write_deltalake(lake, orders(0, 10))
    write_deltalake(lake, orders(10, 5), mode="append")
    b = StreamsBuilder()
    (
        b.stream("orders", Consumed.with_(Serdes.String(), Serdes.Json()))
        .map(lambda _k, v: (v["customer"], v["amount"]))
        .group_by_key(Grouped.with_(Serdes.String(), Serdes.Double()))
        .reduce(lambda a, c: a + c, Materialized.as_("totals").with_value_serde(Serdes.Double()))
        .to_delta("totals")
    )
    config = {
        "application.id": "lake",
        "topics.root": root,
        "state.dir": str(tmp_path / "state"),
        "commit.interval.ms": 50,
        "group.initial.rebalance.delay.ms": 0,
        "num.partitions": 2,
    }

    def run() -> StreamsApp:
        stream = delta_table_stream(
            spark, lake, key="order_id", value=["customer", "amount"], timestamp="created_at"
        )
        app = StreamsApp(b.build(), config, spark=spark, sources={"orders": stream})
        app.run_until_idle()
        return app

    assert run().ingests[0].records == 15
    write_deltalake(lake, orders(15, 6), mode="append")
    assert run().ingests[0].records == 6  # only what the new version added
    rows = DeltaTable(f"{root}/tables/totals").to_pyarrow_table().to_pylist()
    expected: dict[str, float] = {}
    for i in range(21):
        expected[f"c{i % 3}"] = expected.get(f"c{i % 3}", 0.0) + i
    assert {r["key"]: r["value"] for r in rows} == expected
    reader = TopicReader(root)
    stamps = sorted(
        t for p in range(2) for t in reader.read("orders", p, 0).column("timestamp").to_pylist()
    )
    start = int(datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC).timestamp() * 1000)
    assert stamps == [start + 1000 * i for i in range(21)]
    with pytest.raises(ConfigError, match="no column 'id' for the records' key"):
        delta_table_stream(spark, lake, key="id", value="*")


def test_streams_eos_run_reads_the_dataframes_a_topology_file_builds(
    spark: SparkSession, root: str, tmp_path: Path
) -> None:
    """A topology file's build_sources(spark) gives `streams-eos run` its DataFrames."""
    files = tmp_path / "in"
    write_json(files, "a.json", [{"key": f"u{i % 3}", "value": "x"} for i in range(9)])
    topology_file = tmp_path / "job.py"
    topology_file.write_text(
        f"""
from streams import StreamsBuilder

CONFIG = {{"application.id": "cli-frames", "default.key.serde": "string",
          "default.value.serde": "string", "group.initial.rebalance.delay.ms": 0}}


def build_topology():
    b = StreamsBuilder()
    b.stream("clicks").group_by_key().count().to_delta("per-user")
    return b.build()


def build_sources(spark):
    return {{"clicks": spark.readStream.schema("key string, value string").json({str(files)!r})}}
"""
    )
    # --verbose: in this process, logs stay on the terminal (no file handler is left behind)
    args = ["run", str(topology_file), "--until-idle", "--root", root, "--verbose"]
    args += ["--config", f"state.dir={tmp_path / 'state'}", "--config", "commit.interval.ms=50"]
    assert main(args) == 0
    rows = DeltaTable(f"{root}/tables/per-user").to_pyarrow_table().to_pylist()
    assert {r["key"]: r["value"] for r in rows} == {"u0": 3, "u1": 3, "u2": 3}


def test_a_local_session_whose_workers_lack_the_project_is_named_with_the_fix(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's own SparkSession runs `python3` from PATH as its workers unless told:
    when that Python lacks the project, start() says what to set instead of failing in a
    worker."""
    check_local_workers(spark)  # the test session's workers run this interpreter
    other = tmp_path / "python3"
    other.write_text("#!/bin/sh\nexit 1\n")
    other.chmod(0o755)
    monkeypatch.setenv("PYSPARK_PYTHON", str(other))
    with pytest.raises(ConfigError, match=r"cannot import spark-streams-eos .* PYSPARK_PYTHON="):
        check_local_workers(spark)
