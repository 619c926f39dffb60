"""The job the DataFrame-source kill test runs (and kills): JSON files read by Spark's file
source, words folded per word (a KTable aggregate), the table upserted into a Delta table.

    python -m tests.crash.dataframe_job ROOT INPUT_DIR STATE_DIR run|idle
"""

from __future__ import annotations

import sys
from typing import Any

from runtime.app.app import StreamsApp
from runtime.spark.session import get_or_create_session
from streams import Materialized, Serdes, StreamsBuilder
from topology.graph.topology import Topology

TABLE = "word-stats"
FILE_SCHEMA = "key string, value string, timestamp long"


def build_topology() -> Topology:
    b = StreamsBuilder()
    stats = (
        b.stream("lines")
        .flat_map_values(lambda line: line.split())
        .group_by(lambda _k, word: word)
        .aggregate(
            lambda: {"count": 0, "letters": 0},
            lambda _w, word, agg: {
                "count": agg["count"] + 1,
                "letters": agg["letters"] + len(word),
            },
            Materialized.as_("word-stats").with_value_serde(Serdes.Json()),
        )
    )
    stats.to_delta(TABLE)
    return b.build()


def reference(lines: list[str]) -> dict[str, dict[str, int]]:
    """What the table must hold: per word, how often it came and its letters in all."""
    out: dict[str, dict[str, int]] = {}
    for line in lines:
        for word in line.split():
            row = out.setdefault(word, {"count": 0, "letters": 0})
            row["count"] += 1
            row["letters"] += len(word)
    return out


def config(root: str, state: str) -> dict[str, Any]:
    return {
        "application.id": "df-kills",
        "topics.root": root,
        "state.dir": state,
        "processing.guarantee": "exactly_once_v2",
        "default.key.serde": "string",
        "default.value.serde": "string",
        "commit.interval.ms": 100,
        "max.poll.records": 20,
        "num.partitions": 2,
        "group.initial.rebalance.delay.ms": 0,
    }


def main() -> None:
    root, inputs, state, mode = sys.argv[1:5]
    spark = get_or_create_session("df-kills", master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    stream = spark.readStream.schema(FILE_SCHEMA).option("maxFilesPerTrigger", 1).json(inputs)
    app = StreamsApp(build_topology(), config(root, state), spark=spark, sources={"lines": stream})
    if mode == "idle":
        app.run_until_idle()
    else:
        app.start()
        app.await_termination()


if __name__ == "__main__":
    main()
