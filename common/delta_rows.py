"""Typed rows for Delta table sinks (``KStream.to_delta`` / ``KTable.to_delta``).

A Delta sink is a sink node whose "topic" names the table and the mode,
``delta+append:<table>`` or ``delta+upsert:<table>`` (:func:`sink_topic`), so the
record path (sink node, production handler, record collector, transaction participants)
is the one every topic goes through. Its serdes turn a record's key and value into
column dicts (:class:`RowKeySerde`, :class:`RowValueSerde`), and the collector turns a
batch of them into one typed Arrow table (:func:`rows_table`):

* the key: one ``key`` column; a windowed key gives ``key``, ``window_start`` and
  ``window_end``;
* the value: its fields as columns when it is a dict, a dataclass or a pydantic model,
  else one ``value`` column;
* the record's ``timestamp`` (a UTC timestamp in milliseconds).

In upsert mode a batch keeps the last row per key (the key columns), and a tombstone (a
``None`` value) becomes a delete marker: the table keeps one row per key, and a
tombstone deletes it.

These bytes never leave the process that serializes them (a task's collector reads them
back in the same batch): pickle is only their in-memory carrier.
"""

from __future__ import annotations

import dataclasses
import datetime
import pickle
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from common.errors import SerializationError

PREFIX = "delta+"
MODES = ("append", "upsert")
#: The staged file's column marking a tombstone (upsert mode; never in the table).
DELETED = "_streams_deleted"
#: Parquet metadata keys of a staged file: the sink's mode and its key columns.
MODE_KEY = b"streams.sink.mode"
KEYS_KEY = b"streams.sink.keys"


def sink_topic(table: str, mode: str) -> str:
    """Return the sink "topic" of Delta table ``table`` written in ``mode``."""
    if mode not in MODES:
        raise ValueError(f"to_delta mode={mode!r} is invalid; allowed: {', '.join(MODES)}")
    return f"{PREFIX}{mode}:{table}"


def parse_sink(topic: str) -> tuple[str, str] | None:
    """Return ``(mode, table)`` of a Delta sink topic, None for a topic."""
    if not topic.startswith(PREFIX):
        return None
    mode, _, table = topic[len(PREFIX) :].partition(":")
    return (mode, table) if mode in MODES and table else None


@dataclasses.dataclass(frozen=True)
class RowColumns:
    """The names of a Delta sink's own columns."""

    key: str = "key"
    value: str = "value"
    timestamp: str = "timestamp"


class RowKeySerde:
    """A record key -> its columns (``key``; a windowed key adds its window's bounds)."""

    def __init__(self, columns: RowColumns) -> None:
        self.columns = columns

    def serialize(self, topic: str, data: Any) -> bytes | None:
        window = getattr(data, "window", None)
        if window is not None and hasattr(data, "key") and hasattr(window, "start"):
            row = {
                self.columns.key: data.key,
                "window_start": _utc(window.start),
                "window_end": _utc(window.end),
            }
        else:
            row = {self.columns.key: data}
        return pickle.dumps(row, protocol=5)

    def deserialize(self, topic: str, data: bytes | None) -> Any:
        return None if data is None else pickle.loads(data)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RowKeySerde) and other.columns == self.columns

    def __hash__(self) -> int:
        return hash(self.columns)


class RowValueSerde:
    """A record value -> its columns (a dict's items, a dataclass's or pydantic model's
    fields, else one ``value`` column); ``None`` (a tombstone) stays ``None``."""

    def __init__(self, columns: RowColumns) -> None:
        self.columns = columns

    def serialize(self, topic: str, data: Any) -> bytes | None:
        if data is None:
            return None
        return pickle.dumps(value_columns(data, self.columns.value), protocol=5)

    def deserialize(self, topic: str, data: bytes | None) -> Any:
        return None if data is None else pickle.loads(data)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RowValueSerde) and other.columns == self.columns

    def __hash__(self) -> int:
        return hash(("value", self.columns))


def value_columns(value: Any, column: str = "value") -> dict[str, Any]:
    """Return the columns of ``value``."""
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    dump = getattr(value, "model_dump", None)  # a pydantic model
    if callable(dump):
        out = dump()
        if isinstance(out, dict):
            return out
    return {column: value}


def _utc(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def rows_table(
    table: str,
    mode: str,
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    timestamps: Sequence[int],
    *,
    columns: RowColumns | None = None,
) -> tuple[pa.Table, list[str]]:
    """Return the typed rows of a batch of serialized records, and the key columns.

    Raises:
        SerializationError: a value field has the name of a key or timestamp column, or a
            column's values have no common type (the message names the table and column).
    """
    cols = columns or RowColumns()
    upsert = mode == "upsert"
    by_key: dict[Any, dict[str, Any]] = {}
    rows: list[dict[str, Any]] = []
    key_names: list[str] = []
    for k, v, ts in zip(keys, values, timestamps, strict=True):
        key = pickle.loads(k) if k is not None else {cols.key: None}
        if not key_names:
            key_names = list(key)
        row = dict(key)
        if v is not None:
            fields = pickle.loads(v)
            clash = [f for f in fields if f in row or f in (cols.timestamp, DELETED)]
            if clash:
                raise SerializationError(
                    f"Delta sink {table}: the value's field {clash[0]!r} has the name of one "
                    f"of the sink's own columns ({', '.join([*row, cols.timestamp])}); "
                    "rename the field (map_values before to_delta)"
                )
            row.update(fields)
        row[cols.timestamp] = _utc(ts)
        if upsert:
            row[DELETED] = v is None
            by_key[_hashable(tuple(key.values()))] = row
        else:
            rows.append(row)
    if upsert:
        rows = list(by_key.values())
    names: dict[str, None] = {}
    for row in rows:  # every field any row has (in first-seen order); missing ones: null
        names.update(dict.fromkeys(row))
    try:
        out = pa.table({name: pa.array([row.get(name) for row in rows]) for name in names})
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise SerializationError(
            f"Delta sink {table}: cannot make typed columns of this batch's rows ({exc}); "
            "give each value field one type (a field that is sometimes a number and "
            "sometimes a string cannot be one column)"
        ) from exc
    return out, key_names or [cols.key]


def _hashable(key: tuple[Any, ...]) -> Any:
    try:
        hash(key)
    except TypeError:
        return pickle.dumps(key, protocol=5)
    return key
