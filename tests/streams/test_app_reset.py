"""``streams-eos application-reset`` on real storage, and end to end with a StreamsApp."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from common.serdes import Serdes
from runtime.app.app import StreamsApp
from runtime.group.assignors import Subscription, assignor_for
from runtime.group.coordinator import GroupCoordinator
from runtime.group.member import GroupMember
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.txn.offsets import OFFSETS_TOPIC, OffsetsStore
from streams.cli import main
from tests.runtime.spark.test_app import load_example, reference_counts

APP = "wordcount"
CHANGELOG = f"{APP}-word-counts-changelog"
REPARTITION = f"{APP}-word-counts-repartition"


def reset(capsys: pytest.CaptureFixture[str], root: str, *args: str) -> tuple[int, str, str]:
    """Run ``streams-eos application-reset ARGS`` in-process; return (code, out, err)."""
    capsys.readouterr()
    code = main(["application-reset", "--root", root, "--application-id", APP, *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def footprint(admin: TopicAdmin, producer: Producer, root: str, tmp_path: Path) -> TopicAdmin:
    """What a stopped run of the word count leaves: topics, offsets, snapshots, checkpoint,
    a stale shutdown marker and local state."""
    for topic, partitions in (
        ("text-lines", 2),
        ("word-counts-out", 2),
        (CHANGELOG, 2),
        (REPARTITION, 2),
        ("other-app-store-changelog", 1),
        (f"{APP}-audit", 1),
    ):
        admin.create(topic, partitions)
    for i in range(6):
        producer.send("text-lines", None, b"line %d" % i, partition=i % 2, timestamp=1000 * i)
        producer.send(REPARTITION, b"w", b"1", partition=i % 2)
        producer.send(CHANGELOG, b"w", b"%d" % i, partition=i % 2)
        producer.send(f"{APP}-audit", None, b"x", partition=0)
    producer.flush()
    OffsetsStore(admin).commit(
        APP,
        {
            ("text-lines", 0): 3,
            ("text-lines", 1): 2,
            (REPARTITION, 0): 3,
            (REPARTITION, 1): 3,
            (f"{APP}-audit", 0): 6,
        },
    )
    OffsetsStore(admin).commit("other-app", {("text-lines", 0): 1})
    admin.root.write_bytes(admin.root.path("snapshots", APP, "0_0", "word-counts", "x"), b"s")
    admin.root.write_bytes(admin.root.path("_apps", APP, "checkpoint", "p-1", "offsets"), b"c")
    admin.root.write_bytes(admin.root.path("_apps", APP, "shutdown-requested"), b"1\nstop")
    state = tmp_path / "state" / APP / "0_0"
    state.mkdir(parents=True)
    (state / "db").write_text("rocks")
    return admin


def offsets(root: str, group: str = APP) -> dict[tuple[str, int], int]:
    return OffsetsStore(TopicAdmin(root)).fetch(group)


def test_dry_run_prints_every_action_and_changes_nothing(
    footprint: TopicAdmin, root: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = offsets(root)
    version = DeltaTable(footprint.table_uri(OFFSETS_TOPIC)).version()
    state_dir = str(tmp_path / "state")
    code, out, err = reset(capsys, root, "--dry-run", "--local", "--state-dir", state_dir)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "----Dry run----"
    assert f"Reset-offsets for input topics [text-lines, {APP}-audit]" in lines
    assert "Topic: text-lines Partition: 0 Offset: 0" in lines
    assert "Topic: text-lines Partition: 1 Offset: 0" in lines
    assert f"Deleting inferred internal topics [{CHANGELOG}, {REPARTITION}]" in lines
    assert "Deleting the committed offsets of 2 internal partition(s)" in lines
    assert any(line.startswith("Deleting store snapshots under ") for line in lines)
    assert any(line.startswith("Deleting Spark checkpoint and markers under ") for line in lines)
    assert f"Deleting local state directory {os.path.join(state_dir, APP)}" in lines
    assert lines[-1].startswith("Dry run: nothing was changed")
    assert offsets(root) == before
    assert DeltaTable(footprint.table_uri(OFFSETS_TOPIC)).version() == version
    fresh = TopicAdmin(root)
    assert fresh.exists(CHANGELOG) and fresh.exists(REPARTITION)
    assert os.path.exists(os.path.join(root, "snapshots", APP, "0_0", "word-counts", "x"))
    assert os.path.exists(os.path.join(root, "_apps", APP, "shutdown-requested"))
    assert os.path.exists(os.path.join(state_dir, APP, "0_0", "db"))


def test_reset_deletes_internal_state_and_rewinds_inputs(
    footprint: TopicAdmin, root: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    version = DeltaTable(footprint.table_uri(OFFSETS_TOPIC)).version()
    code, out, _ = reset(capsys, root, "--input-topics", "text-lines")
    assert code == 0
    # Inputs rewound and internal offsets deleted in one commit; other topics untouched.
    assert DeltaTable(footprint.table_uri(OFFSETS_TOPIC)).version() == version + 1
    assert offsets(root) == {("text-lines", 0): 0, ("text-lines", 1): 0, (f"{APP}-audit", 0): 6}
    assert offsets(root, "other-app") == {("text-lines", 0): 1}
    fresh = TopicAdmin(root)
    assert not fresh.exists(CHANGELOG) and not fresh.exists(REPARTITION)
    assert fresh.exists("other-app-store-changelog") and fresh.exists(f"{APP}-audit")
    assert fresh.exists("text-lines") and fresh.exists("word-counts-out")
    assert not os.path.exists(os.path.join(root, "snapshots", APP))
    assert not os.path.exists(os.path.join(root, "_apps", APP))
    # Local state is the user's to clean on every machine unless --local is given.
    local = tmp_path / "state" / APP
    assert (local / "0_0" / "db").exists()
    assert "on every machine" in out
    code, out, _ = reset(capsys, root, "--local", "--state-dir", str(tmp_path / "state"))
    assert code == 0
    assert not local.exists()
    assert "No internal topics to delete." in out


def test_to_datetime_and_shift_by_of_inputs(
    footprint: TopicAdmin, root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # text-lines: partition 0 has timestamps 0, 2000, 4000; partition 1 1000, 3000, 5000.
    code, out, _ = reset(
        capsys, root, "--input-topics", "text-lines", "--to-datetime", "1970-01-01T00:00:02.500"
    )
    assert code == 0, out
    assert offsets(root) == {("text-lines", 0): 2, ("text-lines", 1): 1, (f"{APP}-audit", 0): 6}
    OffsetsStore(TopicAdmin(root)).commit(APP, {("text-lines", 0): 1})
    code, out, _ = reset(capsys, root, "--input-topics", "text-lines", "--shift-by", "-5")
    assert code == 0
    assert "Topic: text-lines Partition: 0 Offset: 0 (clamped from -4)" in out
    assert offsets(root)[("text-lines", 1)] == 0


def test_shift_of_an_uncommitted_input_starts_at_the_beginning(
    admin: TopicAdmin, producer: Producer, root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    admin.create("fresh", 1)
    for i in range(4):
        producer.send("fresh", None, b"%d" % i)
    producer.flush()
    code, _, err = reset(capsys, root, "--input-topics", "fresh", "--shift-by", "2")
    assert code == 0, err
    assert offsets(root) == {("fresh", 0): 2}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--input-topics", "nope"], "--input-topics: topic(s) nope do not exist"),
        (["--internal-topics", "text-lines"], "text-lines not internal topic"),
        (
            ["--input-topics", "text-lines", "--intermediate-topics", "text-lines"],
            "both --input-topics and --intermediate-topics",
        ),
        (["--to-datetime", "yesterday"], "--to-datetime 'yesterday' is not"),
        (["--from-file", "/no/such/plan.csv"], "--from-file '/no/such/plan.csv' cannot be read"),
    ],
)
def test_bad_options_are_one_line_errors(
    footprint: TopicAdmin,
    root: str,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    before = offsets(root)
    code, _, err = reset(capsys, root, *args)
    assert code == 1
    assert len(err.strip().splitlines()) == 1 and message in err
    assert offsets(root) == before
    assert TopicAdmin(root).exists(CHANGELOG)


# -- end to end: a restart after the reset reprocesses the input --------------------------


def _run_to_idle(spark: SparkSession, config: dict[str, object]) -> None:
    example = load_example("wordcount")
    StreamsApp(example.build_topology(), config, spark=spark).run_until_idle()


def _counts_after(root: str, topic: str, marks: dict[int, int]) -> dict[str, int]:
    """The latest count per word among the records written from ``marks`` on."""
    reader = TopicReader(root)
    long = Serdes.Long()
    latest: dict[str, int] = {}
    for partition, start in marks.items():
        table = reader.read(topic, partition, start)
        for key, value in zip(
            table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True
        ):
            word = key.decode()
            latest[word] = max(latest.get(word, 0), long.deserialize(topic, value))
    return latest


@pytest.fixture
def wordcount(admin: TopicAdmin, root: str, tmp_path: Path) -> tuple[dict[str, object], list]:
    """Create the word count's topics with 120 lines: the first 60 stamped 1 s, the rest
    5 s; return the app config and the lines."""
    example = load_example("wordcount")
    lines = example.generate(120)
    admin.create(example.INPUT, 2)
    admin.create(example.OUTPUT, 2)
    producer = Producer(admin)
    for i, (key, line) in enumerate(lines):
        stamp = 1000 if i < 60 else 5000
        producer.send(example.INPUT, key.encode(), line.encode(), timestamp=stamp)
    producer.flush()
    config: dict[str, object] = {
        **example.CONFIG,
        "topics.root": root,
        "state.dir": str(tmp_path / "state"),
        "commit.interval.ms": 50,
        "group.initial.rebalance.delay.ms": 0,  # one instance: no one to wait for
        "max.poll.records": 40,
    }
    return config, lines


@pytest.mark.parametrize(
    ("strategy", "replayed"),
    [((), slice(0, 120)), (("--to-datetime", "1970-01-01T00:00:03.000Z"), slice(60, 120))],
)
def test_a_restart_after_the_reset_reprocesses_from_the_chosen_point(  # noqa: PLR0917
    spark: SparkSession,
    root: str,
    wordcount: tuple[dict[str, object], list[tuple[str, str]]],
    capsys: pytest.CaptureFixture[str],
    strategy: tuple[str, ...],
    replayed: slice,
) -> None:
    config, lines = wordcount
    example = load_example("wordcount")
    _run_to_idle(spark, config)
    assert _counts_after(root, example.OUTPUT, {0: 0, 1: 0}) == reference_counts(example, lines)
    marks = TopicReader(root).end_offsets(example.OUTPUT)
    state_dir = str(config["state.dir"])
    code, out, err = reset(capsys, root, *strategy, "--local", "--state-dir", state_dir)
    assert code == 0, err
    assert f"Deleting inferred internal topics [{CHANGELOG}" in out
    _run_to_idle(spark, config)
    expected = reference_counts(example, lines[replayed])
    assert _counts_after(root, example.OUTPUT, marks) == expected


def test_active_members_refuse_the_reset_unless_forced(
    footprint: TopicAdmin, root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    coordinator = GroupCoordinator(TopicAdmin(root), initial_rebalance_delay_ms=0)
    member = GroupMember(
        coordinator,
        APP,
        assignor=assignor_for("range"),
        subscription=lambda: Subscription(("text-lines",)),
        session_timeout_ms=60_000,
    )
    member.join(30_000)
    before = offsets(root)
    code, _, err = reset(capsys, root)
    assert code == 1
    assert f"Consumer group '{APP}' is still active and has following members: [" in err
    assert member.member_id in err and "--force" in err
    assert offsets(root) == before and TopicAdmin(root).exists(CHANGELOG)
    code, out, _ = reset(capsys, root, "--force", "--dry-run")
    assert code == 0 and f"Force deleting all active members in the group: {APP}" in out
    assert len(coordinator.describe(APP).members) == 1
    code, out, err = reset(capsys, root, "--force")
    assert code == 0, err
    assert coordinator.describe(APP).members == ()
    assert offsets(root)[("text-lines", 0)] == 0
    assert not TopicAdmin(root).exists(CHANGELOG)
