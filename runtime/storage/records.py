"""Record layout of a topic table and the record objects users see.

A topic is a Delta table with the columns ``partition`` (int, the Delta partition column),
``key`` and ``value`` (nullable binary), ``timestamp`` (epoch milliseconds, long) and
``headers`` (an ordered list of ``{key: string, value: binary}``, duplicates allowed, as
Kafka's headers). Offsets are not stored in the data files: they are derived from the order
of the Delta log (see :mod:`runtime.storage.offset_index`), which is what lets staged files
be committed unchanged after a lost compare-and-swap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

HEADER_TYPE = pa.struct([("key", pa.string()), ("value", pa.binary())])
HEADERS_TYPE = pa.list_(HEADER_TYPE)

#: Columns stored in each parquet data file (``partition`` lives in the Delta log only).
FILE_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("timestamp", pa.int64()),
        ("headers", HEADERS_TYPE),
    ]
)

#: The Delta table schema of every topic.
TABLE_SCHEMA = pa.schema([pa.field("partition", pa.int32()), *FILE_SCHEMA])

#: What a reader returns: the table columns plus the derived ``offset``.
READ_SCHEMA = pa.schema(
    [
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        *FILE_SCHEMA,
    ]
)

Headers = list[tuple[str, bytes | None]]


def headers_array(headers: Sequence[Sequence[tuple[str, bytes | None]]]) -> pa.ListArray:
    """Each record's headers as one Arrow column of :data:`HEADERS_TYPE` (built from
    flat columns of names and values: no dict per header)."""
    lengths = np.fromiter(map(len, headers), np.int32, len(headers))
    offsets = np.zeros(len(headers) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    flat = list(chain.from_iterable(headers))
    fields = pa.StructArray.from_arrays(
        [
            pa.array([h[0] for h in flat], pa.string()),
            pa.array([h[1] for h in flat], pa.binary()),
        ],
        fields=list(HEADER_TYPE),
    )
    return pa.ListArray.from_arrays(pa.array(offsets), fields, type=HEADERS_TYPE)


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """One record read from a topic partition, with its offset."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where a committed write landed: ``count`` records from ``base_offset`` on."""

    topic: str
    partition: int
    base_offset: int
    count: int

    @property
    def last_offset(self) -> int:
        """Return the offset of the last record written (``base_offset + count - 1``)."""
        return self.base_offset + self.count - 1


def records_from_table(topic: str, table: pa.Table) -> list[ConsumerRecord]:
    """Turn a reader's Arrow table (``READ_SCHEMA``) into ``ConsumerRecord`` objects."""
    cols = table.to_pydict()
    return [
        ConsumerRecord(
            topic,
            partition,
            offset,
            timestamp,
            key,
            value,
            [(h["key"], h["value"]) for h in headers] if headers else [],
        )
        for partition, offset, timestamp, key, value, headers in zip(
            cols["partition"],
            cols["offset"],
            cols["timestamp"],
            cols["key"],
            cols["value"],
            cols["headers"],
            strict=True,
        )
    ]


def rows_where(records: pa.Table, column: str, value: Any) -> pa.Table:
    """The rows of ``records`` whose ``column`` is ``value``: the table itself (no copy)
    when every row's is, the usual case, else a filtered copy."""
    values = records.column(column)
    if records.num_rows:
        low, high = pc.min_max(values).values()
        if low.as_py() == high.as_py():
            return records if low.as_py() == value else records.slice(0, 0)
    return records.filter(pc.equal(values, value))
