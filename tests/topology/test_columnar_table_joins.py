"""Table-table joins on the columnar engine (each side joins a batch of updates as one,
the other table read once per distinct key; the merge node stores a batch folded per key,
see :mod:`topology.processors.join_table_table`) against the record engine: the same random
input of three topics, cut into the same random batches, must give the same records on
every topic (in order) and the same final stores, for inner, left and outer joins, the
result materialized or not, with caching on, off, or off for the result's store only, old
values sent or not (a ``group_by`` below asks for them), on in-memory and RocksDB stores,
with tombstones, the other side read from its store, through a filter or a transformer
that is not materialized, through a join result that is not, or as a versioned table."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statestores.stores import Stores
from tests.topology.test_columnar import L, S, random_batches
from tests.topology.test_columnar_tables import (
    CACHING,
    STORAGE,
    TOMBSTONES,
    Mat,
    batch_nodes,
    materialize,
    same_outputs,
)
from topology import Grouped, KTable, Materialized, Produced, StreamsBuilder, Topology

KINDS = {"inner": "join", "left": "left_join", "outer": "outer_join"}


@pytest.fixture(autouse=True)
def engine() -> str:
    """This module sets each run's engine itself (not the suite's two runs)."""
    return "each run's own"


class Contextual:
    """A transformer reading its record's context and counting its calls: each value
    becomes ``value@offset/timestamp#calls``."""

    def init(self, context: Any) -> None:
        self.context = context
        self.calls = 0

    def transform(self, key: str, value: str | None) -> str:
        self.calls += 1
        return f"{value}@{self.context.offset}/{self.context.timestamp()}#{self.calls}"

    def close(self) -> None:
        pass


def _versioned(table: KTable[Any, Any], b: StreamsBuilder) -> KTable[Any, Any]:
    stored = Materialized.as_(Stores.persistent_versioned_key_value_store("upper", 250))
    return table.map_values(str.upper, stored.with_value_serde(S))


#: How the right side is made from the ``other`` table: as it is (read from its store), or
#: derived without a store (read through a filter, a transformer or a join result), or
#: materialized in a versioned store (its out-of-order updates reach the join as not the
#: latest).
RIGHT: dict[str, Callable[[KTable[Any, Any], StreamsBuilder], KTable[Any, Any]]] = {
    "table": lambda table, b: table,
    "filtered": lambda table, b: table.filter(lambda k, v: "grape" not in v),
    "transformed": lambda table, b: table.transform_values(Contextual),
    "joined": lambda table, b: table.left_join(b.table("third", TOMBSTONES), "{}/{}".format),
    "versioned": _versioned,
}


def joined(kind: str, right: str, mat: Mat, old_values: bool) -> Topology:
    """``in`` joined with a table made of ``other`` (see :data:`RIGHT`), results to
    ``out``; with ``old_values``, also counted per group."""
    b = StreamsBuilder()
    left = b.table("in", TOMBSTONES)
    other = RIGHT[right](b.table("other", TOMBSTONES), b)
    result = getattr(left, KINDS[kind])(other, "{}+{}".format, mat("joined", S))
    result.to_stream().to("out")
    if old_values:
        (
            result.group_by(lambda k, v: (v[:2], v), Grouped.with_(S, S))
            .count(Materialized.as_("counts"))
            .to_stream()
            .to("counts", Produced.with_(S, L))
        )
    return b.build()


#: The store kind and whether old values are sent: each in turn, as the storage and the
#: right side change.
VARIANTS = [("in_memory", True), ("rocksDB", False)]


@pytest.mark.parametrize("storage", sorted(STORAGE))
@pytest.mark.parametrize("right", sorted(RIGHT))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_table_table_join_taking_batches_gives_the_record_engines_outputs(
    kind: str, right: str, storage: str, tmp_path: Path
) -> None:
    materialized, caching = STORAGE[storage]
    store, old_values = VARIANTS[(sorted(STORAGE).index(storage) + len(right)) % 2]
    config = {**CACHING[caching], "default.dsl.store": store}

    def build() -> Topology:
        return joined(kind, right, materialize(materialized, caching), old_values)

    assert len(batch_nodes(build(), config, "KTABLE-JOIN")) == 2 + (right == "joined") * 2
    assert batch_nodes(build(), config, "KTABLE-MERGE-")
    seed = sorted(RIGHT).index(right) + 3 * materialized
    batches = random_batches(seed, ["in", "other", "third"], n=450, keys=8, step=20)
    outputs = same_outputs(build, batches, config, tmp_path)
    values = [r[2] for r in outputs["out"]]
    assert None in values  # deletions of joined rows
    if kind != "inner":  # rows with no match went out
        assert any(b"None+" in v or v.endswith(b"+None") for v in values if v is not None)
    if old_values:
        assert outputs["counts"]
