"""``streams-eos doctor`` finds each damage of test_log_damage and test_log_checks, and
``--repair`` fixes what it can without losing a committed record and refuses the rest."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from runtime.storage.delta_log import log_path
from runtime.storage.doctor import Doctor
from runtime.storage.reader import TopicReader
from runtime.storage.topic_log import TopicLog
from runtime.storage.topics import TopicAdmin
from runtime.txn import coordinator as coordinator_module
from runtime.txn.coordinator import TransactionCoordinator
from runtime.txn.offsets import OFFSETS_TOPIC, OffsetsStore
from runtime.txn.producer import TransactionalProducer
from runtime.txn.state import TransactionState
from streams.cli.doctor import Coordinators
from tests.clitools import cli
from tests.delta_readers import readers_agree
from tests.log_kit import plain_commits, transaction_commit


def _commit(admin: TopicAdmin, topic: str, version: int) -> Path:
    return Path(log_path(admin.root, admin.table_path(topic), version))


def _doctor(root: str, *args: str) -> tuple[int, str]:
    done = cli(root, "doctor", *args)
    assert "unexpected" not in done.stderr, done.stderr
    return done.returncode, done.stdout + done.stderr


def test_an_undamaged_root_exits_0(admin: TopicAdmin, root: str) -> None:
    admin.create("t", 2)
    plain_commits(admin, "t", 2)
    OffsetsStore(admin).commit("g", {("t", 0): 5})
    assert _doctor(root) == (0, f"No damage found in {root}.\n")
    assert _doctor(root, "--topic", "t")[0] == 0
    code, out = _doctor(root, "--topic", "nope")
    assert code == 1 and "does not exist" in out


@pytest.mark.parametrize("topic", ["t", OFFSETS_TOPIC])
def test_a_missing_middle_commit_is_found_and_refused(
    admin: TopicAdmin, root: str, topic: str
) -> None:
    admin.create("t", 2)
    if topic == "t":
        plain_commits(admin, "t", 8)
    else:
        for offset in (100, 200, 300, 400):
            OffsetsStore(admin).commit("g", {("t", 0): offset})
    os.remove(_commit(admin, topic, 2))
    code, out = _doctor(root)
    assert code == 1 and "commit 2 of the Delta log is missing" in out and "by hand" in out
    code, out = _doctor(root, "--repair")
    assert code == 1 and "NOT REPAIRED" in out and "restore it from a backup" in out


@pytest.mark.parametrize("damage", ["garbage", "offsets", "torn-mid-line", "torn-no-info"])
def test_damage_that_would_lose_records_is_refused(
    admin: TopicAdmin, root: str, damage: str
) -> None:
    admin.create("t", 2)
    plain_commits(admin, "t", 4)
    path = _commit(admin, "t", 4)
    lines = path.read_bytes().splitlines(keepends=True)
    if damage == "garbage":
        path.write_bytes(b"garbage{")
        expected = "does not parse"
    elif damage == "offsets":
        path.write_bytes(lines[0].replace(b'\\"end\\":[', b'\\"end\\":[1') + b"".join(lines[1:]))
        expected = "do not follow"
    elif damage == "torn-mid-line":  # inside its commitInfo: what it held cannot be told
        path.write_bytes(lines[0][:60])
        expected = "does not parse"
    else:
        path.write_bytes(b"")
        expected = "empty"
    code, out = _doctor(root, "--topic", "t", "--repair")
    assert code == 1 and "NOT REPAIRED" in out and expected in out, out
    assert path.exists()  # never removed


@pytest.mark.parametrize("kept", [0, 1, 2])
def test_a_torn_plain_commit_is_completed_from_its_commit_info(
    admin: TopicAdmin, root: str, kept: int
) -> None:
    """A plain producer's newest commit cut after its commitInfo and ``kept`` of its add
    actions: every file it lists is there, so the doctor rebuilds the lost actions and
    every reader (the project's, deltalake, polars, pyarrow) serves the whole commit."""
    admin.create("t", 3)
    plain_commits(admin, "t", 4)
    full = sum(readers_agree(admin, root, "t").values())
    path = _commit(admin, "t", 4)
    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) >= 3  # commitInfo and an add per partition written
    path.write_bytes(b"".join(lines[: 1 + kept]))
    code, out = _doctor(root, "--topic", "t")
    assert code == 1 and "is torn" in out and "complete it from its commitInfo" in out, out
    code, out = _doctor(root, "--topic", "t", "--repair")
    assert code == 0 and "completed the torn commit 4" in out, out
    assert sum(readers_agree(admin, root, "t").values()) == full
    assert Path(root, "_quarantine", "topics", "t", "_delta_log", path.name).exists()
    assert _doctor(root, "--topic", "t")[0] == 0


def _torn_prepared(admin: TopicAdmin, damage: str) -> tuple[Path, int]:
    """A transaction whose commit landed damaged and whose CompleteCommit was never written
    (a crash in the commit phase; the transaction log's newest version is its
    PrepareCommit). ``cut``: the newest commit is cut after its commitInfo; ``garbled``: a
    line after the commitInfo is garbage (not the cut tail), so its actions cannot be told."""
    admin.create("t", 2)
    plain_commits(admin, "t", 3)
    # CompleteCommit is written in the background: let it land first
    transaction_commit(admin, "t").close()
    _back_to_prepare_commit(admin, "app")
    path = _commit(admin, "t", 4)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] if damage == "cut" else lines[0] + b"garbage{\n" + lines[1])
    return path, 190


def _back_to_prepare_commit(admin: TopicAdmin, tid: str) -> None:
    """Drop the transaction log's versions after its PrepareCommit (a crash before
    CompleteCommit, which need not be durable)."""
    cas = TransactionCoordinator(admin).cas_log(tid)
    while True:
        snap = TransactionCoordinator(TopicAdmin(admin.root.uri)).load(tid)
        assert snap is not None
        if snap.meta.state is TransactionState.PREPARE_COMMIT:
            return
        os.remove(os.path.join(cas.location, f"{cas.versions()[-1]:020d}.json"))


@pytest.mark.parametrize(("damage", "done"), [("cut", "completed"), ("garbled", "moved")])
def test_a_torn_commit_of_a_prepared_transaction_is_repaired_and_rolled_forward(
    admin: TopicAdmin, root: str, damage: str, done: str
) -> None:
    """Cut after its commitInfo, the commit is completed (its ``txn`` action with it, so
    the roll-forward adds nothing twice); garbled, it is moved away and the roll-forward
    adds its files again. Either way every record is there once."""
    path, full = _torn_prepared(admin, damage)
    later = TransactionCoordinator(
        TopicAdmin(root),
        clock=lambda: coordinator_module.now_ms() + coordinator_module.DECIDED_GRACE_MS + 1,
    )
    doctor = Doctor(TopicAdmin(root), coordinators=Coordinators(later))
    findings = doctor.check()
    assert findings[0].where == str(path)
    assert all(f.repairable for f in findings) and len(findings) == 2  # torn, decided
    report = doctor.repair(findings)
    assert report.refused == [] and len(report.repaired) == 2, report
    assert f"{done} the torn commit 4" in report.repaired[0], report
    assert doctor.check() == []
    assert sum(readers_agree(admin, root, "t").values()) == full  # every record, once
    kept = Path(root, "_quarantine", "topics", "t", "_delta_log", path.name)
    assert kept.exists()


def test_the_cli_moves_a_garbled_prepared_commit_away(admin: TopicAdmin, root: str) -> None:
    path, full = _torn_prepared(admin, "garbled")
    code, out = _doctor(root, "--topic", "t")
    assert code == 1 and "does not parse" in out and "PrepareCommit" in out, out
    code, out = _doctor(root, "--topic", "t", "--repair")
    assert code == 0 and "REPAIRED" in out and "moved the torn commit 4" in out, out
    assert not path.exists() or b"add" in path.read_bytes()
    TransactionCoordinator(TopicAdmin(root)).init_producer_id("app", 60_000)  # rolls forward
    assert sum(readers_agree(admin, root, "t").values()) == full


def test_a_reader_completes_a_cut_prepared_commit_and_the_roll_forward_adds_nothing(
    admin: TopicAdmin, root: str
) -> None:
    _, full = _torn_prepared(admin, "cut")
    assert sum(TopicReader(root).end_offsets("t").values()) == full  # completed on opening
    TransactionCoordinator(TopicAdmin(root)).init_producer_id("app", 60_000)  # rolls forward
    assert sum(readers_agree(admin, root, "t").values()) == full
    assert not _commit(admin, "t", 5).exists()  # the txn guard held: nothing added twice
    snap = TransactionCoordinator(TopicAdmin(root)).load("app")
    assert snap is not None and snap.meta.state is not TransactionState.PREPARE_COMMIT


def test_a_lowered_partition_count_is_set_back(admin: TopicAdmin, root: str) -> None:
    admin.create("t", 3)
    plain_commits(admin, "t", 2)
    before = TopicReader(root).end_offsets("t")
    admin._set_properties("t", {"streams.partitions": "1"})  # by hand
    code, out = _doctor(root)
    assert code == 1 and "lowered from 3 to 1" in out
    code, out = _doctor(root, "--repair")
    assert code == 0 and "set t's partition count back to 3" in out, out
    assert TopicReader(root).end_offsets("t") == before


def test_stray_files_are_quarantined(admin: TopicAdmin, root: str) -> None:
    admin.create("t", 1)
    producer = TransactionalProducer(admin, "app")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", b"k", b"v")
    producer.send_offsets_to_transaction({("t", 0): 1}, "g")
    producer.commit_transaction()
    strays = [
        Path(root, "_transactions", ".DS_Store"),
        Path(root, "_groups", "notes.txt~"),
        Path(admin.table_path("t"), "txn-staging", "stray"),
    ]
    for stray in strays:
        stray.parent.mkdir(parents=True, exist_ok=True)
        stray.write_text("x")
    code, out = _doctor(root)
    assert code == 1 and all(str(s) in out for s in strays), out
    code, out = _doctor(root, "--repair")
    assert code == 0, out
    for stray in strays:
        assert not stray.exists()
        assert Path(root, "_quarantine", stray.relative_to(root)).exists()


def test_index_snapshots_are_rebuilt(admin: TopicAdmin, root: str) -> None:
    admin.create("t", 1)
    plain_commits(admin, "t", 3)
    index = TopicLog(admin.root, "t", admin.table_path("t")).write_snapshot()
    snapshots = Path(admin.table_path("t"), "_streams_index")
    (snapshots / f"{index.version:020d}.json.gz").write_bytes(b"not gzip")
    (snapshots / f"{index.version + 5:020d}.json.gz").write_bytes(
        gzip.compress((snapshots / f"{index.version:020d}.json.gz").read_bytes())
    )
    code, out = _doctor(root, "--topic", "t")
    assert code == 1 and out.count("offset index snapshot") == 2, out
    code, out = _doctor(root, "--topic", "t", "--repair")
    assert code == 0, out
    assert TopicReader(root).end_offsets("t") == {0: 150}


def test_a_decided_transaction_is_completed_and_a_corrupt_log_named(
    admin: TopicAdmin, root: str
) -> None:
    admin.create("t", 1)
    producer = TransactionalProducer(admin, "app")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", b"k", b"v")
    producer.commit_transaction()
    producer.close()  # CompleteCommit is written in the background: let it land first
    _back_to_prepare_commit(admin, "app")
    cas = TransactionCoordinator(admin).cas_log("app")
    later = TransactionCoordinator(
        TopicAdmin(root),
        clock=lambda: coordinator_module.now_ms() + coordinator_module.DECIDED_GRACE_MS + 1,
    )
    doctor = Doctor(TopicAdmin(root), coordinators=Coordinators(later))
    findings = doctor.check()
    assert len(findings) == 1 and "decided (PrepareCommit)" in findings[0].damage
    assert doctor.repair(findings).refused == []
    assert doctor.check() == []
    Path(cas.location, f"{cas.versions()[-1] + 1:020d}.json").write_text("{torn")
    code, out = _doctor(root, "--repair")
    assert code == 1 and "cannot be read" in out and "NOT REPAIRED" in out, out
