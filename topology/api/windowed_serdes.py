"""Serdes of windowed keys, byte-compatible with Kafka's ``WindowedSerdes``.

* time windows (``TimeWindowedSerializer``): ``[key bytes][window start, 8 bytes]``; the
  end is not written, so the deserializer needs the window size (end = start + size).
* sessions (``SessionWindowedSerializer``): ``[key bytes][end, 8 bytes][start, 8 bytes]``.

Times are big-endian signed longs. A serde built without an inner serde (the DSL's windowed
tables when no key serde is known) takes the configured default key serde when the task
starts (:func:`topology.graph.stores.resolve_serde`).

Example:
    >>> from common.serdes import Serdes
    >>> from statestores.api import Window, Windowed
    >>> serde = WindowedSerdes.time_windowed_serde_from(Serdes.String(), 10)
    >>> serde.serialize("t", Windowed("k", Window(20, 30)))
    b'k\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x14'
    >>> serde.deserialize("t", serde.serialize("t", Windowed("k", Window(20, 30))))
    Windowed(key='k', window=Window(start=20, end=30))
"""

from __future__ import annotations

import struct
from typing import Any

from common.errors import SerializationError
from common.serdes import Serde
from statestores.api import Window, Windowed

_LONG = struct.Struct(">q")
_MAX = (1 << 63) - 1


class TimeWindowedSerde:
    """Serialise ``Windowed[K]`` of time windows of ``window_size_ms``."""

    __slots__ = ("inner", "window_size_ms")

    def __init__(self, inner: Serde[Any] | None, window_size_ms: int) -> None:
        self.inner = inner
        self.window_size_ms = window_size_ms

    def __repr__(self) -> str:
        return f"TimeWindowedSerde({self.inner!r}, {self.window_size_ms})"

    def with_inner(self, inner: Serde[Any]) -> TimeWindowedSerde:
        """Return this serde over ``inner`` (the default key serde)."""
        return TimeWindowedSerde(inner, self.window_size_ms)

    def serialize(self, topic: str, data: Windowed[Any] | None) -> bytes | None:
        """Return ``key + start``; ``None`` gives ``None``."""
        if data is None:
            return None
        assert self.inner is not None
        raw = self.inner.serialize(topic, data.key)
        return (raw or b"") + _LONG.pack(data.window.start)

    def deserialize(self, topic: str, data: bytes | None) -> Windowed[Any] | None:
        """Return the windowed key; the end is start + window size (capped)."""
        if data is None:
            return None
        if len(data) < 8:
            raise SerializationError(f"a time-windowed key needs at least 8 bytes, got {len(data)}")
        assert self.inner is not None
        start = _LONG.unpack_from(data, len(data) - 8)[0]
        end = start + self.window_size_ms
        return Windowed(self.inner.deserialize(topic, data[:-8]), Window(start, min(end, _MAX)))


class SessionWindowedSerde:
    """Serialise ``Windowed[K]`` of session windows."""

    __slots__ = ("inner",)

    def __init__(self, inner: Serde[Any] | None) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"SessionWindowedSerde({self.inner!r})"

    def with_inner(self, inner: Serde[Any]) -> SessionWindowedSerde:
        """Return this serde over ``inner`` (the default key serde)."""
        return SessionWindowedSerde(inner)

    def serialize(self, topic: str, data: Windowed[Any] | None) -> bytes | None:
        """Return ``key + end + start``; ``None`` gives ``None``."""
        if data is None:
            return None
        assert self.inner is not None
        raw = self.inner.serialize(topic, data.key)
        return (raw or b"") + _LONG.pack(data.window.end) + _LONG.pack(data.window.start)

    def deserialize(self, topic: str, data: bytes | None) -> Windowed[Any] | None:
        """Return the windowed key."""
        if data is None:
            return None
        if len(data) < 16:
            raise SerializationError(f"a session key needs at least 16 bytes, got {len(data)}")
        assert self.inner is not None
        size = len(data)
        end = _LONG.unpack_from(data, size - 16)[0]
        start = _LONG.unpack_from(data, size - 8)[0]
        return Windowed(self.inner.deserialize(topic, data[:-16]), Window(start, end))


class WindowedSerdes:
    """Factories of windowed-key serdes, named as Kafka's ``WindowedSerdes``."""

    @staticmethod
    def time_windowed_serde_from(inner: Serde[Any], window_size_ms: int) -> TimeWindowedSerde:
        """The serde of time-windowed keys over ``inner`` for windows of ``window_size_ms``.

        Example:
            >>> from common.serdes import Serdes
            >>> WindowedSerdes.time_windowed_serde_from(Serdes.String(), 10).window_size_ms
            10
        """
        return TimeWindowedSerde(inner, window_size_ms)

    @staticmethod
    def session_windowed_serde_from(inner: Serde[Any]) -> SessionWindowedSerde:
        """The serde of session-windowed keys over ``inner``.

        Example:
            >>> from common.serdes import Serdes
            >>> WindowedSerdes.session_windowed_serde_from(Serdes.String()).inner is not None
            True
        """
        return SessionWindowedSerde(inner)
