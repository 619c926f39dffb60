"""The cleaner's rules over segments: retention, purges, and which small files to merge."""

from __future__ import annotations

import random

from runtime.storage.offset_index import Segment
from runtime.storage.retention import (
    MERGE_FANOUT,
    TopicPolicy,
    compaction_horizon,
    deletable,
    merge_runs,
)

MB = 1 << 20


def seg(base: int, count: int, size: int, ts: int | None = 0) -> Segment:
    return Segment(base, count, f"f{base}", ts, None, size)


def size_of(s: Segment) -> int:
    return s.size or 0


def simulate(batches: int, file_bytes: int, target: int) -> tuple[int, int, int]:
    """Append one file per batch and merge after each; return (most live files seen,
    live files at the end, bytes written by merges per byte appended)."""
    rng = random.Random(5)
    live: list[Segment] = []
    written = appended = most = 0
    offset = 0
    for _ in range(batches):
        size = int(file_bytes * rng.uniform(0.7, 1.3))
        live.append(seg(offset, 10, size))
        offset += 10
        appended += size
        for run in merge_runs(live, target, size_of=size_of):
            merged = seg(run[0].base, sum(s.count for s in run), sum(s.size or 0 for s in run))
            written += merged.size or 0
            i = live.index(run[0])
            live[i : i + len(run)] = [merged]
        most = max(most, len(live))
    return most, len(live), written // appended


def test_merging_bounds_the_files_of_a_partition_at_a_few_rewrites_per_byte() -> None:
    most, last, amplification = simulate(20_000, 4_000, 64 * MB)
    # 80 MB in 4 KB files: at most fanout-1 files per size class, about five classes
    assert most <= 6 * MERGE_FANOUT and last <= 6 * MERGE_FANOUT
    assert amplification <= 6  # each byte rewritten once per size class it climbs
    # a smaller target stops the climb: files stop growing at the target
    most, _, _ = simulate(5_000, 4_000, 256 * 1024)
    assert most <= 5_000 * 4_000 // (256 * 1024 // MERGE_FANOUT) + 4 * MERGE_FANOUT


def test_runs_are_files_of_like_size_and_never_overlap() -> None:
    files = [seg(i * 10, 10, 100) for i in range(8)] + [seg(80, 10, 5000)]
    files += [seg(90 + i * 10, 10, 100) for i in range(7)]
    (run,) = merge_runs(files, 64 * MB, size_of=size_of)
    assert run == files[:8]  # the big file and the seven after it are not like sized
    assert merge_runs(files[:7], 64 * MB, size_of=size_of) == []  # too few
    assert merge_runs(files[:8], 700, size_of=size_of) == []  # beyond the target


def test_retention_deletes_whole_files_oldest_first() -> None:
    files = [seg(0, 5, 100, ts=1000), seg(5, 5, 100, ts=5000), seg(10, 5, 100, ts=2000)]
    policy = TopicPolicy(retention_ms=3000)
    # the third file is old too, but the second one stops the deletion (oldest first)
    assert deletable(files, policy, 6000, size_of=size_of) == files[:1]
    assert deletable(files, TopicPolicy(retention_ms=-1), 10**9, size_of=size_of) == []
    by_bytes = TopicPolicy(retention_ms=-1, retention_bytes=150)
    assert deletable(files, by_bytes, 0, size_of=size_of) == files[:2]
    compact = TopicPolicy(cleanup_policy="compact", retention_ms=0)
    assert deletable(files, compact, 10**9, size_of=size_of) == []  # no delete policy
    # a purge removes what every group consumed, whatever the policy
    assert deletable(files, compact, 0, size_of=size_of, purge_below=12) == files[:2]
    unknown = [seg(0, 5, 100, ts=None)]  # no timestamp statistics: never by time
    assert deletable(unknown, policy, 10**12, size_of=size_of) == []


def test_the_compaction_horizon_leaves_records_younger_than_the_lag() -> None:
    files = [seg(0, 5, 1, ts=1000), seg(5, 5, 1, ts=2000), seg(10, 5, 1, ts=9000)]
    assert compaction_horizon(files, 15, 0, 10_000) == 15
    assert compaction_horizon(files, 15, 5000, 10_000) == 10
    assert compaction_horizon(files, 15, 9500, 10_000) == 0


def test_merged_files_stay_short_in_time_so_retention_keeps_at_most_nine_eighths() -> None:
    """A file a second for 6,000 s under a 600 s retention: without a span limit merged
    files grow to span most of the retention and the partition keeps up to ~1.9x of it;
    with it, at most 9/8 (plus the files of one check), and still few files."""
    policy = TopicPolicy(retention_ms=600_000)

    def run(span: int | None) -> tuple[float, int]:
        live: list[Segment] = []
        oldest_kept = 0.0
        most = 0
        for t in range(6_000):
            now = t * 1000
            live.append(seg(t * 10, 10, 1000, ts=now))
            gone = deletable(live, policy, now, size_of=size_of)
            live = live[len(gone) :]
            for r in merge_runs(live, 64 * MB, size_of=size_of, max_span_ms=span):
                count, size = sum(s.count for s in r), sum(size_of(s) for s in r)
                merged = Segment(r[0].base, count, f"m{r[0].base}", r[-1].max_timestamp, None, size)
                i = live.index(r[0])
                live[i : i + len(r)] = [merged]
            if t > 3_000:  # steady state: how far back the oldest kept record goes
                oldest_kept = max(oldest_kept, (now - live[0].base // 10 * 1000) / 600_000)
                most = max(most, len(live))
        return oldest_kept, most

    unbounded, _ = run(None)
    bounded, files = run(policy.merge_span_ms())
    assert policy.merge_span_ms() == 75_000
    assert unbounded > 1.5
    assert bounded <= 9 / 8 + 0.01
    assert files <= 4 * MERGE_FANOUT  # 600 one-second files merged by eights into ~75 s ones


def test_segment_ms_bounds_the_span_where_nothing_expires() -> None:
    forever = TopicPolicy(retention_ms=-1, segment_ms=7_000)
    assert forever.merge_span_ms() == 7_000
    assert TopicPolicy(cleanup_policy="compact", retention_ms=80).merge_span_ms() == 604_800_000
    files = [seg(i * 10, 10, 100, ts=i * 1000) for i in range(16)]
    assert len(merge_runs(files, MB, size_of=size_of)) == 2
    assert len(merge_runs(files, MB, size_of=size_of, max_span_ms=8_000)) == 2
    assert merge_runs(files, MB, size_of=size_of, max_span_ms=6_000) == []
    # a compacted topic's runs are bounded in offsets (the cleaner: an eighth of its tail)
    assert len(merge_runs(files, MB, size_of=size_of, max_offsets=80)) == 2
    assert merge_runs(files, MB, size_of=size_of, max_offsets=79) == []
