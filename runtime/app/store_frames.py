"""Any store as data: a store's committed state as a Spark DataFrame, read on the executors.

:func:`read_store` fixes, on the driver, where each partition of the store's changelog
ends (its committed end, once no transaction is between its commit decision and its last
topic commit: the cut an interactive query would answer from). Each Spark task then
restores its partitions where it runs, as a standby replica does (the newest snapshot at
or below that end, then the changelog up to it, never past it), reads every entry and
hands it on as Arrow columns. So the DataFrame is one consistent cut of the store, the
same however often Spark evaluates it, and a large store never passes through the
driver. :func:`store_batches` is the same read in one process (``streams-eos state
--export``).

Columns (:func:`store_schema`): ``key``, ``value``, ``timestamp``, and for a window or a
session store ``window_start`` and ``window_end``, for a versioned store ``valid_to`` (null
for the current version); the times are UTC timestamps. ``timestamp`` is the record's for
the DSL's timestamped stores and versioned stores, a session's end for session stores, and
null for a Processor-API store that keeps none. A key or value is decoded with the
store's serde and typed by it: strings, integers, doubles and bytes as such, a pydantic
model's fields as a struct, a schemaless JSON serde's values as their JSON text; a serde
with an ``arrow_type`` attribute (a ``pyarrow.DataType``) gives its own type, any other
serde's values come as their serialized bytes.
"""

from __future__ import annotations

import datetime
import json
import shutil
import tempfile
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from common.config import StreamsConfig
from common.errors import StreamsError
from common.serdes import (
    BytesSerde,
    DoubleSerde,
    IntegerSerde,
    JsonSerde,
    LongSerde,
    PydanticSerde,
    StringSerde,
)
from runtime.app.cut_reads import CutReader, SavepointSnapshots, replica_of
from runtime.app.savepoints import SavepointError, savepoint_as_of, stores_prefix
from runtime.app.store_queries import (
    InvalidStateStoreError,
    StoreCatalog,
    checked_changelog,
    settle,
)
from runtime.state.adapters import TopicChangelogReader
from runtime.storage.fs import register_storage_options, storage_options
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.txn.coordinator import TransactionCoordinator
from statestores.metered import changelog_topic
from topology.api.record import ValueAndTimestamp
from topology.graph.stores import ValueAndTimestampSerde

#: Rows per record batch a partition's read hands on.
BATCH_ROWS = 10_000
#: The time columns of any kind, and their type in an exported table.
_ALL_TIMES = ("timestamp", "window_start", "window_end", "valid_to")
_UTC = pa.timestamp("us", tz="UTC")
_MS = pa.timestamp("ms", tz="UTC")  # what the int64 milliseconds are
#: Session and window stores' entries span every live window.
_FAR = 1 << 62
_TIME_COLUMNS = {
    "key_value": ("timestamp",),
    "window": ("timestamp", "window_start", "window_end"),
    "session": ("timestamp", "window_start", "window_end"),
    "versioned": ("timestamp", "valid_to"),
}
#: Python annotations a pydantic model's fields may carry, as Arrow types.
_SCALARS: dict[Any, pa.DataType] = {
    str: pa.string(),
    int: pa.int64(),
    float: pa.float64(),
    bool: pa.bool_(),
    bytes: pa.binary(),
    datetime.datetime: pa.timestamp("us", tz="UTC"),
    datetime.date: pa.date32(),
}


@dataclass(frozen=True)
class StoreRead:
    """One read of a store: what every Spark task needs (pickled to the executors).

    Attributes:
        store: the store's name.
        kind: ``key_value``, ``window``, ``session`` or ``versioned``.
        factory: the store's factory (its kind, serdes and supplier).
        subtopology: the sub-topology whose tasks hold it.
        properties: the application's configuration, with ``topics.root`` and the
            storage options of this read.
        ends: partition -> the changelog offset the read stops at.
        schema: the columns (times as int64 milliseconds; :func:`read_store` makes them
            timestamps).
    """

    store: str
    kind: str
    factory: Any
    subtopology: int
    properties: dict[str, Any]
    ends: dict[int, int]
    schema: pa.Schema
    #: A savepoint's read: the changelog's offset index at its cut, and where the
    #: savepoint keeps its store snapshots (both None: the committed state now).
    cut: dict[str, Any] | None = None
    snapshots: str | None = None

    @property
    def config(self) -> StreamsConfig:
        """The configuration the replicas are built with."""
        return StreamsConfig(**self.properties)


def plan_read(
    admin: TopicAdmin,
    application_id: str,
    store: str,
    config: Mapping[str, Any] | None = None,
    *,
    as_of: str | int | datetime.datetime | None = None,
) -> StoreRead:
    """Plan a read of ``store``: its catalog entry, and its changelog's committed ends now,
    or at the cut of savepoint ``as_of`` (a name; a time names the newest savepoint taken
    at or before it: see :func:`~runtime.app.savepoints.savepoint_as_of`).

    Raises:
        InvalidStateStoreError: no catalog, no such store, no changelog (logging off).
        SavepointError: no such savepoint, or it does not hold the store.
    """
    catalog = StoreCatalog.read(admin, application_id)
    properties = {**catalog.config, **dict(config or {}), "topics.root": admin.root.uri}
    if store not in catalog.stores:
        catalog.query(admin, store)  # raises, naming the application's stores
    factory, subtopology = catalog.stores[store]
    streams_config = StreamsConfig(**properties)
    changelog = checked_changelog(factory, streams_config, admin, store)
    builder = factory.builder(streams_config)
    schema = store_schema(factory.kind, builder.key_serde, builder.value_serde)
    if as_of is not None:
        savepoint = savepoint_as_of(admin, application_id, as_of)
        if store not in savepoint.stores or changelog not in savepoint.topics:
            raise SavepointError(
                f"savepoint {savepoint.name} of {application_id!r} holds no store {store!r} "
                f"(its stores: {', '.join(sorted(savepoint.stores)) or 'none'})"
            )
        prefix = stores_prefix(application_id, savepoint.name)
        cut = savepoint.topics[changelog].index
        ends = savepoint.stores[store].ends
        sub = savepoint.stores[store].subtopology
        return StoreRead(store, factory.kind, factory, sub, properties, ends, schema, cut, prefix)
    # the cut a query would answer from: every decided transaction's changelog in
    settle(TransactionCoordinator(admin), application_id, changelog, set())
    index = TopicReader(admin).index(changelog)
    ends = {p: index.log(p).end for p in range(index.num_partitions)}
    return StoreRead(
        store,
        factory.kind,
        factory,
        subtopology,
        properties,
        ends,
        schema,
    )


def store_schema(kind: str, key_serde: Any, value_serde: Any) -> pa.Schema:
    """The columns of a ``kind`` store whose keys and values take these serdes."""
    if isinstance(value_serde, ValueAndTimestampSerde):
        value_serde = value_serde.inner
    fields = [
        pa.field("key", column_type(key_serde)[0]),
        pa.field("value", column_type(value_serde)[0]),
    ]
    fields.extend(pa.field(name, pa.int64()) for name in _TIME_COLUMNS[kind])
    return pa.schema(fields)


def column_type(serde: Any) -> tuple[pa.DataType, Callable[[Any, Any], Any]]:
    """The Arrow type of what ``serde`` decodes, and how a decoded object becomes a cell of
    it (``convert(serde, obj)``)."""
    declared = getattr(serde, "arrow_type", None)
    if isinstance(declared, pa.DataType):
        return declared, _same
    plain = {
        StringSerde: pa.string(),
        IntegerSerde: pa.int32(),
        LongSerde: pa.int64(),
        DoubleSerde: pa.float64(),
        BytesSerde: pa.binary(),
    }
    if type(serde) in plain:
        return plain[type(serde)], _same
    if isinstance(serde, PydanticSerde):
        return model_type(serde.model_cls), _model_dict
    if isinstance(serde, JsonSerde):
        return pa.string(), _json_text
    return pa.binary(), _serialized


def model_type(model: type[BaseModel]) -> pa.DataType:
    """A pydantic model's fields as an Arrow struct: nested models as structs, lists (and
    ``tuple[X, ...]``, sets) as lists, str, int, float, bool, bytes, datetime and date as
    such; a field of any other type (a dict, a union) as its JSON text."""
    return pa.struct(
        [
            pa.field(name, _annotation_type(info.annotation))
            for name, info in model.model_fields.items()
        ]
    )


def _shape(annotation: Any) -> tuple[str, Any]:
    """What a field's annotation is: ``("optional" | "list", inner)``, ``("model",
    cls)``, ``("scalar", annotation)`` or ``("json", None)``."""
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return "optional", args[0]
    if origin in (list, set, frozenset) and len(args) == 1:
        return "list", args[0]
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return "list", args[0]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "model", annotation
    if annotation in _SCALARS:
        return "scalar", annotation
    return "json", None


def _annotation_type(annotation: Any) -> pa.DataType:
    shape, inner = _shape(annotation)
    if shape == "optional":
        return _annotation_type(inner)
    if shape == "list":
        return pa.list_(_annotation_type(inner))
    if shape == "model":
        return model_type(inner)
    return _SCALARS[inner] if shape == "scalar" else pa.string()


def _model_cell(model: type[BaseModel], value: Any) -> dict[str, Any]:
    return {
        name: _field_cell(info.annotation, getattr(value, name))
        for name, info in model.model_fields.items()
    }


def _field_cell(annotation: Any, value: Any) -> Any:
    """``value`` of a field annotated ``annotation`` as a cell of its Arrow type."""
    if value is None:
        return None
    shape, inner = _shape(annotation)
    if shape == "optional":
        return _field_cell(inner, value)
    if shape == "list":
        return [_field_cell(inner, item) for item in value]
    if shape == "model":
        return _model_cell(inner, value)
    if shape == "scalar":
        return value
    return json.dumps(to_jsonable_python(value), separators=(",", ":"))


def _same(serde: Any, value: Any) -> Any:
    return value


def _model_dict(serde: Any, value: Any) -> Any:
    return None if value is None else _model_cell(serde.model_cls, value)


def _json_text(serde: Any, value: Any) -> Any:
    return None if value is None else serde.serialize("", value).decode()


def _serialized(serde: Any, value: Any) -> Any:
    return None if value is None else serde.serialize("", value)


# -- the read of one partition (on an executor, or here) -----------------------------------


def store_batches(read: StoreRead, partitions: Iterable[int]) -> Iterator[pa.RecordBatch]:
    """The entries of ``partitions`` of the read store, as record batches of its schema:
    each partition restored into a temporary directory up to the read's end, read, and
    removed."""
    config = read.config
    register_storage_options(config.topics_root, config.storage_options)
    admin = TopicAdmin(config.topics_root)
    topic = changelog_topic(config.application_id, read.store)
    reader = None if read.cut is None else TopicChangelogReader(CutReader(admin, {topic: read.cut}))
    snapshots = (
        None
        if read.snapshots is None
        else SavepointSnapshots(admin, config.application_id, read.snapshots)
    )
    for partition in partitions:
        if partition not in read.ends:
            continue
        directory = tempfile.mkdtemp(prefix=f"read-store-{read.store}-{partition}-")
        try:
            replica = replica_of(
                read.factory,
                config,
                admin,
                task_id=f"{read.subtopology}_{partition}",
                directory=directory,
                ends={(topic, partition): read.ends[partition]},
                reader=reader,
                snapshots=snapshots,
            )
            try:
                yield from _batches(read, replica.store)
            finally:
                replica.close()
        finally:
            shutil.rmtree(directory, ignore_errors=True)


def export_store(read: StoreRead, path: str) -> int:
    """Write the read store as a new Delta table at ``path`` (its times as UTC timestamps),
    partition after partition, never more than a batch in memory; return the rows written.

    Raises:
        StreamsError: ``path`` holds a Delta table already.
    """
    times = [name for name in read.schema.names if name in _ALL_TIMES]
    schema = read.schema
    for name in times:
        schema = schema.set(schema.get_field_index(name), pa.field(name, _UTC))
    written = 0

    def batches() -> Iterator[pa.RecordBatch]:
        nonlocal written
        for batch in store_batches(read, sorted(read.ends)):
            written += batch.num_rows
            columns = [
                batch.column(name).cast(_MS).cast(_UTC) if name in times else batch.column(name)
                for name in batch.schema.names
            ]
            yield pa.RecordBatch.from_arrays(columns, schema=schema)

    if DeltaTable.is_deltatable(path, storage_options=storage_options(path)):
        raise StreamsError(
            f"{path} holds a Delta table already: export to a new path, or remove it first"
        )
    write_deltalake(
        path,
        pa.RecordBatchReader.from_batches(schema, batches()),
        mode="error",
        storage_options=storage_options(path),
    )
    return written


def _batches(read: StoreRead, store: Any) -> Iterator[pa.RecordBatch]:
    builder = read.factory.builder(read.config)
    key_serde, value_serde = builder.key_serde, builder.value_serde
    if isinstance(value_serde, ValueAndTimestampSerde):
        value_serde = value_serde.inner
    key_convert = column_type(key_serde)[1]
    value_convert = column_type(value_serde)[1]
    rows: dict[str, list[Any]] = {name: [] for name in read.schema.names}
    for row in _entries(read.kind, store):
        for name, cell in zip(read.schema.names, row, strict=True):
            rows[name].append(cell)
        if len(rows["key"]) >= BATCH_ROWS:
            yield _batch(read.schema, rows, key_serde, value_serde, key_convert, value_convert)
            rows = {name: [] for name in read.schema.names}
    if rows["key"]:
        yield _batch(read.schema, rows, key_serde, value_serde, key_convert, value_convert)


def _batch(  # noqa: PLR0917 - the columns and their conversions
    schema: pa.Schema,
    rows: dict[str, list[Any]],
    key_serde: Any,
    value_serde: Any,
    key_convert: Callable[[Any, Any], Any],
    value_convert: Callable[[Any, Any], Any],
) -> pa.RecordBatch:
    rows["key"] = [key_convert(key_serde, k) for k in rows["key"]]
    rows["value"] = [value_convert(value_serde, v) for v in rows["value"]]
    return pa.RecordBatch.from_pydict(rows, schema=schema)


def _entries(kind: str, store: Any) -> Iterator[tuple[Any, ...]]:
    """``(key, value, timestamp, ...)`` of every entry, as the schema's columns."""
    if kind == "key_value":
        for key, found in store.all():
            value, timestamp = _unwrap(found)
            yield key, value, timestamp
    elif kind == "window":
        for windowed, found in store.all():
            value, timestamp = _unwrap(found)
            window = windowed.window
            yield windowed.key, value, timestamp, window.start, window.end
    elif kind == "session":
        sessions, values = store.find_ended_sessions(-_FAR, _FAR)
        for session, found in zip(sessions, values, strict=True):
            value, timestamp = _unwrap(found)
            # a session's aggregate carries no timestamp of its own: its end is the time
            # Kafka gives the record it forwards
            stamp = session.window.end if timestamp is None else timestamp
            yield session.key, value, stamp, session.window.start, session.window.end
    elif kind == "versioned":
        for key, record in store.all_versions():
            yield key, record.value, record.timestamp, record.valid_to
    else:  # the catalog names only these kinds
        raise InvalidStateStoreError(f"a store of kind {kind!r} cannot be read as data")


def _unwrap(found: Any) -> tuple[Any, int | None]:
    if isinstance(found, ValueAndTimestamp):
        return found.value, found.timestamp
    return found, None
