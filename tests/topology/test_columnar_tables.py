"""KTable operators on the columnar engine (``filter``, ``filter_not``, ``map_values``,
``transform_values`` and ``group_by``'s re-keying taking whole batches, see
:mod:`topology.processors.table_transform`) against the record engine: the same random
input, cut into the same random batches, must give the same records on every topic (in
order: a ``group_by``'s repartition topic carries each update's old value too) and the same
final stores, materialized or not, with caching on, off, or off for the operator's store
only, on in-memory and RocksDB stores, with tombstones, and over a versioned table (its
out-of-order updates forwarded as not the latest)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from common.serdes import Serde
from statestores.stores import Stores
from tests.topology.test_columnar import L, S, random_batches, run
from topology import Consumed, Grouped, Materialized, Produced, StreamsBuilder, Topology
from topology.engine.processing import describe_processing

#: How a test's operators are materialized: ``(name, value serde) -> Materialized``, or
#: None (not materialized).
Mat = Callable[[str, Serde[Any] | None], Materialized | None]

CACHING = {
    "cache": {},
    "no-cache": {"statestore.cache.max.bytes": 0},
    "uncached-node": {},  # the operators' own stores without a cache, the others with one
    "versioned": {},  # the operators' own stores versioned (they have no cache)
}
#: Whether the operators under test are materialized, and the caching.
STORAGE = {
    "stored-cache": (True, "cache"),
    "stored-no-cache": (True, "no-cache"),
    "stored-uncached-node": (True, "uncached-node"),
    "stored-versioned": (True, "versioned"),
    "not-stored-cache": (False, "cache"),
    "not-stored-no-cache": (False, "no-cache"),
}


@pytest.fixture(autouse=True)
def engine() -> str:
    """This module sets each run's engine itself (not the suite's two runs)."""
    return "each run's own"


class Tombstones:
    """A string serde that reads a value starting with ``fig`` as null: a tombstone."""

    def serialize(self, topic: str, data: str | None) -> bytes | None:
        return None if data is None else data.encode()

    def deserialize(self, topic: str, data: bytes | None) -> str | None:
        return None if data is None or data.startswith(b"fig") else data.decode()


TOMBSTONES = Consumed.with_(S, Tombstones())


def materialize(materialized: bool, caching: str) -> Mat:
    """How the operators under test are stored."""

    def mat(name: str, serde: Serde[Any] | None = None) -> Materialized | None:
        if not materialized:
            return None
        if caching == "versioned":
            m = Materialized.as_(Stores.persistent_versioned_key_value_store(name, 300))
        else:
            m = Materialized.as_(name)
        m = m if serde is None else m.with_value_serde(serde)
        return m if caching == "cache" else m.with_caching_disabled()

    return mat


def same_outputs(
    build: Callable[[], Topology], batches: Any, config: dict[str, Any], tmp_path: Path
) -> dict[str, list[Any]]:
    """Run ``build()`` under both engines (the columnar one on sequences and on Arrow
    columns); assert the same records on every topic and the same final stores; return
    the record engine's records per topic."""
    record = run(build(), batches, "record", {**config, "state.dir": str(tmp_path / "record")})
    for arrow in (False, True):
        state = str(tmp_path / f"columnar-{arrow}")
        got = run(build(), batches, "columnar", {**config, "state.dir": state}, arrow=arrow)
        assert got[0].keys() == record[0].keys()
        for topic in record[0]:
            assert got[0][topic] == record[0][topic], (topic, arrow)
        assert got[1] == record[1]
    return record[0]


def batch_nodes(topology: Topology, config: dict[str, Any], prefix: str) -> list[str]:
    """The nodes named ``prefix...`` that take batches whole under the columnar engine."""
    described = describe_processing(topology, {**config, "processing.engine": "columnar"})
    return sorted(n for n in described.columnar_nodes() if n.startswith(prefix))


def filtered(b: StreamsBuilder, mat: Mat) -> None:
    """A filter to a topic, and a ``filter_not`` below it counted per group (old values
    sent: from the filter's store, or through the parents to the source's)."""
    kept = b.table("other", TOMBSTONES).filter(lambda k, v: "apple" not in v, mat("kept", S))
    kept.to_stream().to("kept")
    (
        kept.filter_not(lambda k, v: v.endswith("date"), mat("kept-not", S))
        .group_by(lambda k, v: (v.split()[0], v), Grouped.with_(S, S))
        .count(Materialized.as_("counts"))
        .to_stream()
        .to("counts", Produced.with_(S, L))
    )


def mapped(b: StreamsBuilder, mat: Mat) -> None:
    """A value mapped to its length (null for some: a deletion) to a topic, and one mapped
    with its key aggregated per group (old values sent)."""
    table = b.table("other", TOMBSTONES)
    lengths = table.map_values(lambda v: None if v.startswith("date") else len(v), mat("n", L))
    lengths.to_stream().to("lengths", Produced.with_(S, L))
    (
        table.map_values(lambda k, v: f"{k}:{v.split()[-1]}", mat("keyed", S), with_key=True)
        .group_by(lambda k, v: (v[-3:], v), Grouped.with_(S, S))
        .aggregate(
            lambda: "",
            lambda k, v, agg: (agg + v[:4])[-24:],
            lambda k, v, agg: agg.replace(v[:4], "", 1),
            Materialized.as_("agg"),
        )
        .to_stream()
        .to("agg")
    )


class Stamped:
    """A transformer reading its record's context and counting its calls in a store and
    in itself: each value (a deletion too) becomes ``value@offset/timestamp/stream
    time#calls``."""

    def init(self, context: Any) -> None:
        self.context = context
        self.seen = context.get_state_store("seen")
        self.calls = 0

    def transform(self, key: str, value: str | None) -> str:
        self.calls += 1
        seen = (self.seen.get(key) or 0) + 1
        self.seen.put(key, seen)
        c = self.context
        return (
            f"{value}@{c.offset}/{c.timestamp()}/{c.current_stream_time_ms()}#{self.calls}.{seen}"
        )

    def close(self) -> None:
        pass


def transformed(b: StreamsBuilder, mat: Mat) -> None:
    """A transformer's values to a topic and reduced per group (old values sent: not
    materialized, the transformer is called for the old value too)."""
    b.add_state_store(
        Stores.key_value_store_builder(Stores.in_memory_key_value_store("seen"), S, L)
    )
    stamped = b.table("other", TOMBSTONES).transform_values(Stamped, mat("stamped", S), "seen")
    stamped.to_stream().to("stamped")
    (
        stamped.group_by(lambda k, v: (k[-1], v), Grouped.with_(S, S))
        .reduce(
            lambda agg, v: (agg + "|" + v)[-80:],
            lambda agg, v: agg.replace(v, "", 1) or "-",
            Materialized.as_("reduced"),
        )
        .to_stream()
        .to("reduced")
    )


def versioned(b: StreamsBuilder, mat: Mat) -> None:
    """A mapper materialized in a versioned store (its batches update the store record by
    record: each put decides what is forwarded; some updates are older than its history
    and not put), and below it a filter its out-of-order updates reach as not the latest
    and a ``group_by`` that drops them."""
    lower = b.table("other", TOMBSTONES).map_values(
        str.lower,
        Materialized.as_(
            Stores.persistent_versioned_key_value_store("lower", 250)
        ).with_value_serde(S),
    )
    lower.filter(lambda k, v: "apple" not in v).to_stream().to("kept")
    upper = lower.map_values(str.upper, mat("upper", S))
    upper.to_stream().to("upper")
    (
        upper.group_by(lambda k, v: (v.split()[0], v), Grouped.with_(S, S))
        .count(Materialized.as_("counts"))
        .to_stream()
        .to("counts", Produced.with_(S, L))
    )


TOPOLOGIES: dict[str, tuple[Callable[[StreamsBuilder, Mat], None], str]] = {
    "filtered": (filtered, "KTABLE-FILTER-"),
    "mapped": (mapped, "KTABLE-MAPVALUES-"),
    "transformed": (transformed, "KTABLE-TRANSFORMVALUES-"),
    "versioned": (versioned, "KTABLE-MAPVALUES-"),
}


@pytest.mark.parametrize("store", ["in_memory", "rocksDB"])
@pytest.mark.parametrize("storage", sorted(STORAGE))
@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
@pytest.mark.parametrize("seed", [1, 2])
def test_table_operators_taking_batches_give_the_record_engines_outputs(
    seed: int, name: str, storage: str, store: str, tmp_path: Path
) -> None:
    add, operator = TOPOLOGIES[name]
    materialized, caching = STORAGE[storage]
    config = {**CACHING[caching], "default.dsl.store": store}

    def build() -> Topology:
        b = StreamsBuilder()
        add(b, materialize(materialized, caching))
        return b.build()

    assert batch_nodes(build(), config, operator)
    assert batch_nodes(build(), config, "KTABLE-SELECT-")
    batches = random_batches(seed, ["other"], n=500, keys=8, step=20)
    outputs = same_outputs(build, batches, config, tmp_path)
    repartition = next(topic for topic in outputs if topic.endswith("-repartition"))
    assert outputs[repartition]
    values = [r[2] for topic in outputs for r in outputs[topic]]
    assert any(v is None or v.startswith(b"None@") for v in values)  # deletions went out
