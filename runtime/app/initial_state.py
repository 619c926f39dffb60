"""State from data: a store's first content loaded from a Delta table or a DataFrame.

``StreamsApp(..., initial_state={"counts": InitialState.delta(path, key="word",
value="count")})`` loads the table into store ``counts`` before the application's first
batch, once (as Spark's ``transformWithState`` initial state, which a query takes only at
its first start). Each row becomes one entry: its ``key`` column through the store's key
serde, its ``value`` column (or, without one, the row's other columns as a dict) through
the value serde, its ``timestamp`` column (epoch milliseconds, default 0) as the entry's
timestamp.

The rows are written to the store's changelog, in each key's partition (Kafka's default
partitioner over the serialized key, the one a repartition by that key uses), in **one**
Delta commit carrying Delta's ``txn(initial-state:<store>, 1)``: a start killed while it
loads has committed nothing and loads again; a start killed after the commit finds the
``txn`` and loads nothing. The tasks then restore the store from its changelog, so their
first batch sees every row. A store whose changelog already holds records (the
application ran before) keeps its state; the initial state is ignored, with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable

from common.config import StreamsConfig
from common.errors import StreamsError
from runtime.storage.committer import TopicCommitter
from runtime.storage.fs import storage_options
from runtime.storage.partitioner import partitions_for_keys
from runtime.storage.producer import Producer
from runtime.storage.topics import TopicAdmin
from runtime.txn import faults
from topology.api.record import ValueAndTimestamp
from topology.graph.stores import ValueAndTimestampSerde
from topology.graph.topology import Topology

log = logging.getLogger(__name__)

#: Rows serialized and buffered at a time.
CHUNK_ROWS = 100_000


@dataclass(frozen=True)
class InitialState:
    """Where a store's first content comes from (see the module)."""

    key: str
    value: str | None = None
    timestamp: str | None = None
    path: str | None = None
    frame: Any = None

    @classmethod
    def delta(
        cls, path: str, *, key: str, value: str | None = None, timestamp: str | None = None
    ) -> InitialState:
        """The rows of the Delta table at ``path`` (a path or a URI)."""
        return cls(key, value, timestamp, path=path)

    @classmethod
    def dataframe(
        cls, frame: Any, *, key: str, value: str | None = None, timestamp: str | None = None
    ) -> InitialState:
        """The rows of a Spark DataFrame (a batch one), read once on the driver."""
        return cls(key, value, timestamp, frame=frame)

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The rows, a record batch at a time."""
        if self.frame is not None:
            yield from self.frame.toArrow().to_batches(CHUNK_ROWS)
            return
        assert self.path is not None
        table = DeltaTable(self.path, storage_options=storage_options(self.path))
        yield from table.to_pyarrow_dataset().to_batches(batch_size=CHUNK_ROWS)


def txn_id(store: str) -> str:
    """The Delta ``txn`` app id of store ``store``'s initial load."""
    return f"initial-state:{store}"


def load_initial_state(
    admin: TopicAdmin,
    topology: Topology,
    config: StreamsConfig,
    initial: Mapping[str, InitialState],
) -> dict[str, int]:
    """Load each store's initial state once (see the module); return the rows loaded now
    per store (none for a store loaded at an earlier start).

    Raises:
        StreamsError: a store that is not in the topology, keeps no changelog, or a column
            that is not in the data.
    """
    changelogs = topology.changelog_topics(config.application_id)
    loaded = {}
    for store, source in sorted(initial.items()):
        if store not in topology.stores:
            known = ", ".join(sorted(topology.stores)) or "none"
            raise StreamsError(
                f"initial_state names store {store!r}, not in the topology (its stores: {known})"
            )
        topic = changelogs.get(store)
        if topic is None:
            raise StreamsError(
                f"store {store!r} keeps no changelog (logging disabled): its "
                "initial state has nowhere to be written; enable logging"
            )
        committer = TopicCommitter(admin, topic)
        if committer.committed_txn_version(txn_id(store)) >= 1:
            continue
        if any(admin.index(topic).end_offsets().values()):
            log.warning(
                "[app %s] store %s holds state already: its initial state is "
                "ignored (it is loaded only before the first batch)",
                config.application_id,
                store,
            )
            continue
        loaded[store] = _load(admin, topology, config, store=store, source=source, topic=topic)
    return loaded


def _load(
    admin: TopicAdmin,
    topology: Topology,
    config: StreamsConfig,
    *,
    store: str,
    source: InitialState,
    topic: str,
) -> int:
    builder: Any = topology.stores[store].builder(config)
    key_serde, value_serde = builder.key_serde, builder.value_serde
    timestamped = isinstance(value_serde, ValueAndTimestampSerde)
    partitions = admin.num_partitions(topic)
    producer = Producer(admin, buffer_memory=1 << 62)  # one commit: all or nothing
    rows = 0
    for batch in source.batches():
        _check_columns(store, source, batch.schema.names)
        keys = batch.column(source.key).to_pylist()
        values = _values(source, batch)
        stamps = (
            batch.column(source.timestamp).cast(pa.int64()).to_pylist()
            if source.timestamp
            else [0] * batch.num_rows
        )
        try:
            raw_keys = pa.array([key_serde.serialize(topic, k) for k in keys], pa.binary())
            raw_values = [
                None
                if v is None
                else value_serde.serialize(topic, ValueAndTimestamp(v, t) if timestamped else v)
                for v, t in zip(values, stamps, strict=True)
            ]
        except Exception as exc:
            raise StreamsError(
                f"initial state of store {store!r}: a row (row {rows} on, keys such as "
                f"{keys[:1]}) does not fit the store's serdes: {exc}. Name the value "
                "column (value=...) or give the store serdes that take these values"
            ) from exc
        parts = partitions_for_keys(raw_keys, partitions)
        producer.send_batch(
            topic,
            raw_keys,
            pa.array(raw_values, pa.binary()),
            timestamps=pa.array(stamps, pa.int64()),
            partitions=pa.array(np.asarray(parts, dtype=np.int32)),
        )
        rows += batch.num_rows
    faults.reached("initial_state_before_commit")
    producer.flush(app_txn=(txn_id(store), 1))
    log.info(
        "[app %s] store %s: %d rows of initial state loaded", config.application_id, store, rows
    )
    return rows


def _check_columns(store: str, source: InitialState, names: list[str]) -> None:
    for column in (source.key, source.value, source.timestamp):
        if column is not None and column not in names:
            raise StreamsError(
                f"initial state of store {store!r}: no column {column!r} in the "
                f"data (its columns: {', '.join(names)})"
            )


def _values(source: InitialState, batch: pa.RecordBatch) -> list[Any]:
    if source.value is not None:
        return list(batch.column(source.value).to_pylist())
    others = [n for n in batch.schema.names if n not in (source.key, source.timestamp)]
    return list(batch.select(others).to_pylist())
