"""What flows through a foreign-key join's internal topics and subscription store (KIP-213):
subscriptions, responses, the combined ``(foreign key, primary key)`` store key, and the
Murmur3 hash of the left value that lets the final join drop stale responses.

Internal serdes resolve the default key/value serdes of the configuration when a task's
processor binds them (:meth:`FkSerdes.bind`), since the join's input serdes may be left to
``default.key.serde`` / ``default.value.serde``.

The user's serdes are called with Kafka's topics: the registration and response topics
for what is written to them, and, for what is serialized inside the join's own formats,
Kafka's pseudo-topics ``<application.id>-<registration topic>-fk`` (a foreign key, in a
store key or compared), ``-pk`` (a primary key, in a subscription or a store key) and
``-vh`` (a left value, hashed) whatever topic or changelog the wrapper is written to, so
that a serde that registers a schema per topic sees the same topics as under Kafka.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

from common.errors import SerializationError
from common.serdes import Serde, serde_from_name

_LEN = struct.Struct(">i")
_MASK = (1 << 64) - 1
_C1, _C2 = 0x87C37B91114253D5, 0x4CF5AD432745937F
#: Kafka's ``Murmur3.DEFAULT_SEED``.
SEED = 104729


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _fmix(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _MASK
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _MASK
    return k ^ (k >> 33)


def murmur3_128(data: bytes, seed: int = SEED) -> bytes:
    """Return the 16-byte MurmurHash3 x64 128-bit hash of ``data`` (``h1 || h2``, as
    Kafka's ``Murmur3.hash128``)."""
    h1 = h2 = seed & _MASK
    n = len(data) // 16
    for i in range(n):
        k1, k2 = struct.unpack_from("<QQ", data, i * 16)
        h1 ^= _rotl((k1 * _C1) & _MASK, 31) * _C2 & _MASK
        h1 = (_rotl(h1, 27) + h2) & _MASK
        h1 = (h1 * 5 + 0x52DCE729) & _MASK
        h2 ^= _rotl((k2 * _C2) & _MASK, 33) * _C1 & _MASK
        h2 = (_rotl(h2, 31) + h1) & _MASK
        h2 = (h2 * 5 + 0x38495AB5) & _MASK
    tail = data[n * 16 :]
    k1 = int.from_bytes(tail[:8], "little")
    k2 = int.from_bytes(tail[8:], "little")
    if len(tail) > 8:
        h2 ^= _rotl((k2 * _C2) & _MASK, 33) * _C1 & _MASK
    if tail:
        h1 ^= _rotl((k1 * _C1) & _MASK, 31) * _C2 & _MASK
    h1 ^= len(data)
    h2 ^= len(data)
    h1 = (h1 + h2) & _MASK
    h2 = (h2 + h1) & _MASK
    h1, h2 = _fmix(h1), _fmix(h2)
    h1 = (h1 + h2) & _MASK
    h2 = (h2 + h1) & _MASK
    return struct.pack(">QQ", h1, h2)


class Instruction(enum.IntEnum):
    """What the foreign side does with a subscription (Kafka's byte values)."""

    DELETE_KEY_NO_PROPAGATE = 0
    DELETE_KEY_AND_PROPAGATE = 1
    PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE = 2
    PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE = 3


class Subscription(NamedTuple):
    """A left row's registration with a foreign key: the hash of the left value it was
    sent for (None: deleted), the instruction and the primary key."""

    value_hash: bytes | None
    instruction: Instruction
    primary_key: Any


class Response(NamedTuple):
    """The foreign value (None: none) answering a subscription with ``value_hash``."""

    value_hash: bytes | None
    foreign_value: Any


@dataclass(slots=True)
class FkSerdes:
    """The serdes of one foreign-key join; ``None`` ones take the configured defaults at
    :meth:`bind`."""

    primary_key: Serde[Any] | None
    foreign_key: Serde[Any] | None
    value: Serde[Any] | None
    foreign_value: Serde[Any] | None
    topic: str = ""  # the subscription registration topic (raw, as in the graph)
    #: Kafka's pseudo-topics (``<application.id>-<topic>-fk``, ``-pk``, ``-vh``), at bind
    fk_topic: str = ""
    pk_topic: str = ""
    vh_topic: str = ""

    def bind(self, app_config: Any, application_id: str) -> None:
        """Resolve missing serdes from ``default.key.serde`` / ``default.value.serde`` and
        name the pseudo-topics, prefixed with the application id as an internal topic is
        (Kafka's ``decoratePseudoTopic``)."""
        key, value = app_config["default.key.serde"], app_config["default.value.serde"]
        self.primary_key = self.primary_key or serde_from_name(key)
        self.foreign_key = self.foreign_key or serde_from_name(key)
        self.value = self.value or serde_from_name(value)
        self.foreign_value = self.foreign_value or serde_from_name(value)
        pseudo = f"{application_id}-{self.topic}"
        self.fk_topic, self.pk_topic, self.vh_topic = (f"{pseudo}-{s}" for s in ("fk", "pk", "vh"))

    def value_hash(self, value: Any) -> bytes | None:
        """Return the Murmur3 hash of the serialized left ``value`` (None for None)."""
        if value is None:
            return None
        assert self.value is not None
        return murmur3_128(self.value.serialize(self.vh_topic, value) or b"")

    def fk_bytes(self, foreign_key: Any) -> bytes | None:
        """Return the serialized foreign key (FKs are compared as bytes, as Kafka)."""
        assert self.foreign_key is not None
        if foreign_key is None:
            return None
        return self.foreign_key.serialize(self.fk_topic, foreign_key)


def _opt(data: bytes | None) -> bytes:
    return b"\x00" if data is None else b"\x01" + _LEN.pack(len(data)) + data


def _read_opt(data: bytes, pos: int) -> tuple[bytes | None, int]:
    if data[pos] == 0:
        return None, pos + 1
    size = _LEN.unpack_from(data, pos + 1)[0]
    return data[pos + 5 : pos + 5 + size], pos + 5 + size


class SubscriptionSerde:
    """``instruction byte | optional hash | optional primary key bytes``; the primary key
    (de)serialized for the ``-pk`` pseudo-topic, whatever the ``topic`` argument."""

    def __init__(self, serdes: FkSerdes) -> None:
        self.serdes = serdes

    def serialize(self, topic: str, data: Subscription | None) -> bytes | None:
        """Return the subscription's bytes."""
        if data is None:
            return None
        assert self.serdes.primary_key is not None
        pk = self.serdes.primary_key.serialize(self.serdes.pk_topic, data.primary_key)
        return bytes((int(data.instruction),)) + _opt(data.value_hash) + _opt(pk)

    def deserialize(self, topic: str, data: bytes | None) -> Subscription | None:
        """Return the subscription."""
        if data is None:
            return None
        if not data:
            raise SerializationError("a subscription needs at least one byte")
        assert self.serdes.primary_key is not None
        value_hash, pos = _read_opt(data, 1)
        pk, _ = _read_opt(data, pos)
        primary_key = self.serdes.primary_key.deserialize(self.serdes.pk_topic, pk)
        return Subscription(value_hash, Instruction(data[0]), primary_key)


class ResponseSerde:
    """``optional hash | optional foreign value bytes``."""

    def __init__(self, serdes: FkSerdes) -> None:
        self.serdes = serdes

    def serialize(self, topic: str, data: Response | None) -> bytes | None:
        """Return the response's bytes."""
        if data is None:
            return None
        assert self.serdes.foreign_value is not None
        value = self.serdes.foreign_value.serialize(topic, data.foreign_value)
        return _opt(data.value_hash) + _opt(value)

    def deserialize(self, topic: str, data: bytes | None) -> Response | None:
        """Return the response."""
        if data is None:
            return None
        assert self.serdes.foreign_value is not None
        value_hash, pos = _read_opt(data, 0)
        value, _ = _read_opt(data, pos)
        return Response(value_hash, self.serdes.foreign_value.deserialize(topic, value))


class CombinedKeySerde:
    """The subscription store key ``(foreign key, primary key)``: the 4-byte length of the
    foreign key's bytes, those bytes, then the primary key's bytes (Kafka's
    ``CombinedKeySchema``), so that one foreign key's subscriptions are one prefix; the
    keys are (de)serialized for the ``-fk`` and ``-pk`` pseudo-topics, whatever ``topic``."""

    def __init__(self, serdes: FkSerdes) -> None:
        self.serdes = serdes

    def serialize(self, topic: str, data: tuple[Any, Any] | None) -> bytes | None:
        """Return ``len(fk) | fk | pk``."""
        if data is None:
            return None
        assert self.serdes.primary_key is not None
        prefix = self.prefix(topic, data[0])
        return prefix + (self.serdes.primary_key.serialize(self.serdes.pk_topic, data[1]) or b"")

    def prefix(self, topic: str, foreign_key: Any) -> bytes:
        """Return the key prefix of every subscription to ``foreign_key``."""
        raw = self.serdes.fk_bytes(foreign_key) or b""
        return _LEN.pack(len(raw)) + raw

    def deserialize(self, topic: str, data: bytes | None) -> tuple[Any, Any] | None:
        """Return ``(foreign key, primary key)``."""
        if data is None:
            return None
        assert self.serdes.foreign_key is not None and self.serdes.primary_key is not None
        size = _LEN.unpack_from(data)[0]
        fk = self.serdes.foreign_key.deserialize(self.serdes.fk_topic, data[4 : 4 + size])
        return fk, self.serdes.primary_key.deserialize(self.serdes.pk_topic, data[4 + size :])


class PrefixSerializer:
    """Serializes a foreign key as the combined-key prefix (for ``prefix_scan``)."""

    def __init__(self, keys: CombinedKeySerde) -> None:
        self.keys = keys

    def serialize(self, topic: str, data: Any) -> bytes:
        """Return the prefix bytes."""
        return self.keys.prefix(topic, data)
