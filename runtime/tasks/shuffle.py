"""Where a batch's shuffle sends a task's records: the value of the ``shuffle`` column
that ``DataFrame.repartition(n, "shuffle")`` puts in a chosen Spark partition (Spark's
``hash()`` of an int, reproduced here)."""

from __future__ import annotations

import functools


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF


def spark_hash_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of an int column (Murmur3 x86_32, seed 42), as a signed int."""
    k1 = (value & 0xFFFFFFFF) * 0xCC9E2D51 & 0xFFFFFFFF
    k1 = _rotl(k1, 15) * 0x1B873593 & 0xFFFFFFFF
    h1 = _rotl(seed ^ k1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & 0xFFFFFFFF
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & 0xFFFFFFFF
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & 0xFFFFFFFF
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


@functools.cache
def shuffle_keys_of(partitions: int) -> tuple[int, ...]:
    """:func:`shuffle_keys`, computed once per count."""
    return tuple(shuffle_keys(partitions))


def shuffle_keys(partitions: int) -> list[int]:
    """Return, for each partition ``p`` of ``partitions``, the smallest int ``v`` that
    ``DataFrame.repartition(partitions, col)`` sends to Spark partition ``p``, so a
    record's task partition is its Spark partition (no two tasks share a Spark task)."""
    found: dict[int, int] = {}
    value = 0
    while len(found) < partitions:
        found.setdefault(spark_hash_int(value) % partitions, value)
        value += 1
    return [found[p] for p in range(partitions)]
