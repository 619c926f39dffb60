"""An application never stops processing while its input waits (under every guarantee): a
poll is not a commit, no wake-up is lost for good, and no batch outlives its deadline."""

from __future__ import annotations

import itertools
import json
import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from runtime.app.app import StreamsApp
from runtime.spark import trigger_faults
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.thread.progress import BatchProgress
from runtime.txn.offsets import OFFSETS_TOPIC
from streams.cli import main
from tests.runtime.spark.test_app import load_example, produce_lines

WORDCOUNT = load_example("wordcount")


@pytest.fixture(autouse=True)
def _no_trigger_hooks() -> Iterator[None]:
    yield
    trigger_faults.disarm()


def word_count_app(
    spark: SparkSession, admin: TopicAdmin, tmp_path: Path, lines: int, **extra: Any
) -> StreamsApp:
    """The word count over ``lines`` lines already in its 4-partition input."""
    admin.create(WORDCOUNT.INPUT, 4)
    admin.create(WORDCOUNT.OUTPUT, 4)
    produce_lines(admin, WORDCOUNT.INPUT, WORDCOUNT.generate(lines))
    config = {
        **WORDCOUNT.CONFIG,
        "topics.root": admin.root.uri,
        "state.dir": str(tmp_path / "state"),
        "group.initial.rebalance.delay.ms": 0,
        "log.cleaner.enable": "false",  # every commit of the offsets stays in their log
        **extra,
    }
    return StreamsApp(WORDCOUNT.build_topology(), config, spark=spark)


def offset_commits(admin: TopicAdmin) -> dict[tuple[str, int], list[float]]:
    """When (epoch s) each consumed partition's position was committed: the records of
    the offsets topic, one per partition a commit (a plain commit, a thread's transaction
    or, under exactly_once, a task's)."""
    reader = TopicReader(admin.root.uri)
    out: dict[tuple[str, int], list[float]] = {}
    for partition in reader.end_offsets(OFFSETS_TOPIC):
        table = reader.read(OFFSETS_TOPIC, partition, 0)
        for key, stamp in zip(
            table.column("key").to_pylist(), table.column("timestamp").to_pylist(), strict=True
        ):
            _group, topic, part = json.loads(key)
            out.setdefault((topic, int(part)), []).append(stamp / 1000)
    return {tp: sorted(times) for tp, times in out.items()}


def drain(app: StreamsApp, admin: TopicAdmin) -> tuple[float, dict[tuple[str, int], list[float]]]:
    """Run ``app`` until idle; return the seconds it took and its commits' times."""
    started = time.monotonic()
    app.run_until_idle()
    return time.monotonic() - started, offset_commits(admin)


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2", "exactly_once"])
def test_kafkas_default_commit_interval_drains_a_backlog_as_fast_and_commits_at_its_pace(
    spark: SparkSession, tmp_path: Path, guarantee: str
) -> None:
    """20,000 lines waiting, max.poll.records=200, Kafka's default commit.interval.ms
    (30 s under at_least_once, 100 ms under exactly-once): the backlog drains at least at
    0.8 times the rate it has with commit.interval.ms=100, and positions are committed no
    more often than the interval (under at_least_once: between the batches, then once at
    close)."""
    lines = 20_000
    runs: dict[int | None, tuple[float, dict[tuple[str, int], list[float]]]] = {}
    lived: dict[int | None, float] = {}  # seconds from the app's making to its close
    for interval in (None, 100):  # Kafka's default first: the JVM is no warmer for it
        made = time.monotonic()
        admin = TopicAdmin(str(tmp_path / f"root-{interval}"))
        extra: dict[str, Any] = {"processing.guarantee": guarantee, "max.poll.records": 200}
        if interval is not None:
            extra["commit.interval.ms"] = interval
        app = word_count_app(spark, admin, tmp_path / f"run-{interval}", lines, **extra)
        default = app.config.commit_interval_ms
        if interval == default:  # exactly-once: Kafka's default is 100 ms already
            runs[interval] = runs[None]
            break
        runs[interval] = drain(app, admin)
        lived[interval] = time.monotonic() - made
    (seconds, commits), (reference, _) = runs[None], runs[100]
    rate, reference_rate = lines / seconds, lines / reference
    assert rate >= 0.8 * reference_rate, (rate, reference_rate)
    interval_s = (30_000 if guarantee == "at_least_once" else 100) / 1000
    assert {t for t, _ in commits} >= {WORDCOUNT.INPUT}, commits
    for partition, times in commits.items():
        span = times[-1] - times[0]
        assert len(times) <= span / interval_s + 2, (partition, len(times), span)
        if guarantee == "at_least_once":
            # positions wait 30 s from the thread's start: the backlog drains in less on a
            # quiet machine (the one commit is at close); a loaded one may take longer, and
            # commit once per 30 s of its life before the one at close
            assert len(times) <= 1 + lived[None] // interval_s, (partition, times, lived)


def gaps_while_lagging(progress: list[tuple[float, BatchProgress]]) -> list[float]:
    """The seconds between a batch's end and the next batch's start, after each batch
    that left records behind."""
    gaps = []
    for (ended, before), (ended_next, after) in itertools.pairwise(progress):
        if before.lag > 0:
            gaps.append(ended_next - after.batch_ms / 1000 - ended)
    return gaps


@pytest.mark.slow
def test_no_gap_between_batches_while_input_waits_on_a_loaded_machine(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Both cores loaded by another process, random delays of up to 100 ms at every wake-up,
    round of the trigger's watch and batch start and end: over 200 batches, none starts
    more than 2 s after the previous one while records wait."""
    admin = TopicAdmin(str(tmp_path / "root"))
    app = word_count_app(spark, admin, tmp_path, 20_000, **{"max.poll.records": 25})
    progress: list[tuple[float, BatchProgress]] = []
    app.add_progress_listener(lambda p: progress.append((time.monotonic(), p)))
    trigger_faults.arm_delays(100, seed=7)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        app.run_until_idle()
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    gaps = gaps_while_lagging(progress)
    print(
        f"batches: {len(progress)}, gaps while records waited: {len(gaps)}, largest "
        f"{max(gaps):.3f} s, median {sorted(gaps)[len(gaps) // 2]:.3f} s"
    )
    assert len(progress) >= 200, len(progress)
    assert max(gaps) <= 2.0, sorted(gaps)[-5:]
    assert app.metrics().total("stalled-total", "stream-thread-metrics") == 0


def test_a_lost_wake_up_is_found_by_the_watchdog_which_wakes_the_query(
    spark: SparkSession,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The thread's wake-ups after a batch that left records behind are lost (a test hook
    drops them): each time, after stall.timeout.ms, its watchdog logs one WARNING, counts
    stalled-total, shows the thread STALLED in ``streams-eos status`` and wakes the query
    itself, so the backlog still drains."""
    admin = TopicAdmin(str(tmp_path / "root"))
    app = word_count_app(
        spark,
        admin,
        tmp_path,
        1_200,
        **{
            "max.poll.records": 100,
            "stall.timeout.ms": 1500,
            "processing.guarantee": "at_least_once",
        },
    )
    statuses: list[str] = []

    def on_stall(stalled: bool) -> None:  # after the instance record was rewritten
        if stalled:
            capsys.readouterr()
            main(["status", "--root", admin.root.uri, "--application-id", "wordcount"])
            statuses.append(capsys.readouterr().out)

    trigger_faults.drop(["behind"])
    app.start()
    app.threads[0].reporter.stall_listeners.append(on_stall)
    with caplog.at_level(logging.WARNING, logger="runtime.thread.watchdog"):
        app.run_until_idle()
    warnings = [r.getMessage() for r in caplog.records if r.name == "runtime.thread.watchdog"]
    stalls = app.metrics().total("stalled-total", "stream-thread-metrics")
    assert warnings and all("stalled: no batch for" in w for w in warnings), warnings
    assert all("records unread" in w and "stall.timeout.ms=1500" in w for w in warnings)
    assert stalls == len(warnings) >= 2, (stalls, warnings)
    assert statuses and all("STALLED" in s for s in statuses), statuses
    with app.store("word-counts") as store:
        counts = dict(store.all())
    assert sum(counts.values()) == sum(len(line.split()) for _, line in WORDCOUNT.generate(1_200))


def new_word_lines(lines: int, words: int = 16) -> list[tuple[str | None, str]]:
    """``lines`` lines of ``words`` words never seen before each."""
    return [
        (f"line-{i}", " ".join(f"w{i * words + j}" for j in range(words))) for i in range(lines)
    ]


@pytest.mark.slow
@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_a_backlog_of_four_million_new_words_drains_in_one_run_without_a_rebalance(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture, guarantee: str
) -> None:
    """4 M distinct words in lines of 16, max.poll.records=50000, max.poll.interval.ms
    lowered to 30 s (a batch of 50,000 such lines a partition took 479 s): the thread
    sizes its batches from what they took, so the backlog drains in one run, every batch
    inside the deadline, with no rebalance and no TaskMigratedError."""
    lines = new_word_lines(250_000)
    admin = TopicAdmin(str(tmp_path / "root"))
    admin.create(WORDCOUNT.INPUT, 4)
    admin.create(WORDCOUNT.OUTPUT, 4)
    for start in range(0, len(lines), 25_000):
        produce_lines(admin, WORDCOUNT.INPUT, lines[start : start + 25_000])
    config = {
        **WORDCOUNT.CONFIG,
        "processing.guarantee": guarantee,
        "topics.root": admin.root.uri,
        "state.dir": str(tmp_path / "state"),
        "group.initial.rebalance.delay.ms": 0,
        "max.poll.records": 50_000,
        "max.poll.interval.ms": 30_000,
    }
    app = StreamsApp(WORDCOUNT.build_topology(), config, spark=spark)
    progress: list[BatchProgress] = []
    app.add_progress_listener(progress.append)
    with caplog.at_level(logging.INFO, logger="runtime.thread.batch_size"):
        app.run_until_idle()  # raises TaskMigratedError if the member was fenced
    sizes = app.threads[0].liveness.sizer.history
    print(
        "batch sizes chosen (records per partition):", {str(sorted(k)): v for k, v in sizes.items()}
    )
    print("batches:", len(progress), "ms:", [round(p.batch_ms) for p in progress])
    assert sum(p.records_in for p in progress) == len(lines)
    longest = sorted(p.batch_ms for p in progress)[-3:]
    assert longest[-1] < 30_000 * 0.6, longest  # well inside max.poll.interval.ms
    assert app.metrics().total("rebalance-total", "consumer-coordinator-metrics") <= 1  # the join
    assert progress[-1].lag == 0
    # every word counted once: its count 1 went out (at least once)
    assert sum(TopicReader(admin.root.uri).end_offsets(WORDCOUNT.OUTPUT).values()) >= 4_000_000
