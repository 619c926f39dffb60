"""The transaction protocol end to end: crashes at every fault point, fencing, timeouts."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest

from common.errors import (
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionAbortedError,
)
from runtime.storage.committer import write_file
from runtime.storage.reader import TopicReader
from runtime.storage.records import FILE_SCHEMA
from runtime.storage.topics import TopicAdmin
from runtime.txn.coordinator import TransactionCoordinator
from runtime.txn.offsets import OFFSETS_TOPIC, OffsetsStore, UnstableOffsetCommitError
from runtime.txn.producer import TransactionalProducer
from runtime.txn.staging import STAGING_DIR
from runtime.txn.state import TransactionState

TOPICS = ("out-a", "out-b", "out-c")
# 3 output topics + __consumer_offsets = 4 participants, committed in sorted order.
FAULT_POINTS = [
    "before_prepare",
    "after_prepare",
    "after_participant_1",
    "after_participant_2",
    "after_participant_3",
    "after_participant_4",
    "before_complete",
    "after_complete",
]

WRITER = textwrap.dedent(
    """
    import sys
    from runtime.txn.producer import TransactionalProducer

    root, tid, label, base = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    producer = TransactionalProducer(root, tid)
    producer.init_transactions()
    producer.begin_transaction()
    for topic in ("out-a", "out-b", "out-c"):
        for i in range(10):
            producer.send(topic, b"key-%d" % i, f"{label}-{topic}-{i}".encode())
    producer.send_offsets_to_transaction({("input", 0): base, ("input", 1): base + 1}, "group-1")
    producer.commit_transaction()
    print("committed")
    """
)


def run_writer(
    root: str, tid: str, label: str, fault: str | None, base: int = 10
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("STREAMS_FAULT_POINT", None)
    if fault:
        env["STREAMS_FAULT_POINT"] = fault
    return subprocess.run(
        [sys.executable, "-c", WRITER, root, tid, label, str(base)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def visible(root: str, label: str) -> dict[str, int]:
    """Count the records of transaction ``label`` each output topic shows."""
    reader = TopicReader(root)
    counts = {}
    for topic in TOPICS:
        values = [v for p in range(2) for v in reader.read(topic, p, 0).column("value").to_pylist()]
        counts[topic] = sum(1 for v in values if v.startswith(label.encode()))
    return counts


def staged_files(admin: TopicAdmin) -> list[str]:
    return [
        f
        for topic in (*TOPICS, OFFSETS_TOPIC)
        for f in glob.glob(f"{admin.table_path(topic)}/{STAGING_DIR}/**/*.parquet", recursive=True)
    ]


@pytest.fixture
def topics(admin: TopicAdmin) -> TopicAdmin:
    for topic in TOPICS:
        admin.create(topic, 2)
    return admin


@pytest.mark.parametrize("fault", FAULT_POINTS)
def test_crash_at_every_fault_point_is_all_or_nothing(
    topics: TopicAdmin, root: str, fault: str
) -> None:
    # A first transaction commits cleanly, so recovery starts from CompleteCommit.
    assert run_writer(root, "tid", "first", None).stdout.strip() == "committed"
    crashed = run_writer(root, "tid", "second", fault, base=20)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    if fault not in ("before_complete", "after_complete"):
        # CompleteCommit is written in the background after the commit is acknowledged
        # (every participant is durable by then), so only those two may print it.
        assert "committed" not in crashed.stdout

    # Restart with the same transactional id: recovery finishes what the crash left.
    restarted = TransactionalProducer(root, "tid")
    restarted.init_transactions()

    counts = visible(root, "second")
    offsets = OffsetsStore(topics, coordinator=restarted.coordinator).fetch(
        "group-1", require_stable=True
    )
    if fault == "before_prepare":
        assert counts == dict.fromkeys(TOPICS, 0)
        assert offsets == {("input", 0): 10, ("input", 1): 11}  # the first transaction's
    else:
        assert counts == dict.fromkeys(TOPICS, 10), f"partial transaction after {fault}"
        assert offsets == {("input", 0): 20, ("input", 1): 21}
    assert visible(root, "first") == dict.fromkeys(TOPICS, 10)
    snap = restarted.coordinator.load("tid")
    assert snap is not None and snap.meta.state is TransactionState.EMPTY
    # Offsets are dense: every partition reads 0..n-1 with no gap and no duplicate.
    reader = TopicReader(root)
    for topic in TOPICS:
        for p in range(2):
            offs = reader.read(topic, p, 0).column("offset").to_pylist()
            assert offs == list(range(len(offs)))
    # Staged files left behind are exactly the committed ones (an abort deletes its own).
    committed = {
        os.path.join(topics.table_path(t), p)
        for t in (*TOPICS, OFFSETS_TOPIC)
        for p in TransactionCoordinator(topics)
        .committer(t)
        .table()
        .get_add_actions(flatten=True)
        .column("path")
        .to_pylist()
    }
    assert set(staged_files(topics)) <= committed


def test_prepare_commit_blocks_stable_offset_fetch_until_rolled_forward(
    topics: TopicAdmin, root: str
) -> None:
    crashed = run_writer(root, "tid", "only", "after_prepare")
    assert crashed.returncode == -signal.SIGKILL
    coordinator = TransactionCoordinator(topics)
    snap = coordinator.load("tid")
    assert snap is not None and snap.meta.state is TransactionState.PREPARE_COMMIT
    store = OffsetsStore(topics, coordinator=coordinator)
    with pytest.raises(UnstableOffsetCommitError, match="group-1"):
        store.fetch("group-1", require_stable=True)
    for mine in ([("input", 0)], [("input", 1)], [("input", 0), ("other", 5)]):
        with pytest.raises(UnstableOffsetCommitError, match="group-1"):  # they wait
            store.fetch("group-1", require_stable=True, partitions=mine)
    # one owning neither need not wait for the transaction (Kafka checks the partitions
    # asked for): nothing of it is committed yet
    theirs = [("input", 2), ("other", 0), ("other", 1)]
    assert store.fetch("group-1", require_stable=True, partitions=theirs) == {}
    assert store.fetch("group-1") == {}  # not materialised yet
    TransactionalProducer(root, "tid").init_transactions()
    assert store.fetch("group-1", require_stable=True) == {("input", 0): 10, ("input", 1): 11}


ZOMBIE = textwrap.dedent(
    """
    import json, os, sys, time
    from runtime.txn.producer import TransactionalProducer
    from common.errors import ProducerFencedError

    root, ready, go = sys.argv[1], sys.argv[2], sys.argv[3]
    producer = TransactionalProducer(root, "shared-id", buffer_memory=1)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("out-a", b"k", b"zombie-0")  # staged at once (buffer_memory=1)
    open(ready, "w").close()
    while not os.path.exists(go):
        time.sleep(0.01)
    results = {}
    for name, call in [
        ("send", lambda: producer.send("out-b", b"k", b"zombie-1")),
        ("send_offsets", lambda: producer.send_offsets_to_transaction({("in", 0): 1}, "g")),
        ("commit", producer.commit_transaction),
    ]:
        try:
            call()
            results[name] = "ok"
        except ProducerFencedError as exc:
            results[name] = "ProducerFencedError"
    print(json.dumps(results))
    """
)


def test_second_instance_fences_the_first(topics: TopicAdmin, root: str, tmp_path: Path) -> None:
    ready, go = tmp_path / "ready", tmp_path / "go"
    zombie = subprocess.Popen(
        [sys.executable, "-c", ZOMBIE, root, str(ready), str(go)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert zombie.poll() is None, zombie.communicate()[1]
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert staged_files(topics), "the zombie should have staged a file"

    successor = TransactionalProducer(root, "shared-id")
    successor.init_transactions()  # fences the zombie and aborts its transaction
    go.touch()
    out, err = zombie.communicate(timeout=60)
    assert zombie.returncode == 0, err
    assert json.loads(out) == {
        "send": "ProducerFencedError",
        "send_offsets": "ProducerFencedError",
        "commit": "ProducerFencedError",
    }
    successor.begin_transaction()
    successor.send("out-a", b"k", b"successor")
    successor.commit_transaction()
    reader = TopicReader(root)
    values = [v for p in range(2) for v in reader.read("out-a", p, 0).column("value").to_pylist()]
    assert values == [b"successor"]
    assert all(
        b"zombie" not in v
        for t in TOPICS
        for p in range(2)
        for v in reader.read(t, p, 0).column("value").to_pylist()
    )
    assert [f for f in staged_files(topics) if "zombie" in f] == []
    snap = successor.coordinator.load("shared-id")
    assert snap is not None and snap.meta.producer_epoch >= 2  # init, fence, init


def test_timed_out_transaction_is_aborted_by_the_sweep(topics: TopicAdmin, root: str) -> None:
    producer = TransactionalProducer(root, "slow", transaction_timeout_ms=200, buffer_memory=1)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("out-a", b"k", b"late")
    assert len(staged_files(topics)) == 1
    coordinator = TransactionCoordinator(topics)
    assert coordinator.sweep(orphans=False).aborted == []  # not timed out yet
    time.sleep(0.3)
    assert [m.transactional_id for m in coordinator.hanging()] == ["slow"]
    result = coordinator.sweep(orphans=False)
    assert result.aborted == ["slow"]
    assert staged_files(topics) == []
    snap = coordinator.load("slow")
    assert snap is not None and snap.meta.state is TransactionState.COMPLETE_ABORT
    with pytest.raises(ProducerFencedError):
        producer.send("out-a", b"k", b"later")
    with pytest.raises(ProducerFencedError):
        producer.commit_transaction()
    assert TopicReader(root).end_offsets("out-a") == {0: 0, 1: 0}


def test_sweep_rolls_a_decided_transaction_forward_never_back(
    topics: TopicAdmin, root: str
) -> None:
    crashed = run_writer(root, "tid", "x", "after_prepare")
    assert crashed.returncode == -signal.SIGKILL
    soon = TransactionCoordinator(topics)  # within the grace its producer may still finish
    assert soon.sweep(orphans=False).completed == []
    snap = soon.load("tid")
    assert snap is not None and snap.meta.state is TransactionState.PREPARE_COMMIT
    coordinator = TransactionCoordinator(topics, clock=lambda: int(time.time() * 1000) + 10**9)
    result = coordinator.sweep(orphans=False)
    assert result.aborted == [] and result.completed == ["tid"]
    snap = coordinator.load("tid")
    assert snap is not None and snap.meta.state is TransactionState.COMPLETE_COMMIT
    assert all(visible(root, "x").values())


def test_abort_discards_staged_data(topics: TopicAdmin, root: str) -> None:
    producer = TransactionalProducer(root, "t", buffer_memory=1)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("out-a", b"k", b"discard-me")
    producer.send_offsets_to_transaction({("in", 0): 5}, "g")
    producer.abort_transaction()
    assert staged_files(topics) == []
    producer.begin_transaction()
    producer.send("out-a", b"k", b"keep-me")
    producer.commit_transaction()
    reader = TopicReader(root)
    assert [
        v for p in range(2) for v in reader.read("out-a", p, 0).column("value").to_pylist()
    ] == [b"keep-me"]
    assert OffsetsStore(topics).fetch("g") == {}


def test_commit_retried_after_completion_succeeds(topics: TopicAdmin, root: str) -> None:
    crashed = run_writer(root, "tid", "once", "after_complete")
    assert crashed.returncode == -signal.SIGKILL
    coordinator = TransactionCoordinator(topics)
    snap = coordinator.load("tid")
    assert snap is not None and snap.meta.state is TransactionState.COMPLETE_COMMIT
    # Rolling the commit phase forward again changes nothing (Delta txn actions).
    coordinator.commit_phase(snap.meta)
    assert visible(root, "once") == dict.fromkeys(TOPICS, 10)
    # The opposite decision is refused.
    with pytest.raises(InvalidTxnStateError, match="CompleteCommit to PrepareAbort"):
        snap.meta.prepare_abort(now_ms=0)


def test_timeout_above_maximum_is_refused(root: str) -> None:
    producer = TransactionalProducer(root, "t", transaction_timeout_ms=900_001)
    with pytest.raises(InvalidTransactionTimeoutError, match=r"transaction.max.timeout.ms=900000"):
        producer.init_transactions()


def test_client_state_rules(topics: TopicAdmin, root: str) -> None:
    producer = TransactionalProducer(root, "t")
    with pytest.raises(InvalidTxnStateError, match="UNINITIALIZED"):
        producer.begin_transaction()
    producer.init_transactions()
    with pytest.raises(InvalidTxnStateError, match="needs IN_TRANSACTION"):
        producer.send("out-a", b"k", b"v")
    producer.begin_transaction()
    with pytest.raises(InvalidTxnStateError, match="needs READY"):
        producer.begin_transaction()
    producer.commit_transaction()  # an empty transaction commits trivially
    producer.begin_transaction()
    producer.send("out-a", b"k", b"v")
    producer.state = producer.state.ABORTABLE_ERROR
    with pytest.raises(TransactionAbortedError):
        producer.commit_transaction()
    producer.abort_transaction()
    assert TopicReader(root).end_offsets("out-a") == {0: 0, 1: 0}


def test_expired_id_comes_back_without_reusing_its_sequence(topics: TopicAdmin, root: str) -> None:
    first = TransactionalProducer(root, "idle")
    first.init_transactions()
    first.begin_transaction()
    first.send("out-a", b"k", b"kept", partition=0)
    first.commit_transaction()
    first.close()  # lets the background CompleteCommit land before the log is read
    committed_seq = TransactionCoordinator(topics).load("idle").meta.txn_sequence  # type: ignore[union-attr]

    later = TransactionCoordinator(topics, clock=lambda: int(time.time() * 1000) + 8 * 86_400_000)
    assert later.sweep(orphans=False).expired == ["idle"]
    snap = later.load("idle")
    assert snap is not None and snap.meta.state is TransactionState.DEAD

    again = TransactionalProducer(root, "idle", buffer_memory=1)
    again.init_transactions()
    again.begin_transaction()
    again.send("out-a", b"k", b"discarded", partition=0)
    snap = again.coordinator.load("idle")
    assert snap is not None and snap.meta.txn_sequence > committed_seq
    again.abort_transaction()  # must not touch the committed transaction's files
    again.begin_transaction()
    again.send("out-a", b"k", b"new", partition=0)
    again.commit_transaction()
    values = TopicReader(root).read("out-a", 0, 0).column("value").to_pylist()
    assert values == [b"kept", b"new"]


def test_complete_commit_lands_before_the_next_transaction_touches_the_log(
    topics: TopicAdmin, root: str
) -> None:
    producer = TransactionalProducer(root, "bg")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("out-a", b"k", b"v1", partition=0)
    producer.commit_transaction()
    # Acknowledged: the data is visible even if CompleteCommit is still being written.
    assert TopicReader(root).end_offsets("out-a")[0] == 1
    producer.begin_transaction()
    producer.send("out-a", b"k", b"v2", partition=0)  # waits for CompleteCommit first
    snap = producer.coordinator.load("bg")
    assert snap is not None and snap.meta.state is TransactionState.COMPLETE_COMMIT
    producer.commit_transaction()
    producer.close()
    snap = producer.coordinator.load("bg")
    assert snap is not None and snap.meta.state is TransactionState.COMPLETE_COMMIT
    assert TopicReader(root).end_offsets("out-a")[0] == 2


def test_files_staged_by_another_writer_commit_with_the_transaction(
    topics: TopicAdmin, root: str
) -> None:
    producer = TransactionalProducer(root, "external")
    producer.init_transactions()
    producer.begin_transaction()
    rel_dir = producer.staging_dir_for(["out-a"])
    chunk = pa.table(
        {"key": [b"k1", b"k2"], "value": [b"v1", b"v2"], "timestamp": [5, 6], "headers": [[], []]},
        schema=FILE_SCHEMA,
    )
    staged = write_file(
        topics.root, topics.table_path("out-a"), rel_dir, 1, chunk, compression="snappy"
    )
    assert TopicReader(root).end_offsets("out-a") == {0: 0, 1: 0}  # staged: invisible
    with pytest.raises(InvalidTxnStateError, match="'out-b' is not a participant"):
        producer.add_staged_files("out-b", [staged])
    stray = dataclasses.replace(staged, path="elsewhere/x.parquet")
    with pytest.raises(InvalidTxnStateError, match="not under this transaction's staging"):
        producer.add_staged_files("out-a", [stray])
    producer.add_staged_files("out-a", [staged])
    producer.commit_transaction()
    values = TopicReader(root).read("out-a", 1, 0).column("value").to_pylist()
    assert values == [b"v1", b"v2"]
