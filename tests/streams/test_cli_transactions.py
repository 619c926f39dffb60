"""``streams-eos transactions`` and the transactional console tools, on real Delta tables."""

from __future__ import annotations

import os
import time

import pytest

from common.errors import ProducerFencedError
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.txn.coordinator import TransactionCoordinator
from runtime.txn.producer import TransactionalProducer
from runtime.txn.state import TransactionState
from streams.cli import main
from tests.clitools import cli

LIST_HEADER = ["TransactionalId", "ProducerId", "ProducerEpoch", "State", "Participants", "Age"]


def run(capsys: pytest.CaptureFixture[str], root: str, *args: str) -> tuple[int, str, str]:
    """Run ``streams-eos transactions ARGS`` in-process; return (code, stdout, stderr)."""
    capsys.readouterr()
    code = main(["transactions", "--root", root, *args])
    out, err = capsys.readouterr()
    return code, out, err


def table(out: str) -> list[list[str]]:
    """Return the cells of a ``--list``/``--find-hanging`` table (header first)."""
    return [[cell.strip() for cell in line.split("\t")] for line in out.splitlines()]


def fields(out: str) -> dict[str, str]:
    """Return the ``Key: value`` lines of ``--describe``."""
    return dict(line.split(": ", 1) for line in out.splitlines())


def open_transaction(
    root: str, tid: str, topic: str, *, timeout_ms: int = 60_000
) -> TransactionalProducer:
    """Return a producer with an Ongoing transaction whose two records are staged on disk."""
    producer = TransactionalProducer(root, tid, buffer_memory=1, transaction_timeout_ms=timeout_ms)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, b"k0", b"staged-0", partition=0)
    producer.send(topic, b"k1", b"staged-1", partition=1)
    return producer


def commit_one(root: str, tid: str, topic: str, count: int) -> TransactionalProducer:
    """Commit one transaction of ``count`` records to partition 0 and return its producer."""
    producer = TransactionalProducer(root, tid)
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(count):
        producer.send(topic, None, b"committed-%d" % i, partition=0)
    producer.commit_transaction()
    return producer


def test_list_and_describe_committed_and_ongoing(
    root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    TopicAdmin(root).create("t", 2)
    commit_one(root, "done-app", "t", 3)
    started = int(time.time() * 1000)
    producer = open_transaction(root, "open app", "t")
    producer.send_offsets_to_transaction({("in", 0): 42, ("in", 1): 7}, "grp")
    producer.send("t", b"k2", b"staged-2", partition=0)  # registers the group's offsets
    coordinator = TransactionCoordinator(TopicAdmin(root))
    done = coordinator.load("done-app")
    ongoing = coordinator.load("open app")
    assert done is not None and ongoing is not None

    code, out, _ = run(capsys, root, "--list")
    assert code == 0
    rows = table(out)
    assert rows[0] == LIST_HEADER
    assert rows[1] == ["done-app", str(done.meta.producer_id), "0", "CompleteCommit", "t", "-"]
    assert rows[2][:5] == ["open app", str(ongoing.meta.producer_id), "0", "Ongoing", "t"]
    assert 0 <= int(rows[2][5]) <= int(time.time() * 1000) - started
    assert len(rows) == 3
    # Aligned: every cell but the last is padded to its column's width.
    lines = out.splitlines()
    assert len({line.index("\t") for line in lines}) == 1
    assert len({len(line.rsplit("\t", 1)[0]) for line in lines}) == 1

    code, out, _ = run(capsys, root, "--describe", "--transactional-id", "open app")
    assert code == 0
    got = fields(out)
    assert got == {
        "TransactionalId": "open app",
        "ProducerId": str(ongoing.meta.producer_id),
        "ProducerEpoch": "0",
        "LastProducerId": "-1",
        "LastProducerEpoch": "-1",
        "State": "Ongoing",
        "TransactionTimeoutMs": "60000",
        "TransactionSequence": "1",
        "TransactionStartTimeMs": str(ongoing.meta.txn_start_timestamp),
        "LastUpdateTimeMs": got["LastUpdateTimeMs"],
        "Participants": "t",
        "ConsumerGroups": "grp",
        "PendingOffsets": "grp/in/0=42,grp/in/1=7",
        "StagedFiles": "t=3",
    }
    assert started <= ongoing.meta.txn_start_timestamp <= int(got["LastUpdateTimeMs"])

    code, out, _ = run(capsys, root, "--describe", "--transactional-id", "done-app")
    assert code == 0
    got = fields(out)
    assert (got["State"], got["TransactionSequence"], got["Participants"]) == (
        "CompleteCommit",
        "1",
        "t",
    )
    assert (got["ConsumerGroups"], got["PendingOffsets"], got["StagedFiles"]) == ("-", "-", "t=1")
    assert got["TransactionStartTimeMs"] == str(done.meta.txn_start_timestamp)
    producer.close()


def test_describe_or_abort_of_an_unknown_id_is_an_error(
    root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    TopicAdmin(root).create("t", 1)
    commit_one(root, "known", "t", 1)
    for action in ("--describe", "--abort"):
        code, out, err = run(capsys, root, action, "--transactional-id", "nope")
        assert code == 1 and out == ""
        lines = err.splitlines()
        assert len(lines) == 1
        assert lines[0].startswith("error: ") and "transactional id 'nope' does not exist" in err
    code, _, err = run(capsys, root, "--describe")
    assert code == 1 and "--describe needs --transactional-id" in err


def test_find_hanging_then_abort_clears_it(root: str, capsys: pytest.CaptureFixture[str]) -> None:
    TopicAdmin(root).create("t", 2)
    zombie = open_transaction(root, "slow", "t", timeout_ms=300)
    live = open_transaction(root, "fast", "t")  # within its 60 s timeout: not hanging
    coordinator = TransactionCoordinator(TopicAdmin(root))
    before = coordinator.load("slow")
    assert before is not None
    staged = coordinator.staged_paths("t", before.meta)
    assert len(staged) == 2 and all(os.path.exists(p) for p in staged)
    assert run(capsys, root, "--find-hanging")[1] == "No hanging transactions.\n"

    time.sleep(0.4)
    code, out, _ = run(capsys, root, "--find-hanging")
    assert code == 0
    rows = table(out)
    assert rows[0] == [*LIST_HEADER, "TimeoutMs"]
    assert len(rows) == 2
    assert rows[1][:5] == ["slow", str(before.meta.producer_id), "0", "Ongoing", "t"]
    assert int(rows[1][5]) > 300 and rows[1][6] == "300"

    code, out, _ = run(capsys, root, "--abort", "--transactional-id", "slow")
    assert code == 0
    assert out == f"Aborted transaction of slow (producer id {before.meta.producer_id}, epoch 0).\n"
    after = coordinator.load("slow")
    assert after is not None and after.meta.state is TransactionState.COMPLETE_ABORT
    assert not any(os.path.exists(p) for p in staged)
    assert run(capsys, root, "--find-hanging")[1] == "No hanging transactions.\n"
    assert fields(run(capsys, root, "--describe", "--transactional-id", "slow")[1])[
        "StagedFiles"
    ] == ("t=0")
    with pytest.raises(ProducerFencedError):  # the zombie can never commit it
        zombie.commit_transaction()
    live.commit_transaction()  # the other transaction was left alone
    assert TopicReader(root).end_offsets("t") == {0: 1, 1: 1}

    code, _, err = run(capsys, root, "--abort", "--transactional-id", "slow")
    assert code == 1 and "has no open transaction (CompleteAbort)" in err


def test_abort_is_refused_once_prepare_commit_is_written(
    root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    TopicAdmin(root).create("t", 2)
    producer = open_transaction(root, "deciding", "t")
    coordinator = TransactionCoordinator(TopicAdmin(root))
    snap = coordinator.load("deciding")
    assert snap is not None
    files = producer._staged["t"]
    coordinator.transit(snap, snap.meta.prepare_commit({"t": files}, now_ms=coordinator.clock()))

    code, out, err = run(capsys, root, "--abort", "--transactional-id", "deciding")
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "PrepareCommit" in lines[0] and "already decided" in lines[0]
    now = coordinator.load("deciding")
    assert now is not None and now.meta.state is TransactionState.PREPARE_COMMIT
    assert len(coordinator.staged_paths("t", now.meta)) == 2
    code, out, _ = run(capsys, root, "--list")
    assert table(out)[1][3] == "PrepareCommit"


def test_sweep_aborts_timed_out_transactions(root: str, capsys: pytest.CaptureFixture[str]) -> None:
    TopicAdmin(root).create("t", 2)
    open_transaction(root, "stale", "t", timeout_ms=200)
    open_transaction(root, "fresh", "t")
    time.sleep(0.3)
    code, out, _ = run(capsys, root, "--sweep")
    assert code == 0
    assert out.splitlines() == [
        "Aborted 1 timed-out transaction(s): stale",
        "Completed 0 decided transaction(s): -",
        "Expired 0 transactional id(s): -",
        "Deleted 0 orphaned staged file(s).",
    ]
    rows = {row[0]: row[3] for row in table(run(capsys, root, "--list")[1])[1:]}
    assert rows == {"fresh": "Ongoing", "stale": "CompleteAbort"}


def test_console_produce_commits_one_transaction_per_batch(root: str) -> None:
    TopicAdmin(root).create("t", 1)
    lines = "".join(f"line {i}\n" for i in range(7))
    done = cli(
        root,
        "console-produce",
        "--topic",
        "t",
        "--transactional-id",
        "p",
        "--batch",
        "3",
        stdin=lines,
    )
    assert done.returncode == 0, done.stderr
    assert TopicReader(root).end_offsets("t") == {0: 7}
    snap = TransactionCoordinator(TopicAdmin(root)).load("p")
    assert snap is not None
    assert snap.meta.txn_sequence == 3  # 3 + 3 + 1 lines: the last partial batch at EOF
    assert snap.meta.state is TransactionState.COMPLETE_COMMIT
    values = [r.value for r in TopicReader(root).records("t", 0, 0)]
    assert values == [f"line {i}".encode() for i in range(7)]


def test_console_produce_bad_line_aborts_only_its_batch(root: str) -> None:
    TopicAdmin(root).create("t", 1)
    lines = "a:1\nb:2\nc:3\nd:4\ne:5\nno separator\nf:6\n"
    done = cli(
        root,
        "console-produce",
        "--topic",
        "t",
        "--transactional-id",
        "p",
        "--batch",
        "3",
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
        stdin=lines,
    )
    assert done.returncode == 1
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: line 6 has no key separator ':'")
    assert "aborted the open transaction of p, so lines 4-5 were not produced" in err[0]
    assert TopicReader(root).end_offsets("t") == {0: 3}  # only the first batch
    records = TopicReader(root).records("t", 0, 0)
    assert [(r.key, r.value) for r in records] == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]


def test_console_produce_batch_needs_a_transactional_id(root: str) -> None:
    TopicAdmin(root).create("t", 1)
    done = cli(root, "console-produce", "--topic", "t", "--batch", "3", stdin="x\n")
    assert done.returncode == 1 and "--batch needs --transactional-id" in done.stderr
    assert TopicReader(root).end_offsets("t") == {0: 0}


def test_console_consume_read_uncommitted_shows_open_transactions(root: str) -> None:
    TopicAdmin(root).create("t", 2)
    plain = Producer(root)
    plain.send("t", b"c", b"committed", partition=1)
    plain.flush()
    producer = open_transaction(root, "open", "t")
    finished = commit_one(root, "done", "t", 1)  # committed: printed with its offset
    aborted = open_transaction(root, "gone", "t")
    aborted.abort_transaction()  # aborted: never printed
    props = [
        "--property",
        "print.partition=true",
        "--property",
        "print.offset=true",
        "--property",
        "print.key=true",
    ]
    base = ["console-consume", "--topic", "t", "--from-beginning", *props, "--timeout-ms", "700"]

    dirty = cli(root, *base, "--isolation-level", "read_uncommitted")
    assert dirty.returncode == 0, dirty.stderr
    assert dirty.stdout.splitlines() == [  # committed first, then each staged record once
        "0\t0\tnull\tcommitted-0",
        "1\t0\tc\tcommitted",
        "[uncommitted txn=open seq=1]\t0\t-\tk0\tstaged-0",
        "[uncommitted txn=open seq=1]\t1\t-\tk1\tstaged-1",
    ]
    assert "Processed a total of 4 messages" in dirty.stderr

    clean = cli(root, *base)  # read_committed is the default
    assert clean.returncode == 0, clean.stderr
    assert clean.stdout.splitlines() == ["0\t0\tnull\tcommitted-0", "1\t0\tc\tcommitted"]

    one = cli(root, *base, "--partition", "1", "--isolation-level", "read_uncommitted")
    assert one.stdout.splitlines() == [
        "1\t0\tc\tcommitted",
        "[uncommitted txn=open seq=1]\t1\t-\tk1\tstaged-1",
    ]

    producer.commit_transaction()  # now committed: read_uncommitted shows it with offsets
    after = cli(root, *base, "--isolation-level", "read_uncommitted")
    assert "uncommitted" not in after.stdout
    assert "0\t1\tk0\tstaged-0" in after.stdout.splitlines()
    finished.close()
