"""StreamsApp end to end on local Spark: the word count gives what the test driver gives."""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pyspark.sql import SparkSession

from common.errors import UnknownTopicError
from common.serdes import Serdes
from runtime.app.app import StreamsApp
from runtime.app.app_state import AppState
from runtime.spark.trigger import _QUIET_LOGGERS, BatchTrigger
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.txn.coordinator import TransactionCoordinator
from runtime.txn.state import TransactionState
from streams.testing import TopologyTestDriver

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference_counts(example: ModuleType, lines: list[tuple[str | None, str]]) -> dict[str, int]:
    """The final count per word according to the TopologyTestDriver."""
    s = Serdes.String()
    with TopologyTestDriver(example.build_topology(), example.CONFIG) as driver:
        topic = driver.create_input_topic(example.INPUT, s, s)
        for key, line in lines:
            topic.pipe_input(key, line, timestamp=1)
        out = driver.create_output_topic(example.OUTPUT, s, Serdes.Long())
        return dict(out.read_key_values_to_map())


def produce_lines(admin: TopicAdmin, topic: str, lines: list[tuple[str | None, str]]) -> None:
    producer = Producer(admin)
    for key, line in lines:
        producer.send(topic, None if key is None else key.encode(), line.encode(), timestamp=1)
    producer.flush()


def output_counts(root: str, topic: str) -> tuple[dict[str, int], list[tuple[str, int]]]:
    """Latest count per word in the output, and every (word, count) record."""
    reader = TopicReader(root)
    records: list[tuple[str, int]] = []
    long = Serdes.Long()
    for p in reader.end_offsets(topic):
        table = reader.read(topic, p, 0)
        for k, v in zip(
            table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True
        ):
            records.append((k.decode(), long.deserialize(topic, v)))
    latest: dict[str, int] = {}
    for word, count in records:
        latest[word] = max(latest.get(word, 0), count)
    return latest, records


@pytest.mark.parametrize(
    ("guarantee", "threads"),
    [
        ("exactly_once_v2", 1),
        ("at_least_once", 1),
        # the deprecated per-task guarantee: its own commit strategy, a long run
        pytest.param("exactly_once", 1, marks=pytest.mark.slow),
        ("exactly_once_v2", 4),  # 3 partitions: the fourth thread has none
    ],
)
def test_word_count_matches_the_test_driver(  # noqa: PLR0917 - fixtures and parameters
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path, guarantee: str, threads: int
) -> None:
    example = load_example("wordcount")
    lines = example.generate(300)
    admin.create(example.INPUT, 3)
    admin.create(example.OUTPUT, 3)
    produce_lines(admin, example.INPUT, lines[:200])
    config: dict[str, Any] = {
        **example.CONFIG,
        "processing.guarantee": guarantee,
        "topics.root": root,
        "state.dir": str(tmp_path / "state"),
        "commit.interval.ms": 50,
        "group.initial.rebalance.delay.ms": 0,  # one instance: no one to wait for
        "max.poll.records": 40,
        "num.stream.threads": threads,
    }
    states: list[AppState] = []
    app = StreamsApp(example.build_topology(), config, spark=spark)
    app.set_state_listener(lambda new, old: states.append(new))
    app.run_until_idle()
    assert states == [
        AppState.REBALANCING,
        AppState.RUNNING,
        AppState.PENDING_SHUTDOWN,
        AppState.NOT_RUNNING,
    ]
    # One thread under v2 or at_least_once: the repartition is a shuffle inside the batch,
    # nothing goes through the repartition topic. Per-task transactions or several
    # threads need the topic.
    repartition = f"{example.CONFIG['application.id']}-{example.STORE}-repartition"
    stored = sum(TopicReader(root).end_offsets(repartition).values())
    in_batch = threads == 1 and guarantee != "exactly_once"
    assert (stored == 0) is in_batch

    # A second run (a restart) picks up where the first stopped.
    produce_lines(admin, example.INPUT, lines[200:])
    StreamsApp(example.build_topology(), config, spark=spark).run_until_idle()

    expected = reference_counts(example, lines)
    latest, records = output_counts(root, example.OUTPUT)
    assert latest == expected
    # No update twice: each word's counts strictly increase (caching may skip some).
    per_word: dict[str, list[int]] = {}
    for word, count in records:
        per_word.setdefault(word, []).append(count)
    for word, counts in per_word.items():
        assert counts == sorted(set(counts)), f"{word}: {counts}"
    if guarantee != "at_least_once":
        tid_dir = os.path.join(root, "_transactions")
        assert os.path.isdir(tid_dir)
        coordinator = TransactionCoordinator(admin)
        ids = sorted(meta.transactional_id for meta in coordinator.list())
        if guarantee == "exactly_once":  # one transactional id per task
            assert ids == sorted(f"wordcount-{s}_{p}" for s in (0, 1) for p in range(3))
        else:  # one per stream thread: <application.id>-<processId>-<thread>
            assert [i.rsplit("-", 1)[1] for i in ids] == [str(t + 1) for t in range(threads)]
            assert len({i.rsplit("-", 1)[0] for i in ids}) == 1
        for meta in coordinator.list():
            assert meta.state in (
                TransactionState.COMPLETE_COMMIT,
                TransactionState.COMPLETE_ABORT,
                TransactionState.EMPTY,
            )


def test_a_missing_source_topic_is_named_with_what_to_do(root: str, tmp_path: Path) -> None:
    example = load_example("wordcount")
    config = {**example.CONFIG, "topics.root": root, "state.dir": str(tmp_path / "state")}
    app = StreamsApp(example.build_topology(), config)
    with pytest.raises(UnknownTopicError, match="source topic 'text-lines' does not exist"):
        app.start()
    assert app.state is AppState.ERROR


def test_changelogs_are_compacted_in_the_background_and_restores_still_agree(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    example = load_example("wordcount")
    lines = example.generate(400)
    admin.create(example.INPUT, 2)
    admin.create(example.OUTPUT, 2)
    produce_lines(admin, example.INPUT, lines[:300])
    config: dict[str, Any] = {
        **example.CONFIG,
        "topics.root": root,
        "state.dir": str(tmp_path / "state"),
        "commit.interval.ms": 50,
        "group.initial.rebalance.delay.ms": 0,  # one instance: no one to wait for
        "max.poll.records": 30,
        "statestore.snapshot.interval": 2,
        "log.cleaner.backoff.ms": 200,  # the log manager compacts every 200 ms
    }
    changelog = f"{example.CONFIG['application.id']}-{example.STORE}-changelog"
    reader = TopicReader(root)

    def stored_and_offsets() -> tuple[int, int]:
        if not admin.exists(changelog):
            return 0, 0
        ends = reader.end_offsets(changelog)
        starts = reader.beginning_offsets(changelog)
        stored = sum(reader.read(changelog, p, starts[p]).num_rows for p in ends)
        return stored, sum(ends.values())

    # running (a fast run can end before the cleaner's first pass): until it compacted
    app = StreamsApp(example.build_topology(), config, spark=spark)
    app.start()
    try:
        deadline = time.monotonic() + 90
        while (found := stored_and_offsets())[0] >= found[1] and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        app.close()
    stored, offsets = stored_and_offsets()
    assert 0 < stored < offsets, "nothing was compacted"
    # Lose the local state: the restore reads the newest snapshot and the compacted
    # changelog, and the counts carry on from the right values.
    StreamsApp(example.build_topology(), config, spark=spark).cleanup()
    produce_lines(admin, example.INPUT, lines[300:])
    StreamsApp(example.build_topology(), config, spark=spark).run_until_idle()
    latest, _ = output_counts(root, example.OUTPUT)
    assert latest == reference_counts(example, lines)


def _log_managers(query: Any) -> set[str]:
    """The classes writing a running query's offset and commit logs."""
    execution = query._jsq.streamingQuery()
    return {
        log.fileManager().getClass().getSimpleName()
        for log in (execution.offsetLog(), execution.commitLog())
    }


def test_stream_threads_write_their_disposable_checkpoints_cheaply_and_leave_the_session_be(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    example = load_example("wordcount")
    admin.create(example.INPUT, 2)
    admin.create(example.OUTPUT, 2)
    key = "spark.sql.streaming.checkpointFileManagerClass"
    users = (
        "org.apache.spark.sql.execution.streaming.checkpointing."
        "FileContextBasedCheckpointFileManager"
    )
    spark.conf.set(key, users)  # the user's own choice for their own queries
    config = {
        **example.CONFIG,
        "topics.root": root,
        "state.dir": str(tmp_path / "state"),
        "commit.interval.ms": 20,
        "group.initial.rebalance.delay.ms": 0,
    }
    app = StreamsApp(example.build_topology(), config, spark=spark)
    try:
        app.start()
        assert app.query is not None
        assert _log_managers(app.query) == {"FileSystemBasedCheckpointFileManager"}
        assert spark.conf.get(key) == users
        own = spark.readStream.format("rate").load().writeStream.format("noop")
        own_query = own.option("checkpointLocation", str(tmp_path / "own")).start()
        try:
            assert _log_managers(own_query) == {"FileContextBasedCheckpointFileManager"}
        finally:
            own_query.stop()
        produce_lines(admin, example.INPUT, [(None, "a b a")])
        app.run_until_idle()
    finally:
        app.close()
        spark.conf.unset(key)
    assert output_counts(root, example.OUTPUT)[0] == {"a": 2, "b": 1}


def test_spark_warnings_about_what_a_stream_thread_never_relies_on_are_quiet(
    spark: SparkSession, admin: TopicAdmin
) -> None:
    """The socket source's "no recovery" warning and the trigger's "falling behind" one
    (a batch longer than commit.interval.ms, every batch of a busy thread) log nothing."""
    admin.create("lines", 1)
    trigger = BatchTrigger(admin, ["lines"], poll_ms=20, name="t")
    try:
        trigger.dataframe(spark)
    finally:
        trigger.close()
    jvm: Any = spark.sparkContext._jvm
    levels = {
        name: str(jvm.org.apache.logging.log4j.LogManager.getLogger(name).getLevel())
        for name in _QUIET_LOGGERS
    }
    assert set(levels.values()) == {"ERROR"}, levels

    def is_class(name: str) -> bool:
        try:
            jvm.java.lang.Class.forName(name)
        except Exception:
            return False
        return True

    # the names are this Spark's own: the socket source and one of the trigger's names
    found = {name.rsplit(".", 1)[1] for name in _QUIET_LOGGERS if is_class(name)}
    assert found == {"TextSocketSourceProvider", "ProcessingTimeExecutor"}


def test_a_thread_without_tasks_runs_no_batch(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    """More stream threads than tasks: the thread the group gives nothing runs no batch and
    opens no transaction (an empty batch and its commit delayed its next rejoin by seconds
    on an object store), as Kafka's thread without tasks only polls."""
    example = load_example("wordcount")
    admin.create(example.INPUT, 1)
    admin.create(example.OUTPUT, 1)
    lines = example.generate(60)
    produce_lines(admin, example.INPUT, lines)
    config: dict[str, Any] = {
        **example.CONFIG,
        "topics.root": root,
        "state.dir": str(tmp_path / "state"),
        "commit.interval.ms": 50,
        "group.initial.rebalance.delay.ms": 0,
        "num.stream.threads": 3,  # two tasks: 0_0 and 1_0
    }
    app = StreamsApp(example.build_topology(), config, spark=spark)
    app.run_until_idle()
    idle = [t for t in app.threads if not t.task_ids()]
    assert idle, [t.task_ids() for t in app.threads]
    assert [t.batches for t in idle] == [0] * len(idle)
    assert output_counts(root, example.OUTPUT)[0] == reference_counts(example, lines)
