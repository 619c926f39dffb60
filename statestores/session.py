"""The session store: aggregates per key and session ``[start, end]`` (both inclusive).

Entry keys are ``[segment of end 8][serialised key][end 8][start 8]``, as Kafka's
``SessionKeySchema`` (end before start), segmented by session end: the sessions of a key
come out ordered by end, then start, and stream time is the largest session end seen.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Generic, TypeVar, cast

from common.serdes import Serde, deserialize_many
from statestores.api import Window, Windowed
from statestores.bytes_layer import BytesKeyValue
from statestores.metered import BatchListener, FlushListener, MeteredStore
from statestores.segments import Segments, decode_time, encode_time

K = TypeVar("K")
V = TypeVar("V")

_SUFFIX = 16  # end (8) + start (8)
_FAR = 1 << 62


class MeteredSessionStore(MeteredStore, Generic[K, V]):
    """A typed :class:`~statestores.api.SessionStore` over a bytes stack.

    Args:
        wrapped: the bytes stack.
        key_serde: serde of the record keys.
        value_serde: serde of the aggregates.
        retention_ms: how long sessions are kept after their end, in stream time.
    """

    def __init__(
        self,
        wrapped: BytesKeyValue,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        *,
        retention_ms: int,
    ) -> None:
        super().__init__(wrapped, key_serde, value_serde)
        self._retention = retention_ms
        self._segments = Segments(wrapped, retention_ms)

    @property
    def retention_period(self) -> int:
        """The retention period in ms."""
        return self._retention

    def _bind(self) -> None:
        self.on_restored()

    def on_restored(self) -> None:
        """Recompute stream time from the stored sessions."""
        self._segments.recover(_SUFFIX)  # the end sits 16 bytes before the key's end

    def abort(self) -> None:
        """Discard uncommitted writes; stream time goes back to what is stored."""
        super().abort()
        self.on_restored()

    def _entry(self, raw_key: bytes, start: int, end: int) -> bytes:
        segments = self._segments
        return b"".join(
            (
                segments.prefix(segments.segment_of(end)),
                raw_key,
                encode_time(end),
                encode_time(start),
            )
        )

    def _raw(self, key: K) -> bytes:
        raw: bytes = self.key_serde.serialize(self.topic, key)
        return raw

    def put(self, session: Windowed[K], value: V | None) -> None:
        """Store ``value`` for ``session``; ``None`` removes it. Expired sessions are
        dropped."""
        self.metrics["put"] += 1
        end = session.window.end
        self._segments.observe(end)
        if self._segments.expired(end):
            return
        entry = self._entry(self._raw(session.key), session.window.start, end)
        raw = None if value is None else self.value_serde.serialize(self.topic, value)
        self.wrapped.put(entry, raw)

    def remove(self, session: Windowed[K]) -> None:
        """Remove ``session``."""
        self.put(session, None)

    def fetch_session(self, key: K, start: int, end: int) -> V | None:
        """Return the aggregate of the session ``[start, end]`` of ``key``."""
        self.metrics["get"] += 1
        if self._segments.expired(end):
            return None
        raw = self.wrapped.get(self._entry(self._raw(key), start, end))
        return None if raw is None else self.value_serde.deserialize(self.topic, raw)

    def _find(
        self, key: K, earliest_end: int, latest_start: int, reverse: bool
    ) -> Iterator[tuple[Windowed[K], V]]:
        self.metrics["range"] += 1
        raw_key = self._raw(key)
        size = 8 + len(raw_key) + _SUFFIX
        segments, topic = self._segments, self.topic
        vde = self.value_serde.deserialize
        # the segments still live from ``earliest_end`` on, and in them every session
        # ending at or after it: a session past retention in a segment not yet dropped is
        # found, as Kafka's session stores find it (their key range is not cut at retention)
        for segment in segments.live_segments(earliest_end, _FAR, reverse=reverse):
            prefix = segments.prefix(segment) + raw_key
            lo = prefix + encode_time(earliest_end)
            hi = prefix + b"\xff" * _SUFFIX
            for entry, value in self.wrapped.items(lo, hi, reverse=reverse):
                if len(entry) != size:
                    continue
                start = decode_time(entry, size - 8)
                if start <= latest_start:
                    end = decode_time(entry, size - _SUFFIX)
                    yield Windowed(key, Window(start, end)), vde(topic, value)

    def find_sessions(
        self, key: K, earliest_session_end: int, latest_session_start: int
    ) -> Iterator[tuple[Windowed[K], V]]:
        """Sessions of ``key`` with ``end >= earliest_session_end`` and
        ``start <= latest_session_start``, ascending by end then start."""
        return self._find(key, earliest_session_end, latest_session_start, False)

    def backward_find_sessions(
        self, key: K, earliest_session_end: int, latest_session_start: int
    ) -> Iterator[tuple[Windowed[K], V]]:
        """As :meth:`find_sessions`, descending."""
        return self._find(key, earliest_session_end, latest_session_start, True)

    def find_ended_sessions(
        self, earliest_end: int, latest_end: int
    ) -> tuple[list[Windowed[K]], list[V]]:
        """Every session ending in ``[earliest_end, latest_end]``, by end, start, then key
        bytes (the order of Kafka's time-ordered session store, which emit-on-close
        range-scans)."""
        self.metrics["range"] += 1
        segments = self._segments
        found: list[tuple[int, int, bytes, bytes]] = []
        for segment in segments.live_segments(earliest_end, latest_end):
            prefix = segments.prefix(segment)
            hi = segments.prefix(segment + 1)
            for entry, value in self.wrapped.items(prefix, hi):
                if entry == hi:
                    continue
                size = len(entry)
                end = decode_time(entry, size - _SUFFIX)
                if earliest_end <= end <= latest_end:
                    found.append((end, decode_time(entry, size - 8), entry[8:-_SUFFIX], value))
        found.sort()
        topic = self.topic
        keys = deserialize_many(self.key_serde, topic, [f[2] for f in found])
        values = deserialize_many(self.value_serde, topic, [f[3] for f in found])
        sessions = [Windowed(k, Window(f[1], f[0])) for k, f in zip(keys, found, strict=True)]
        return cast("list[Windowed[K]]", sessions), cast("list[V]", values)

    def read_meta(self, name: str) -> int | None:
        """Return the int metadata entry ``name`` kept with the sessions (see
        :mod:`statestores.segments`), or None."""
        return self._segments.read_meta(name)

    def write_meta(self, name: str, value: int) -> None:
        """Write the int metadata entry ``name``, logged and committed with the sessions."""
        self._segments.write_meta(name, value)

    def fetch(self, key: K) -> Iterator[tuple[Windowed[K], V]]:
        """Every live session of ``key``."""
        return self._find(key, -_FAR, _FAR, False)

    def backward_fetch(self, key: K) -> Iterator[tuple[Windowed[K], V]]:
        """Every live session of ``key``, newest first."""
        return self._find(key, -_FAR, _FAR, True)

    def _typed_batch_listener(self, listener: BatchListener) -> Any:
        topic, key_serde, value_serde = self.topic, self.key_serde, self.value_serde

        def forward(
            entries: list[bytes], news: list[Any], olds: list[Any], timestamps: list[int]
        ) -> None:
            keys = deserialize_many(key_serde, topic, [entry[8:-_SUFFIX] for entry in entries])
            sessions = [
                Windowed(key, Window(decode_time(e, len(e) - 8), decode_time(e, len(e) - _SUFFIX)))
                for key, e in zip(keys, entries, strict=True)
            ]
            listener(
                sessions,
                deserialize_many(value_serde, topic, news),
                deserialize_many(value_serde, topic, olds),
                timestamps,
            )

        return forward

    def _typed_listener(self, listener: FlushListener) -> Any:
        topic = self.topic
        kde, vde = self.key_serde.deserialize, self.value_serde.deserialize

        def forward(entry: bytes, new: bytes | None, old: bytes | None, timestamp: int) -> None:
            size = len(entry)
            window = Window(decode_time(entry, size - 8), decode_time(entry, size - _SUFFIX))
            key = Windowed(kde(topic, entry[8:-_SUFFIX]), window)
            listener(key, vde(topic, new), vde(topic, old), timestamp)

        return forward
