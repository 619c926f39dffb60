"""A terminal node's end-to-end latency (Kafka's ``record-e2e-latency``) is the same under
both engines, also where the columnar engine takes it from a flat map's input records
instead of every record it expanded into."""

from __future__ import annotations

from typing import Any

import pytest

from common.config import StreamsConfig
from topology import StreamsBuilder
from topology.engine.columnar import Batch, ExpandedRows, Repeated, expanded
from topology.engine.task import StreamTask
from topology.engine.task_metrics import E2E

NOW = 50_000


@pytest.fixture(autouse=True)
def engine() -> str:
    """This module sets each run's engine itself (not the suite's two runs)."""
    return "each run's own"


class Sink:
    def send(self, *args: Any) -> None:  # the RecordCollector protocol
        pass

    def partitions_for(self, topic: str) -> int:
        return 1


def e2e_figures(engine: str, lines: list[str], timestamps: list[int]) -> dict[str, Any]:
    builder = StreamsBuilder()
    builder.stream("in").flat_map_values(str.split).map_values(str.upper).to("out")
    config = StreamsConfig.from_dict(
        {
            "application.id": "e2e",
            "topics.root": "/tmp/unused",
            "default.key.serde": "string",
            "default.value.serde": "string",
            "processing.engine": engine,
        }
    )
    task = StreamTask(builder.build(), 0, 0, config, Sink(), wall_clock=lambda: NOW)
    task.initialize()
    n = len(lines)
    task.process_columns(
        "in", 0, [b"k"] * n, [s.encode() for s in lines], timestamps, list(range(n))
    )
    figures, _ = task.take_stats()
    task.close()
    return {tuple(f[:2]): tuple(f[2:]) for f in figures if f[0] == E2E}


def test_a_sink_below_a_flat_map_measures_what_the_record_engine_measures() -> None:
    lines = ["a b c", "", "d", "e f", "", "g h i j"]
    timestamps = [1000, 40_000, 1500, 900, 100, 2000]  # the least and greatest expand to none
    columnar = e2e_figures("columnar", lines, timestamps)
    record = e2e_figures("record", lines, timestamps)
    assert columnar == record
    sink = next(v for k, v in columnar.items() if "SINK" in k[1])
    # 10 words; latencies 49,000 x3, 48,500, 49,100 x2, 48,000 x4
    assert sink[0] == 10
    assert sink[1] == 3 * 49_000 + 48_500 + 2 * 49_100 + 4 * 48_000
    assert sink[2:] == (49_100, 48_000)


def test_an_expanded_batch_knows_its_timestamps_figures_without_reading_them() -> None:
    base = Batch(["k"] * 4, ["a b", "", "c", "d e f"], [7, 1, 9, 3], None, range(4))
    counts = [2, 0, 1, 3]
    batch = expanded(base, Repeated(base.keys, counts), list("abcdef"), counts)
    figures = batch.timestamp_figures()
    assert figures == (6, 3, 9, 32)
    assert batch.with_keys(list("uvwxyz")).timestamp_figures() == figures
    assert batch.with_values(list("uvwxyz")).timestamp_figures() == figures
    assert list(batch.timestamp_array()) == [7, 7, 9, 3, 3, 3]
    assert batch.timestamps == [7, 7, 9, 3, 3, 3]  # read: a list from now on
    assert batch.timestamp_figures() == figures
    assert batch.keys == ["k"] * 6
    assert type(batch.rows) is ExpandedRows
    picked = batch.take([0, 2])
    assert picked.timestamp_figures() == (2, 7, 9, 16)
    again = expanded(batch, ["k"] * 6, list("abcdef"), [1] * 6)  # an expansion's expansion
    assert again.timestamp_figures() == figures
    assert expanded(base, [], [], [0] * 4).timestamp_figures() is None
    assert list(expanded(base, [], [], [0] * 4).timestamp_array()) == []
