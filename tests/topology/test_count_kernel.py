"""The count's columnar kernel (:mod:`topology.processors.count_kernel`) against the
record-by-record fold it replaces, on columns large enough for each of its paths."""

from __future__ import annotations

import random
import struct
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from topology.processors import count_kernel as kernel


def _columns(kind: str, n: int, rng: random.Random) -> list[bytes]:
    if kind == "distinct":
        return [b"u%07d" % i for i in rng.sample(range(10 * n), n)]
    if kind == "distinct_then_repeats":  # the first keys all new, then old ones again
        first = [b"u%07d" % i for i in range(n // 2)]
        return first + [rng.choice(first) for _ in range(n - len(first))]
    return [b"w%d" % rng.randrange(50) for _ in range(n)]


@pytest.mark.parametrize("kind", ["distinct", "distinct_then_repeats", "few"])
@pytest.mark.parametrize("n", [10, 5000])
def test_groups_are_the_records_grouped_by_key(kind: str, n: int) -> None:
    rng = random.Random(n)
    keys = _columns(kind, n, rng)
    weights = [rng.randint(1, 3) for _ in keys]
    for given in (None, weights):
        groups = kernel.group(pa.chunked_array([pa.array(keys, pa.binary())]), given)
        distinct = groups.keys.to_pylist()
        assert distinct == list(dict.fromkeys(keys))  # in order of first appearance
        assert groups.raw is None or groups.raw == distinct
        assert [distinct[g] for g in groups.group_of.tolist()] == keys
        per_key: Counter[bytes] = Counter()
        for key, w in zip(keys, given or [1] * n, strict=True):
            per_key[key] += w
        assert groups.sizes.tolist() == [per_key[k] for k in distinct]
        last = {key: i for i, key in enumerate(keys)}
        assert groups.last.tolist() == [last[k] for k in distinct]
        seen: Counter[bytes] = Counter()
        ranks = []
        for key in keys:
            ranks.append(seen[key])
            seen[key] += 1
        assert (groups.rank.tolist() if groups.rank is not None else [0] * n) == ranks


@pytest.mark.parametrize("seed", range(5))
def test_every_update_is_the_fold_record_by_record(seed: int) -> None:
    """Each record's count so far, count before it, and latest timestamp so far (the
    stored entry's included), as the generic fold gives them one record at a time."""
    rng = random.Random(seed)
    n = rng.choice([50, 6000])
    keys = _columns(rng.choice(["distinct", "distinct_then_repeats", "few"]), n, rng)
    ts = sorted(rng.randrange(10**12, 10**12 + 10**6) for _ in keys)
    if seed % 2:  # some out of order
        for _ in range(n // 10):
            i = rng.randrange(n)
            ts[i] -= rng.randrange(10**5)
    store = {
        k: (rng.randrange(1, 100), rng.randrange(10**12 - 10**6, 10**12 + 10**6))
        for k in rng.sample(sorted(set(keys)), len(set(keys)) // 3)
    }
    groups = kernel.group(pa.array(keys, pa.binary()))
    distinct = groups.keys.to_pylist()
    raws = [
        None if k not in store else struct.pack(">qq", store[k][1], store[k][0]) for k in distinct
    ]
    stored = kernel.parse(raws)
    assert stored is not None
    for send_old in (False, True):
        result = kernel.every_update(groups, stored, np.array(ts, np.int64), send_old=send_old)
        assert result is not None
        updates, finals = result
        state = dict(store)
        expected, stamps = [], []
        for key, t in zip(keys, ts, strict=True):
            old = state.get(key)
            count, stamp = (1, t) if old is None else (old[0] + 1, max(old[1], t))
            state[key] = (count, stamp)
            expected.append((count, None if old is None or not send_old else old[0]))
            stamps.append(stamp)
        assert [tuple(c) for c in updates.changes] == expected
        assert updates.stamps == stamps
        assert finals.tolist() == [state[k][1] for k in distinct]
        assert kernel.latest(groups, np.array(ts, np.int64), stored).tolist() == finals.tolist()
        back = kernel.parse(kernel.encode(stored.counts + groups.sizes, finals))
        assert back is not None
        assert back.counts.tolist() == [state[k][0] for k in distinct]


def test_a_stored_entry_of_another_size_is_not_a_count() -> None:
    assert kernel.parse([None, b"\x00" * 15]) is None
    assert kernel.parse([None, None]) is not None
