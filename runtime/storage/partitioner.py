"""Choose partitions as Kafka's Java producer does.

A keyed record goes to ``toPositive(murmur2(key)) % numPartitions``, bit for bit the same
hash as ``org.apache.kafka.common.utils.Utils.murmur2``, so a key lands in the partition
number a Java client would put it in (co-partitioning with topics written by Kafka tools
keeps working). Records without a key are spread with Kafka's sticky idea: they stick to one
partition until ``batch.size`` bytes went there, then move on round robin.

The batch path hashes a whole Arrow column at once with numpy (one pass per 4-byte block
position, not per record), which is what the producer uses.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common.columns import looks_distinct

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Return Kafka's 32-bit murmur2 hash of ``data`` as a signed int (Java's ``int``)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    full = length & ~3
    for i in range(0, full, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    tail = length & 3
    if tail == 3:
        h ^= data[full + 2] << 16
    if tail >= 2:
        h ^= data[full + 1] << 8
    if tail >= 1:
        h ^= data[full]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Return ``number & 0x7fffffff``, Kafka's ``Utils.toPositive``."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """Return the partition Kafka's default partitioner picks for a non-null ``key``."""
    return to_positive(murmur2(key)) % num_partitions


def murmur2_array(keys: pa.BinaryArray | pa.LargeBinaryArray) -> np.ndarray:
    """Hash every key of an Arrow binary column; null keys hash as empty keys.

    Returns:
        ``uint32`` hashes (reinterpret as ``int32`` for Java's signed value).
    """
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    n = len(keys)
    offset_type = np.int64 if pa.types.is_large_binary(keys.type) else np.int32
    bufs = keys.buffers()
    raw_offsets = np.frombuffer(bufs[1], dtype=offset_type, count=n + 1 + keys.offset)
    offsets = raw_offsets[keys.offset :].astype(np.int64)
    starts = offsets[:-1]
    lengths = offsets[1:] - offsets[:-1]
    if keys.null_count:
        lengths = np.where(np.asarray(keys.is_null(), dtype=bool), 0, lengths)
    raw = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    # Padded so that reads past a key's end never leave the buffer (masked out below);
    # ``words[i]`` is the little-endian 32-bit word at byte ``i`` (an overlapping view):
    # one gather per block. uint32 arithmetic wraps as Java's int does.
    data = np.concatenate([raw, np.zeros(8, dtype=np.uint8)])
    words = np.ndarray(shape=(len(data) - 3,), dtype="<u4", buffer=data, strides=(1,))
    m = np.uint32(_M)
    h = np.uint32(_SEED) ^ lengths.astype(np.uint32)
    blocks = lengths // 4
    with np.errstate(over="ignore"):
        for j in range(int(blocks.max(initial=0))):
            active = blocks > j
            k = words[np.where(active, starts + 4 * j, 0)]
            k *= m
            k ^= k >> np.uint32(24)
            k *= m
            mixed = (h * m) ^ k
            h = np.where(active, mixed, h)
        tail = lengths & 3
        base = np.where(tail > 0, starts + (lengths & ~3), 0)
        last = words[base] & np.where(tail == 3, 0xFFFFFF, np.where(tail == 2, 0xFFFF, 0xFF))
        h = np.where(tail >= 1, (h ^ last.astype(np.uint32)) * m, h)
        h ^= h >> np.uint32(13)
        h *= m
        h ^= h >> np.uint32(15)
    return h.astype(np.uint32)


def partitions_for_keys(
    keys: pa.BinaryArray | pa.LargeBinaryArray, num_partitions: int
) -> np.ndarray:
    """Return Kafka's default partition for every key (entries for null keys are -1).
    Keys that repeat (a word count's words) are hashed once each."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    hashes = _repeated_hashes(keys)
    if hashes is None:
        hashes = murmur2_array(keys)
    hashes = hashes.astype(np.int64) & 0x7FFFFFFF
    parts = (hashes % num_partitions).astype(np.int32)
    if keys.null_count:
        parts[np.asarray(keys.is_null(), dtype=bool)] = -1
    return parts


def _repeated_hashes(keys: pa.BinaryArray | pa.LargeBinaryArray) -> np.ndarray | None:
    """murmur2 of every key through its distinct values, when at most half are distinct
    (None otherwise); null keys get an arbitrary hash (their partition is decided apart)."""
    if len(keys) < 64:
        return None
    if looks_distinct(keys, share=0.5):  # hashing each key costs less than grouping them
        return None
    encoded = pc.dictionary_encode(keys)
    if 2 * len(encoded.dictionary) > len(keys):
        return None
    indices = pc.fill_null(encoded.indices, 0).to_numpy()
    distinct = murmur2_array(encoded.dictionary)
    return distinct[indices] if len(distinct) else np.zeros(len(keys), np.uint32)


class StickyPartitioner:
    """Spread records without a key: stick to one partition for ``batch_size`` bytes.

    Kafka's built-in partitioner (KIP-480/KIP-794) sticks to a partition until a batch is
    full and then switches; here the switch is round robin from a per-producer starting
    point, so a single producer spreads evenly and several producers do not move in step.
    """

    __slots__ = ("_batch_size", "_current", "_filled")

    def __init__(self, batch_size: int = 16384, start: int = 0) -> None:
        self._batch_size = max(1, batch_size)
        self._current = start
        self._filled = 0

    def assign(self, sizes: np.ndarray, num_partitions: int) -> np.ndarray:
        """Return a partition for each record of byte sizes ``sizes`` (in order)."""
        out = np.empty(len(sizes), dtype=np.int32)
        if len(sizes) == 0:
            return out
        # Cumulative bytes since the current sticky partition was chosen decide the switch
        # points: record i moves on once the bytes before it filled whole batches.
        cumulative = np.cumsum(sizes, dtype=np.int64) - sizes + self._filled
        batch_no = cumulative // self._batch_size
        out[:] = (self._current + batch_no) % num_partitions
        total = int(cumulative[-1] + sizes[-1])
        self._current = int((self._current + total // self._batch_size) % num_partitions)
        self._filled = total % self._batch_size
        return out
