"""Two processes producing to one topic at once never leave a gap or a duplicate offset."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter

from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin

PRODUCER = textwrap.dedent(
    """
    import json, sys
    from runtime.storage.producer import Producer

    root, name, count, every = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    producer = Producer(root)
    for i in range(count):
        producer.send("shared", f"{name}-{i % 97}".encode(), f"{name}:{i}".encode())
        if i % every == every - 1:
            producer.flush()
    producer.flush()
    print(json.dumps(producer.metrics))
    """
)


def test_two_processes_5000_records_each(root: str) -> None:
    TopicAdmin(root).create("shared", 4)
    # Small flushes (100 commits per process) make the two race for the same versions.
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PRODUCER, root, name, "5000", "50"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("A", "B")
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    conflicts = 0
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        conflicts += json.loads(out)["commit_conflicts"]
    print(f"lost compare-and-swaps retried: {conflicts}")
    reader = TopicReader(root)
    values: list[bytes] = []
    for partition in range(4):
        table = reader.read("shared", partition, 0)
        offsets = table.column("offset").to_pylist()
        assert offsets == list(range(len(offsets))), f"gap or duplicate in partition {partition}"
        part_values = table.column("value").to_pylist()
        values.extend(part_values)
        for name in (b"A", b"B"):  # each producer's records keep their order
            seq = [int(v.split(b":")[1]) for v in part_values if v.startswith(name)]
            assert seq == sorted(seq)
    assert len(values) == 10_000
    counts = Counter(values)
    assert set(counts.values()) == {1}, "a record was committed twice"
    assert {v.split(b":")[0] for v in counts} == {b"A", b"B"}
    assert sum(reader.end_offsets("shared").values()) == 10_000
