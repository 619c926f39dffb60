"""A fused batch hands repartitioned records on as one bundle per (visit, topic); split
per target partition, they reach each task in the order a shuffle's packs would."""

from __future__ import annotations

import random

import pyarrow as pa

from runtime.storage.records import HEADERS_TYPE
from runtime.tasks.bundle import BUNDLE, _bundle_row, bundle_inputs, placed


def _chunk(tag: str, n: int) -> pa.Table:
    return pa.table(
        {
            "key": pa.array([f"{tag}-k{i}".encode() for i in range(n)], pa.binary()),
            "value": pa.array(
                [f"{tag}-v{i}".encode() if i % 3 else None for i in range(n)], pa.binary()
            ),
            "timestamp": pa.array([1000 + i for i in range(n)], pa.int64()),
            "headers": pa.array([[] if i % 2 else [("h", b"x")] for i in range(n)], HEADERS_TYPE),
        }
    )


def test_bundles_split_per_target_in_the_order_of_packs() -> None:
    rng = random.Random(7)
    topics = ["rep-a", "rep-b"]
    # what each upstream visit (origin) repartitioned: (topic, target, records), in order
    written: dict[int, list[tuple[str, int, pa.Table]]] = {}
    for origin in rng.sample(range(12), 12):
        written[origin] = [
            (topic, target, _chunk(f"{origin}-{topic}-{target}-{j}", rng.randint(0, 4)))
            for j in range(rng.randint(1, 6))
            for topic in [rng.choice(topics)]
            for target in [rng.randrange(5)]
        ]
    rows = []
    for origin, inline in written.items():
        by_topic: dict[str, list[tuple[int, pa.Table]]] = {}
        for topic, target, chunk in inline:
            by_topic.setdefault(topic, []).append((target, chunk))
        rows += [_bundle_row(topic, origin, chunks) for topic, chunks in by_topic.items()]
    assert {row["kind"] for row in rows} == {BUNDLE}
    rng.shuffle(rows)  # the worker sees them in any order
    got = bundle_inputs((r["topic"], r["origin"], pa.py_buffer(r["value"])) for r in rows)
    for target in range(5):
        for topic in topics:
            # a shuffle's packs: one per (origin, topic, target), ordered by origin
            expected = [
                placed(chunk)
                for origin in sorted(written)
                for t, tgt, chunk in written[origin]
                if t == topic and tgt == target and chunk.num_rows
            ]
            mine = [table for t, table in got.get(target, []) if t == topic]
            want = pa.concat_tables(expected).to_pylist() if expected else []
            have = pa.concat_tables(mine).to_pylist() if mine else []
            assert have == want, (target, topic)


def test_an_empty_bundle_gives_no_records() -> None:
    row = _bundle_row("rep", 3, [(1, _chunk("x", 0))])
    assert row["count"] == 0
    assert bundle_inputs([("rep", 3, pa.py_buffer(row["value"]))]) == {}
