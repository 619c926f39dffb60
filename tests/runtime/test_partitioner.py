"""Kafka's default partitioner, bit for bit."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from runtime.storage.partitioner import (
    StickyPartitioner,
    murmur2,
    murmur2_array,
    partition_for_key,
    partitions_for_keys,
)

# org.apache.kafka.common.utils.UtilsTest#testMurmur2
KAFKA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

# Partitions chosen by Kafka's Java producer for a 1000-partition topic (the values
# kafka-python checks its partitioner against).
JAVA_PARTITIONS_OF_1000 = {
    b"": 681,
    b"a": 524,
    b"ab": 434,
    b"abc": 107,
    b"123456789": 566,
    b"\x00 ": 742,
}


@pytest.mark.parametrize(("key", "expected"), KAFKA_MURMUR2.items())
def test_murmur2_matches_kafka_utils(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@pytest.mark.parametrize(("key", "expected"), JAVA_PARTITIONS_OF_1000.items())
def test_partition_matches_java_client(key: bytes, expected: int) -> None:
    assert partition_for_key(key, 1000) == expected
    assert partitions_for_keys(pa.array([key], pa.binary()), 1000).tolist() == [expected]


def test_vectorised_hash_equals_scalar_on_random_keys() -> None:
    rng = random.Random(7)
    keys = [rng.randbytes(rng.randint(0, 70)) for _ in range(5000)]
    hashes = murmur2_array(pa.array(keys, pa.binary())).view(np.int32).tolist()
    assert hashes == [murmur2(k) for k in keys]


def test_vectorised_partitions_handle_slices_nulls_and_large_binary() -> None:
    keys: list[bytes | None] = [b"k%d" % i for i in range(300)]
    keys[17] = None
    arr = pa.array(keys, pa.binary()).slice(10, 200)
    got = partitions_for_keys(arr, 7).tolist()
    want = [-1 if k is None else partition_for_key(k, 7) for k in keys[10:210]]
    assert got == want
    large = pa.array(keys, pa.large_binary())
    assert partitions_for_keys(large, 5).tolist()[:17] == [
        partition_for_key(k, 5) for k in keys[:17] if k is not None
    ]


def test_sticky_partitioner_switches_after_batch_size_bytes() -> None:
    sticky = StickyPartitioner(batch_size=100, start=2)
    parts = sticky.assign(np.full(10, 25), 4).tolist()
    assert parts == [2, 2, 2, 2, 3, 3, 3, 3, 0, 0]
    # The state carries over between calls: two more fill partition 0's batch.
    assert sticky.assign(np.full(3, 25), 4).tolist() == [0, 0, 1]


def test_sticky_partitioner_spreads_evenly() -> None:
    parts = StickyPartitioner(batch_size=1000, start=0).assign(np.full(8000, 10), 8)
    assert np.bincount(parts, minlength=8).tolist() == [1000] * 8


def test_repeated_keys_are_partitioned_as_one_by_one() -> None:
    """Keys that repeat (hashed once per distinct key) land where each alone would."""
    rng = random.Random(3)
    words: list[bytes | None] = [b"w%d" % rng.randrange(40) for _ in range(3000)]
    words[5] = None
    for arr in (pa.array(words, pa.binary()), pa.chunked_array([words[:1000], words[1000:]])):
        got = partitions_for_keys(arr, 6).tolist()
        assert got == [-1 if k is None else partition_for_key(k, 6) for k in words]
    sliced = pa.array(words, pa.binary()).slice(100, 2000)
    assert partitions_for_keys(sliced, 9).tolist() == [
        -1 if k is None else partition_for_key(k, 9) for k in words[100:2100]
    ]
