"""A windowed count emitting on window close reads combined records as record by record."""

from __future__ import annotations

import pytest

from tests.topology.test_columnar import EOS, L, S, random_batches, run, run_combined
from topology import EmitStrategy, Grouped, Materialized, Produced, StreamsBuilder, Topology
from topology.api.emit import EMIT_INTERVAL_KEY
from topology.api.windowed_serdes import WindowedSerdes
from topology.api.windows import TimeWindows

#: Every record looks for closed windows: a batch's last one closes the same windows.
EVERY_RECORD = {**EOS, EMIT_INTERVAL_KEY: 0}


def build() -> Topology:
    """Words counted in hopping windows, each window forwarded once, when it closes."""
    b = StreamsBuilder()
    (
        b.stream("in")
        .flat_map_values(str.split)
        .group_by(lambda k, w: w, Grouped.with_(S, S))
        .windowed_by(TimeWindows.of_size_and_grace(100, 250).advance_by(30))
        .emit_strategy(EmitStrategy.on_window_close())
        .count(Materialized.as_("store"))
        .to_stream()
        .to("out", Produced.with_(WindowedSerdes.time_windowed_serde_from(S, 100), L))
    )
    return b.build()


@pytest.mark.parametrize("late_share", [0.0, 0.1])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_emit_final_combined_inside_batches_emits_as_record_by_record(
    seed: int, late_share: float
) -> None:
    """Combined per key and window set, a closing count emits the record engine's final
    windows and keeps its stores; a batch whose records come late runs again uncombined."""
    batches = random_batches(seed, ["in"], n=900, step=8, late_share=late_share)
    record = run(build(), batches, "record", EVERY_RECORD)
    got = run_combined(build, batches, EVERY_RECORD)
    assert record[0]["out"]  # windows closed
    assert got[0]["out"] == record[0]["out"]
    assert got[1] == record[1]
    repartition = next(t for t in got[0] if t.endswith("-repartition"))
    assert [r for r in got[0][repartition] if r[4]]  # combining ran
