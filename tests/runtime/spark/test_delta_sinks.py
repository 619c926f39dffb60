"""Delta table sinks on Spark: typed rows committed in each batch's transaction, equal to
what the test driver computes, readable by every Delta reader."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import polars
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from common.errors import StreamsError
from runtime.app.app import StreamsApp
from runtime.storage.producer import Producer
from runtime.storage.topics import TopicAdmin
from streams import Serdes, StreamsBuilder, TopologyTestDriver
from topology.api.options import Materialized
from topology.graph.topology import Topology

CONFIG = {"default.key.serde": "string", "default.value.serde": "string"}
LINES = [
    ("l1", "the quick brown fox"),
    ("l2", "jumps over the lazy dog"),
    ("l3", "the dog barks"),
    ("l4", "a quick red fox"),
    ("l5", "the end"),
]


@dataclasses.dataclass
class Word:
    word: str
    length: int


def topology(root: str | None = None) -> Topology:
    b = StreamsBuilder()
    words = b.stream("lines").flat_map_values(lambda line: line.split())
    counts = words.group_by(lambda _k, w: w).count(Materialized.as_("word-counts"))
    counts.to_delta("word-counts")  # upsert: one row per word
    # a key leaves the filtered table (a tombstone) once its count passes 1: its row goes
    counts.filter(lambda _w, n: n == 1).to_delta("said-once")
    target = "words" if root is None else str(Path(root).parent / "outside" / "words")
    words.map_values(lambda w: Word(w, len(w))).to_delta(target)  # append, a path
    return b.build()


def reference(kind: str) -> list[dict[str, Any]]:
    with TopologyTestDriver(topology(), {**CONFIG, "application.id": "ref"}) as driver:
        source = driver.create_input_topic("lines", Serdes.String(), Serdes.String())
        for i, (key, line) in enumerate(LINES):
            source.pipe_input(key, line, timestamp=1_000 * (i + 1))
        return driver.read_delta_table(kind)


def app_config(app_id: str, root: str, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {
        **CONFIG,
        "application.id": app_id,
        "topics.root": root,
        "state.dir": str(tmp_path / "state"),
        "commit.interval.ms": 50,
        "group.initial.rebalance.delay.ms": 0,
        **extra,
    }


def rows_of(uri: str) -> list[dict[str, Any]]:
    return DeltaTable(uri).to_pyarrow_table().to_pylist()


def canonical(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(tuple(sorted(r.items())) for r in rows)


@pytest.mark.parametrize(
    "guarantee",
    [
        "exactly_once_v2",
        pytest.param("at_least_once", marks=pytest.mark.slow),
        pytest.param("exactly_once", marks=pytest.mark.slow),
    ],
)
def test_delta_sinks_hold_what_the_test_driver_computes_for_every_reader(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path, guarantee: str
) -> None:
    admin.create("lines", 2)
    producer = Producer(admin)
    for i, (key, line) in enumerate(LINES):
        producer.send("lines", key.encode(), line.encode(), timestamp=1_000 * (i + 1))
        producer.flush()  # one file each: several batches
    config = app_config(
        "sinks", root, tmp_path, **{"max.poll.records": 2, "processing.guarantee": guarantee}
    )
    StreamsApp(topology(root), config, spark=spark).run_until_idle()
    tables = {
        "word-counts": f"{root}/tables/word-counts",
        "said-once": f"{root}/tables/said-once",
        "words": str(tmp_path / "outside" / "words"),
    }
    for name, uri in tables.items():
        expected = reference("words" if name == "words" else name)
        assert canonical(rows_of(uri)) == canonical(expected), name
    counts = {r["key"]: r["value"] for r in rows_of(tables["word-counts"])}
    assert counts["the"] == 4 and counts["fox"] == 2
    assert "the" not in {r["key"] for r in rows_of(tables["said-once"])}  # deleted
    schema = DeltaTable(tables["words"]).schema().to_arrow()
    assert [f.name for f in pa.schema(schema)] == ["key", "word", "length", "timestamp"]
    # every reader: pyarrow over the files the Delta log lists, polars' own reader
    for uri in tables.values():
        files = DeltaTable(uri).file_uris()
        by_files = ds.dataset(files, format="parquet").to_table().to_pylist()
        assert canonical(by_files) == canonical(rows_of(uri))
    by_polars = polars.read_delta(tables["word-counts"]).to_dicts()
    assert canonical(by_polars) == canonical(rows_of(tables["word-counts"]))


def test_a_value_that_cannot_fit_the_table_aborts_its_batch_naming_the_column(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    admin.create("events", 1)
    b = StreamsBuilder()
    b.stream("events").map_values(lambda v: {"n": int(v) if v.isdigit() else v}).to_delta("t")
    producer = Producer(admin)
    producer.send("events", b"k", b"1")
    producer.flush()
    config = app_config("misfit", root, tmp_path)
    StreamsApp(b.build(), config, spark=spark).run_until_idle()
    producer.send("events", b"k", b"one")
    producer.flush()
    with pytest.raises(StreamsError, match=r"column 'n' is int64 in the table"):
        StreamsApp(b.build(), config, spark=spark).run_until_idle()
    assert rows_of(f"{root}/tables/t") == [
        {"key": "k", "n": 1, "timestamp": rows_of(f"{root}/tables/t")[0]["timestamp"]}
    ]
