"""Stream-stream joins on the columnar engine (each side's batch joined as one, see
:class:`topology.processors.join_stream.StreamStreamJoinProcessor`) against the record
engine: the same random input of two topics, cut into the same random batches, must give
the same records on every topic (in order) and the same final stores, for inner, left and
outer joins, on RocksDB and in-memory stores, with null keys and values, records out of
order and late, windows without grace and with more grace than a batch's span."""

from __future__ import annotations

from typing import Any

import pytest

from tests.topology.test_columnar import random_batches, run
from topology import JoinWindows, StreamsBuilder, Topology
from topology.engine.processing import describe_processing


@pytest.fixture(autouse=True)
def engine() -> str:
    """This module sets each run's engine itself (not the suite's two runs)."""
    return "each run's own"


WINDOWS = {
    "no-grace": JoinWindows.of_time_difference_without_grace(50),
    "grace": JoinWindows.of_time_difference_and_grace(80, 400),
    "asymmetric": JoinWindows.of_time_difference_and_grace(30, 20).before(0).after(120),
}


def joined(kind: str, windows: JoinWindows) -> Topology:
    """``in`` joined with ``other`` (some values made null), results to ``out``."""
    b = StreamsBuilder()
    left = b.stream("in").map_values(lambda v: None if v.startswith("fig") else v)
    right = b.stream("other").map_values(str.upper)
    join = getattr(left, {"inner": "join", "left": "left_join", "outer": "outer_join"}[kind])
    join(right, lambda a, c: f"{a}|{c}", windows).to("out")
    return b.build()


@pytest.mark.parametrize("store", ["rocksDB", "in_memory"])
@pytest.mark.parametrize("windows", sorted(WINDOWS))
@pytest.mark.parametrize("kind", ["inner", "left", "outer"])
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_stream_stream_join_taking_batches_gives_the_record_engines_outputs(
    seed: int, kind: str, windows: str, store: str, tmp_path: Any
) -> None:
    late = 0.0 if seed == 1 else 0.15

    def build() -> Topology:
        return joined(kind, WINDOWS[windows])

    batches = random_batches(seed, ["in", "other"], n=600, keys=8, step=15, late_share=late)
    config = {"default.dsl.store": store}
    record = run(build(), batches, "record", {**config, "state.dir": str(tmp_path / "r")})
    for arrow in (False, True):
        state = str(tmp_path / f"c{arrow}")
        got = run(build(), batches, "columnar", {**config, "state.dir": state}, arrow=arrow)
        assert got[0].keys() == record[0].keys()
        for topic in record[0]:
            assert got[0][topic] == record[0][topic], (topic, arrow)
        assert got[1] == record[1]
    outputs = [r[2] for r in record[0]["out"]]
    assert outputs
    if kind != "inner":  # unmatched records went out, with a null partner
        assert any(v.endswith(b"|None") or v.startswith(b"None|") for v in outputs)


@pytest.mark.parametrize("kind", ["left", "outer"])
def test_both_sides_of_an_outer_join_take_batches(kind: str) -> None:
    nodes = describe_processing(joined(kind, WINDOWS["grace"]), {}).columnar_nodes()
    sides = [n for n in nodes if n.startswith(("KSTREAM-OUTER", "KSTREAM-JOIN"))]
    assert len(sides) == 2, nodes
