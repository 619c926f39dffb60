"""A stream thread sizes its batches from what they took: well inside the deadline, at most
max.poll.records per partition."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.config import StreamsConfig
from runtime.thread.batch_size import (
    FIRST_BATCH_RECORDS,
    RECENT_BATCHES,
    START_SHARE,
    BatchSizer,
    fixed_cost,
)
from runtime.thread.placement import TaskPlacement

TOPICS = ["words"]


def run(sizer: BatchSizer, seconds_per_record: float, backlog: int) -> list[int]:
    """Drain ``backlog`` records of one partition whose records take
    ``seconds_per_record`` each (plus 0.3 s a batch); return the batch sizes."""
    sizes = []
    while backlog > 0:
        cap = sizer.cap(TOPICS)
        n = min(cap, backlog)
        sizes.append(n)
        sizer.measured(TOPICS, cap, n, 0.3 + n * seconds_per_record)
        backlog -= n
    return sizes


def test_kafkas_defaults_read_max_poll_records_from_the_first_batch() -> None:
    for deadline in (300_000, 60_000):  # max.poll.interval.ms, transaction.timeout.ms
        sizes = run(BatchSizer(1000, deadline, name="t"), 1e-4, 20_000)
        assert set(sizes) == {1000} == {FIRST_BATCH_RECORDS}


def test_a_large_max_poll_records_is_reached_in_a_few_batches() -> None:
    """0.31 s for 1,000 records against a target of 60 s: the next batch grows by the
    square root of 60 / 0.31, to 13,912; that one (0.44 s) by more than 3.6."""
    sizer = BatchSizer(50_000, 300_000, name="t")
    sizes = run(sizer, 1e-5, 500_000)
    assert sizes[:3] == [1000, 13_912, 50_000]
    assert set(sizes[2:-1]) == {50_000}


def test_records_dearer_in_bigger_batches_never_push_a_batch_past_the_target() -> None:
    """A record's cost grows with the batch (2e-10 s times the batch's records): each
    batch's time grows with the square of its size, and still none passes the target
    (12 s of a 60 s deadline); they settle at it."""
    sizer = BatchSizer(10**6, 60_000, name="t")
    sizes, backlog, times = [], 5_000_000, []
    while backlog > 0:
        cap = sizer.cap(TOPICS)
        n = min(cap, backlog)
        seconds = 0.3 + 2e-10 * n * n
        sizer.measured(TOPICS, cap, n, seconds)
        sizes.append(n)
        times.append(seconds)
        backlog -= n
    assert max(times) <= 12.0 + 1e-6, times
    assert all(abs(t - 12.0) < 0.1 for t in times[5:-1]), times


def test_expensive_records_give_batches_well_inside_the_deadline() -> None:
    """9.6 ms a line (a word count over lines of 16 new words, what 50,000 lines a
    partition took in 479 s): a 30 s deadline gives batches of about 6 s, and the
    first batch is the longest, at a third of it."""
    sizer = BatchSizer(50_000, 30_000, name="t")
    sizes = run(sizer, 9.6e-3, 62_500)
    times = [0.3 + n * 9.6e-3 for n in sizes]
    assert max(times) == times[0] < 10.0, times
    settled = times[1:-1]
    assert settled and all(abs(t - 6.0) < 0.5 for t in settled), settled


def test_a_batch_that_turns_slow_shrinks_the_next_at_once() -> None:
    sizer = BatchSizer(50_000, 30_000, name="t")
    run(sizer, 1e-5, 300_000)
    assert sizer.cap(TOPICS) == 50_000
    sizer.measured(TOPICS, 50_000, 50_000, 30.0)  # the records got 60 times dearer
    assert sizer.cap(TOPICS) == 10_000  # 6 s of them, at what the batch took
    assert sizer.history[frozenset(TOPICS)][-1] == 10_000


def test_kinds_of_batches_are_sized_apart_and_a_short_input_teaches_nothing() -> None:
    sizer = BatchSizer(10_000, 30_000, name="t")
    sizer.measured(["a"], 1000, 1000, 10.0)  # a slow kind
    assert sizer.cap(["a"]) == 600
    assert sizer.cap(["b"]) == 1000  # another kind starts afresh
    sizer.measured(["b"], 1000, 10, 0.01)  # the input ran out: no growth from that
    assert sizer.cap(["b"]) == 1000
    sizer.measured(["b"], 1000, 10, 15.0)  # but a slow short batch still shrinks it
    assert sizer.cap(["b"]) == 5  # 10 records took 15 s: 6 s is 4 of them, half at most
    sizer.measured(["b"], 5, 5, 31.0)  # past the deadline: cut to the target at once
    assert sizer.cap(["b"]) == 1


def test_the_fixed_cost_of_a_batch_is_the_intercept_of_its_line() -> None:
    assert fixed_cost([(100, 2.1), (200, 2.2), (400, 2.4)]) == pytest.approx(2.0)
    assert fixed_cost([(100, 3.0), (100, 5.0)]) is None  # one size: nothing tells them apart
    assert fixed_cost([(100, 3.0), (200, 2.0)]) == 2.0  # bigger was quicker: all fixed
    assert fixed_cost([(100, 0.5), (200, 2.0)]) == 0.0  # the line crosses below zero


def test_a_batch_slow_whatever_its_records_reads_more_not_less() -> None:
    # storage answering slowly: 5 s a batch before any record, past the 4 s target
    sizer = BatchSizer(500, 20_000, name="t")
    caps = []
    for _ in range(12):
        cap = sizer.cap(TOPICS)
        caps.append(cap)
        sizer.measured(TOPICS, cap, cap, 5.0 + 0.001 * cap)
    assert caps[0] == 500 and caps[1] < 500  # one size told nothing: the careful cut
    # then the line shows the fixed 5 s: fewer records won't help, the records' 0.4 s fit
    # the target many times over: back to max.poll.records
    assert min(caps) >= 300 and caps[-1] == 500, caps


def test_a_cap_of_one_record_slow_for_its_fixed_cost_grows_back() -> None:
    """Batches of one record a partition, each 6 s of reads and commits whatever it
    reads (the chaos run's cap stuck at 1 with 122,000 records behind): after a few of one
    size the sizer reads twice as much, the line shows the cost is fixed, the cap grows."""
    sizer = BatchSizer(500, 20_000, name="t")
    sizer.measured(TOPICS, 500, 2, 160.0)  # a first batch after a restart, under faults
    assert sizer.cap(TOPICS) == 1
    caps = []
    for _ in range(20):
        cap = sizer.cap(TOPICS)
        caps.append(cap)
        sizer.measured(TOPICS, cap, cap, 6.0 + 0.002 * cap)
    # the slow first batch leaves the last 8 batches, then one size only: the probe
    probe = caps.index(2)
    assert set(caps[:probe]) == {1} and probe <= RECENT_BATCHES + 1, caps
    assert caps[-1] == 500, caps


def test_a_cut_aims_at_the_target_less_the_fixed_cost() -> None:
    sizer = BatchSizer(1000, 20_000, name="t")
    for cap in (500, 400):  # two sizes: 1 s a batch, 10 ms a record
        sizer.measured(TOPICS, cap, cap, 1.0 + 0.01 * cap)
    # 300 records fill the 3 s the 4 s target leaves after the fixed second
    assert sizer.cap(TOPICS) == 300


def test_one_batch_slowed_by_a_fault_costs_half_the_cap_not_the_backlog() -> None:
    """Batches of 40 records a partition, 1.5 s before their records and 10 ms a record,
    then one that a storage fault held for 19.6 s of its 20 s deadline (the chaos run's
    cap went from 40 to 2 and read 1-7 records a second for minutes after): the cap is
    halved, and grows back in a few batches once they are quick again."""
    sizer = BatchSizer(500, 20_000, name="t")
    for cap in (40, 30, 40):
        sizer.measured(TOPICS, cap, cap, 1.5 + 0.01 * cap)
    before = sizer.cap(TOPICS)
    sizer.measured(TOPICS, before, before, 19.6)
    assert sizer.cap(TOPICS) == before // 2
    caps = []
    for _ in range(4):
        cap = sizer.cap(TOPICS)
        caps.append(cap)
        sizer.measured(TOPICS, cap, cap, 1.5 + 0.01 * cap)
    assert sizer.cap(TOPICS) >= before, caps


def test_batches_that_stay_slow_are_halved_until_they_fit() -> None:
    """The records got 15 times dearer for good (0.15 s each): the cap halves batch after
    batch, and a few batches later they end near the 4 s target, none past the deadline."""
    sizer = BatchSizer(500, 20_000, name="t")
    for cap in (40, 30, 40):
        sizer.measured(TOPICS, cap, cap, 1.5 + 0.01 * cap)
    times = []
    for _ in range(8):
        cap = sizer.cap(TOPICS)
        seconds = 1.5 + 0.15 * cap
        times.append(seconds)
        sizer.measured(TOPICS, cap, cap, seconds)
    assert max(times) < 20.0 and times[-1] <= 4.0 + 0.5, times


def test_a_cap_cut_to_one_record_grows_again_once_batches_are_quick() -> None:
    sizer = BatchSizer(500, 20_000, name="t")
    sizer.measured(TOPICS, 500, 1, 20.0)  # a storage fault: one record took 20 s
    assert sizer.cap(TOPICS) == 1
    caps = []
    for _ in range(40):  # healthy again: 1.4 s a batch before its records, target 4 s
        cap = sizer.cap(TOPICS)
        caps.append(cap)
        sizer.measured(TOPICS, cap, cap, 1.4 + 0.001 * cap)
    assert caps[-1] > 100, caps


def test_what_a_thread_learnt_outlives_it(tmp_path: Path) -> None:
    """The caps and the last batches are kept in state.dir: the thread started after a
    restart begins from them, not from max.poll.records of the backlog; a damaged file, or
    a disk that cannot take it, only costs the memory."""
    memory = str(tmp_path / "app" / "batch-sizes-app-p-1.json")
    first = BatchSizer(1000, 60_000, name="t", memory=memory)
    run(first, 0.05, 2_000)  # 50 ms a record against a 12 s target
    learnt = first.cap(TOPICS)
    assert learnt < FIRST_BATCH_RECORDS
    again = BatchSizer(1000, 60_000, name="t", memory=memory)
    # the start's first batch opens the tasks: a quarter of what was learnt, then all of it
    assert again.cap(TOPICS) == int(learnt * START_SHARE)
    assert again.cap(["other"]) == FIRST_BATCH_RECORDS  # a kind never seen
    assert list(again._recent[frozenset(TOPICS)]) == list(first._recent[frozenset(TOPICS)])
    again.measured(["other"], 1000, 1000, 0.5)  # another kind's batch: what is kept...
    assert BatchSizer(1000, 60_000, name="t", memory=memory)._recalled[frozenset(TOPICS)] == learnt
    again.measured(TOPICS, again.cap(TOPICS), again.cap(TOPICS), 9.0, opened=True)
    assert again.cap(TOPICS) == learnt  # however long the opening took
    # a smaller max.poll.records bounds what is recalled
    assert BatchSizer(10, 60_000, name="t", memory=memory).cap(TOPICS) == max(
        1, int(min(10, learnt) * START_SHARE)
    )

    Path(memory).write_text('{"version": 1, "kinds": [{"topics": ["words"]}]}')
    assert BatchSizer(1000, 60_000, name="t", memory=memory).cap(TOPICS) == FIRST_BATCH_RECORDS

    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the directory should be
    sizer = BatchSizer(1000, 60_000, name="t", memory=str(blocked / "sizes.json"))
    run(sizer, 0.05, 500)  # measured and cut without an error
    assert sizer.cap(TOPICS) < FIRST_BATCH_RECORDS


def test_a_batch_that_opened_its_tasks_costs_half_the_cap_at_most() -> None:
    """A restart's first batch opens its tasks and restores their stores: 28 s for 61
    records a partition against a 20 s deadline (it left a cap of one record in the chaos
    run). Its time is the opening's: the cap is halved at most, and the batch is not one
    the fixed cost is fitted through."""
    sizer = BatchSizer(500, 20_000, name="t")
    for cap in (61, 50, 61):
        sizer.measured(TOPICS, cap, cap, 1.5 + 0.02 * cap)
    sizer.measured(TOPICS, 61, 61, 28.2, opened=True)
    assert sizer.cap(TOPICS) == 30
    assert (61, 28.2) not in sizer._recent[frozenset(TOPICS)]
    sizer.measured(TOPICS, 61, 61, 28.2)  # the same without opening: past the deadline
    assert sizer.cap(TOPICS) < 10


def test_a_batch_that_opens_tasks_a_rebalance_moved_reads_a_quarter() -> None:
    """A running thread given tasks by a rebalance opens them in its next batch (restoring
    their stores, while the group's next rebalance waits for the batch): it reads a quarter
    of the cap it learnt, and the cap is the same after it, however long the opening took."""
    sizer = BatchSizer(1000, 60_000, name="t")
    run(sizer, 0.01, 5_000)
    learnt = sizer.cap(TOPICS)
    shared = sizer.cap(TOPICS, opening=True)
    assert shared == int(learnt * START_SHARE)
    sizer.measured(TOPICS, shared, shared, 40.0, opened=True)
    assert sizer.cap(TOPICS) == learnt
    assert (shared, 40.0) not in sizer._recent[frozenset(TOPICS)]
    # a kind it never ran (it owned none of its partitions): a share of a first batch
    assert sizer.cap(["other"], opening=True) == int(FIRST_BATCH_RECORDS * START_SHARE)
    # a new application's first batch opens every task: it reads what a first batch reads
    assert BatchSizer(1000, 60_000, name="t").cap(TOPICS, opening=True) == FIRST_BATCH_RECORDS


def test_a_thread_knows_which_batch_opens_tasks() -> None:
    """The tasks a batch visits are new to the thread until a batch of theirs committed:
    after its start and after a rebalance gave it more; a batch that did not commit opened
    nothing for good."""
    placement = TaskPlacement(
        StreamsConfig.from_dict({"application.id": "a", "topics.root": "/tmp/x"})
    )
    assert placement.opens(["0_0", "0_1"])  # the start
    placement.committed({})
    assert not placement.opens(["0_0", "0_1"])
    placement.committed({})
    assert placement.opens(["0_0", "0_1", "0_2"])  # a rebalance gave it 0_2
    assert placement.opens(["0_0", "0_1", "0_2"])  # that batch failed: planned again
    placement.committed({})
    assert not placement.opens(["0_1", "0_2"])  # 0_0 revoked
