"""A Delta log that lost a middle commit is never read short: the readers, the CLI and the
group offsets all fail naming the missing commit, instead of answering with the records
before it (Delta's own protocol makes a missing version a hard error)."""

from __future__ import annotations

import os
import time

import pytest

from common.errors import StorageError
from runtime.storage import topic_log
from runtime.storage.delta_log import log_path
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.txn.coordinator import TransactionCoordinator
from runtime.txn.offsets import OFFSETS_TOPIC, OffsetsStore
from runtime.txn.producer import TransactionalProducer
from tests.clitools import cli
from tests.log_kit import plain_commits


def _lose(admin: TopicAdmin, topic: str, version: int) -> str:
    path = log_path(admin.root, admin.table_path(topic), version)
    os.remove(path)
    return path


def test_a_new_reader_names_the_missing_commit(admin: TopicAdmin, root: str) -> None:
    admin.create("t", 2)
    plain_commits(admin, "t", 10)
    full = TopicReader(root).end_offsets("t")
    assert sum(full.values()) == 500
    path = _lose(admin, "t", 5)
    with pytest.raises(StorageError, match=r"commit 5 of the Delta log is missing") as err:
        TopicReader(root).end_offsets("t")
    assert path in str(err.value) and "commits up to 10 exist" in str(err.value)


def test_a_running_reader_finds_the_gap_at_its_next_check(
    admin: TopicAdmin, root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin.create("t", 1)
    plain_commits(admin, "t", 3)
    reader = TopicReader(root)
    assert reader.end_offsets("t") == {0: 150}
    plain_commits(admin, "t", 2)  # versions 4 and 5; 4 is lost
    _lose(admin, "t", 4)
    monkeypatch.setattr(topic_log, "GAP_CHECK_AFTER_S", 0.0)
    time.sleep(0.01)
    with pytest.raises(StorageError, match="commit 4 of the Delta log is missing"):
        reader.end_offsets("t")


@pytest.mark.parametrize(
    "command",
    [
        ["get-offsets", "--topic", "t"],
        ["console-consume", "--topic", "t", "--from-beginning", "--timeout-ms", "200"],
        ["topics", "--describe", "--topic", "t"],
    ],
)
def test_every_command_fails_in_one_line_naming_the_commit(
    admin: TopicAdmin, root: str, command: list[str]
) -> None:
    admin.create("t", 2)
    plain_commits(admin, "t", 8)
    _lose(admin, "t", 5)
    done = cli(root, *command)
    assert done.returncode != 0, done.stdout
    assert "commit 5 of the Delta log is missing" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    if command[0] == "console-consume":
        assert done.stdout.count("\n") < 400  # what was printed before the gap, at most


def test_lost_offsets_commit_never_rolls_a_group_back(admin: TopicAdmin, root: str) -> None:
    admin.create("in", 1)
    store = OffsetsStore(admin)
    for offset in (100, 200, 300):
        store.commit("g", {("in", 0): offset})
    assert OffsetsStore(admin).fetch("g") == {("in", 0): 300}
    versions = sorted(
        int(name[:20])
        for name in os.listdir(f"{admin.table_path(OFFSETS_TOPIC)}/_delta_log")
        if name.endswith(".json")
    )
    _lose(admin, OFFSETS_TOPIC, versions[-2])
    with pytest.raises(StorageError, match="of the Delta log is missing"):
        OffsetsStore(TopicAdmin(root)).fetch("g")  # a new process's reader
    done = cli(root, "groups", "--describe", "--group", "g")
    assert done.returncode != 0 and "of the Delta log is missing" in done.stderr


def test_a_coordinator_log_that_lost_a_middle_version_still_answers_its_newest(
    admin: TopicAdmin, root: str
) -> None:
    """Each version of a transaction or group log holds the whole state, so the newest
    version is the right answer whatever is missing below it: a new reader lists the
    versions and reads the newest."""
    admin.create("t", 1)
    producer = TransactionalProducer(admin, "app-1")
    producer.init_transactions()
    for i in range(3):
        producer.begin_transaction()
        producer.send("t", b"k", b"v%d" % i)
        producer.commit_transaction()
    producer.close()  # its last CompleteCommit lands (written in the background)
    log = TransactionCoordinator(admin).cas_log("app-1")
    before = TransactionCoordinator(TopicAdmin(root)).load("app-1")
    versions = log.versions()
    assert len(versions) > 3 and before is not None
    middle = versions[len(versions) // 2]
    os.remove(os.path.join(log.location.removeprefix("file://"), f"{middle:020d}.json"))
    after = TransactionCoordinator(TopicAdmin(root)).load("app-1")
    assert after is not None and after.meta == before.meta
    listed = cli(root, "transactions", "--list")
    assert listed.returncode == 0 and "app-1" in listed.stdout, listed.stderr


def test_stray_files_in_the_coordinator_directories_are_skipped_and_named(
    admin: TopicAdmin, root: str, caplog: pytest.LogCaptureFixture
) -> None:
    admin.create("t", 1)
    producer = TransactionalProducer(admin, "app-1")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", b"k", b"v")
    producer.send_offsets_to_transaction({("t", 0): 1}, "g")
    producer.commit_transaction()
    for directory in ("_transactions", "_groups"):
        os.makedirs(os.path.join(admin.root.path(directory)), exist_ok=True)
        with open(os.path.join(admin.root.path(directory), ".DS_Store"), "w") as f:
            f.write("x")
    assert TransactionCoordinator(TopicAdmin(root)).transactional_ids() == ["app-1"]
    assert ".DS_Store: a stray file" in caplog.text
    for command in (["transactions", "--list"], ["groups", "--list"], ["status"]):
        done = cli(root, *command)
        assert "Not a directory" not in done.stderr, (command, done.stderr)
        assert "unexpected" not in done.stderr, (command, done.stderr)
    listed = cli(root, "transactions", "--find-hanging")
    assert listed.returncode == 0, listed.stderr


def test_a_hand_written_offsets_record_is_skipped_and_named(
    admin: TopicAdmin, root: str, caplog: pytest.LogCaptureFixture
) -> None:
    admin.create("in", 1)
    store = OffsetsStore(admin)
    store.commit("g", {("in", 0): 7})
    forced = cli(root, "console-produce", "--topic", OFFSETS_TOPIC, "--force", stdin="junk\n")
    assert forced.returncode == 0, forced.stderr
    by_hand = Producer(admin)  # and one in the group's own partition
    by_hand.send(OFFSETS_TOPIC, b"junk", b"{}", partition=store.partition_for("g"))
    by_hand.flush()
    assert OffsetsStore(TopicAdmin(root)).fetch("g") == {("in", 0): 7}
    assert "not a committed position" in caplog.text
    for command in (["groups", "--list"], ["groups", "--describe", "--group", "g"]):
        done = cli(root, *command)
        assert done.returncode == 0 and "unexpected" not in done.stderr, (command, done.stderr)
        assert "g" in done.stdout
    deleted = cli(root, "groups", "--delete", "--group", "g")
    assert deleted.returncode == 0, deleted.stderr


def test_a_commit_written_after_its_read_answered_absent_is_no_gap(
    admin: TopicAdmin, root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow store: the read of version 4 answers "absent", then the writer commits 4
    and 5 before the reader lists the log. No gap (4 is there now), and the next read
    serves both commits."""
    admin.create("t", 1)
    plain_commits(admin, "t", 3)
    reader = TopicReader(root)
    assert reader.end_offsets("t") == {0: 150}
    read_entry = topic_log.read_entry
    raced: list[int] = []

    def read_then_race(root_: object, table: str, version: int) -> object:
        entry = read_entry(root_, table, version)  # type: ignore[arg-type]
        if version == 4 and not raced:
            raced.append(version)
            plain_commits(admin, "t", 2)  # the writer's commits land after the answer
        return entry

    monkeypatch.setattr(topic_log, "read_entry", read_then_race)
    monkeypatch.setattr(topic_log, "GAP_CHECK_AFTER_S", 0.0)
    time.sleep(0.01)
    assert reader.end_offsets("t") == {0: 150}  # 4 was absent when read
    assert raced == [4]
    assert reader.end_offsets("t") == {0: 250}
