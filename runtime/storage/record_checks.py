"""What a producer checks of a record when it is sent, before it is buffered.

A record is refused on ``send()`` on its own, naming the field, so one bad record never
costs the records buffered before it (a flush that failed on a bad field would have to drop
them all). Kafka's producer checks the same things on ``send``: a timestamp must be a
non-negative long (``Invalid timestamp``), headers are (string, bytes) pairs, and a record
larger than ``max.request.size`` is refused (``RecordTooLargeException``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from common.errors import InvalidRecordError, SerializationError
from runtime.storage.records import HEADERS_TYPE

#: Kafka's default ``max.request.size``: the largest record a producer sends.
MAX_REQUEST_SIZE = 1_048_576
_MAX_LONG = 2**63 - 1
#: Bytes a record takes besides its key, value and headers (Kafka's record overhead).
RECORD_OVERHEAD = 24


def check_record(
    topic: str,
    key: Any,
    value: Any,
    timestamp: Any,
    headers: Any,
    *,
    max_request_size: int = MAX_REQUEST_SIZE,
) -> None:
    """Raise if one field of a record cannot be stored; return None if all can.

    Raises:
        SerializationError: the key or the value is not bytes or None.
        InvalidRecordError: the timestamp, the headers or the record's size (naming which).
    """
    for what, data in (("key", key), ("value", value)):
        if data is not None and not isinstance(data, bytes):
            raise SerializationError(
                f"{what} must be bytes or None, got {type(data).__name__}: serialize it first",
                topic=topic,
            )
    if timestamp is not None:
        check_timestamp(topic, timestamp)
    size = RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    if headers is not None:
        size += _check_headers(topic, headers)
    if size > max_request_size:
        raise InvalidRecordError(
            f"the record is {size} bytes, larger than max_request_size ({max_request_size}): "
            "send smaller values, or raise max_request_size on the producer (console-produce: "
            "--producer-property max.request.size=BYTES)",
            topic=topic,
            field="value",
        )


def check_timestamp(topic: str, timestamp: Any) -> None:
    """Raise InvalidRecordError unless ``timestamp`` is an int in 0 .. 2**63 - 1 (epoch ms)."""
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        reason = (
            f"the timestamp must be an int of epoch milliseconds, got "
            f"{type(timestamp).__name__} {timestamp!r}"
        )
    elif not 0 <= timestamp <= _MAX_LONG:
        reason = (
            f"the timestamp {timestamp} is out of range: it must be 0 .. 2**63 - 1 epoch "
            "milliseconds (or None for now)"
        )
    else:
        return
    raise InvalidRecordError(reason, topic=topic, field="timestamp")


def _check_headers(topic: str, headers: Any) -> int:
    """Return the headers' bytes; raise InvalidRecordError naming the first bad header."""
    if isinstance(headers, (str, bytes)) or not isinstance(headers, Sequence):
        raise InvalidRecordError(
            f"headers must be a list of (name, value) pairs, got {type(headers).__name__}",
            topic=topic,
            field="headers",
        )
    size = 0
    for i, header in enumerate(headers):
        ok = isinstance(header, (tuple, list)) and len(header) == 2
        if ok:
            name, data = header
            ok = isinstance(name, str) and (data is None or isinstance(data, bytes))
        if not ok:
            raise InvalidRecordError(
                f"header {i} must be a (str, bytes | None) pair, got {header!r}",
                topic=topic,
                field="headers",
            )
        size += len(name.encode()) + (len(data) if data else 0)
    return size


def check_batch(topic: str, timestamps: Any, headers: pa.Array | None) -> None:
    """Check a batch's timestamps and headers as :func:`check_record` checks one record's.

    Raises:
        InvalidRecordError: naming the first bad record's index and field.
    """
    if timestamps is not None and not isinstance(timestamps, pa.Array | pa.ChunkedArray):
        if isinstance(timestamps, int):
            check_timestamp(topic, timestamps)
        else:
            for i, ts in enumerate(timestamps):
                try:
                    check_timestamp(topic, ts)
                except InvalidRecordError as exc:
                    raise InvalidRecordError(
                        f"record {i}: {exc.reason}", topic=topic, field="timestamp"
                    ) from None
    elif timestamps is not None:
        if not pa.types.is_integer(timestamps.type):
            raise InvalidRecordError(
                f"timestamps must be integers, got {timestamps.type}",
                topic=topic,
                field="timestamp",
            )
        low = pc.min(timestamps).as_py()
        if low is not None and low < 0:
            raise InvalidRecordError(
                f"timestamps must be non-negative; the smallest is {low}",
                topic=topic,
                field="timestamp",
            )
    if headers is not None and headers.type != HEADERS_TYPE:
        raise InvalidRecordError(
            f"headers must be an Arrow array of {HEADERS_TYPE}, got {headers.type}",
            topic=topic,
            field="headers",
        )
