"""Session-window aggregations on the columnar engine (a batch folded in memory, see
:mod:`topology.processors.proc_session`) against the record engine: the same random input,
cut into the same random batches, must give the same records on every topic (in order)
and the same final stores, on RocksDB and in-memory stores, with a cache that buffers,
one of size 0 and none, with graces from none (every batch runs record by record) to
more than a batch's span (every batch folds in memory), records out of order and late."""

from __future__ import annotations

from typing import Any

import pytest

from common.serdes import Serdes
from tests.topology.test_columnar import random_batches, run
from topology import Grouped, Materialized, Produced, SessionWindows, StreamsBuilder, Topology
from topology.engine.processing import describe_processing

S, L = Serdes.String(), Serdes.Long()


@pytest.fixture(autouse=True)
def engine() -> str:
    """This module sets each run's engine itself (not the suite's two runs)."""
    return "each run's own"


def sessions(grace: int, caching: bool, *, reduce: bool = False, keyed: bool = False) -> Topology:
    """Words (or the records' own keys, ``keyed``) counted per session of 40 ms (or
    their values joined, ``reduce``), every update written out with its window."""
    b = StreamsBuilder()
    stream = b.stream("in")
    grouped = (
        stream.group_by_key(Grouped.with_(S, S))
        if keyed
        else stream.flat_map_values(str.split).group_by(
            lambda k, w: w[0] if w != "fig" else None, Grouped.with_(S, S)
        )
    )
    windowed = grouped.windowed_by(SessionWindows.of_inactivity_gap_and_grace(40, grace))
    materialized = Materialized.as_("sessions")
    if not caching:
        materialized = materialized.with_caching_disabled()
    table: Any
    if reduce:
        table = windowed.reduce(lambda a, v: f"{a}|{v}"[-40:], materialized)
    elif keyed:
        table = windowed.aggregate(
            lambda: "",
            lambda k, v, a: (a + v[:2])[-30:],
            lambda k, a, b: f"({a}){b}"[-30:],
            materialized,
        )
    else:
        table = windowed.count(materialized)
    (
        table.to_stream()
        .map(lambda w, v: (f"{w.key}@{w.window.start}/{w.window.end}", v))
        .to("out", Produced.with_(S, L if not (reduce or keyed) else S))
    )
    return b.build()


CACHES = {"cache": (True, {}), "cache-0": (True, {"statestore.cache.max.bytes": 0})}
CACHES["no-cache"] = (False, {})


#: (store, cache, kind, grace, seed): every store and cache with every kind and grace, the
#: three seeds in turn (every pair of a setup and a seed, and of a kind, a grace and a
#: seed, is tried, in a third of the full product's cases).
CASES = [
    (store, cache, kind, grace, 1 + (i + j) % 3)
    for i, (store, cache) in enumerate((s, c) for s in ("rocksDB", "in_memory") for c in CACHES)
    for j, (kind, grace) in enumerate(
        (k, g) for k in ("count", "reduce", "aggregate") for g in (0, 60, 400, 5_000)
    )
]


@pytest.mark.parametrize(("store", "cache", "kind", "grace", "seed"), CASES)
def test_a_session_aggregation_folded_per_batch_gives_the_record_engines_outputs(  # noqa: PLR0917
    store: str, cache: str, kind: str, grace: int, seed: int, tmp_path: Any
) -> None:
    caching, extra = CACHES[cache]
    config = {**extra, "default.dsl.store": store, "state.dir": str(tmp_path)}

    def build() -> Topology:
        return sessions(grace, caching, reduce=kind == "reduce", keyed=kind == "aggregate")

    late = 0.05 if seed == 1 else 0.2
    batches = random_batches(seed, ["in"], n=700, keys=6, step=12, late_share=late)
    record = run(build(), batches, "record", {**config, "state.dir": str(tmp_path / "r")})
    for arrow in (False, True):
        got = run(
            build(), batches, "columnar", {**config, "state.dir": str(tmp_path / f"c{arrow}")}
        )
        assert got[0].keys() == record[0].keys()
        for topic in record[0]:
            assert got[0][topic] == record[0][topic], (topic, arrow)
        assert got[1] == record[1]
        assert record[0]["out"]


def test_a_session_aggregation_emitting_on_update_takes_batches() -> None:
    topology = sessions(100, True)
    nodes = describe_processing(topology, {}).columnar_nodes()
    assert any(name.startswith("KSTREAM-AGGREGATE") for name in nodes), nodes
