"""The test-only switches of runtime.txn.faults, on a real producer in a real process:
a stall (a zombie to fence) and exactly-once broken on purpose."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.txn import faults
from runtime.txn.coordinator import TransactionCoordinator
from runtime.txn.offsets import OffsetsStore
from runtime.txn.producer import TransactionalProducer
from runtime.txn.state import TransactionState

CHILD = """
import sys
from runtime.txn.producer import TransactionalProducer
from common.errors import ProducerFencedError
producer = TransactionalProducer(sys.argv[1], "tx")
producer.init_transactions()
producer.begin_transaction()
producer.send("out", b"k", b"v")
producer.send_offsets_to_transaction({("in", 0): 1}, "group")
try:
    producer.commit_transaction()
except ProducerFencedError as exc:
    print("fenced:", exc, file=sys.stderr, flush=True)
    sys.exit(3)
print("committed", file=sys.stderr, flush=True)
"""


def _child(root: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, root],
        env={**os.environ, **env},
        stderr=subprocess.PIPE,
        text=True,
    )


def _out_records(root: str) -> int:
    return sum(TopicReader(root).end_offsets("out").values())


def test_a_stalled_producer_is_fenced_by_a_newer_one_and_commits_nothing(
    admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    admin.create("out", 1)
    release = tmp_path / "release"
    child = _child(
        root,
        **{faults.ENV_STALL: "before_prepare:60", faults.ENV_RELEASE: str(release)},
    )
    assert child.stderr is not None
    line = child.stderr.readline()
    assert "fault stall at before_prepare" in line, line
    newer = TransactionalProducer(admin, "tx")
    newer.init_transactions()  # fences the stalled one and aborts its transaction
    release.touch()
    _, err = child.communicate(timeout=60)
    assert child.returncode == 3, err
    assert "fenced:" in err
    assert _out_records(root) == 0
    assert OffsetsStore(admin).fetch("group") == {}
    newer.close()


def test_a_stall_without_release_ends_after_its_seconds(admin: TopicAdmin, root: str) -> None:
    admin.create("out", 1)
    started = time.monotonic()
    child = _child(root, **{faults.ENV_STALL: "after_prepare:1.5"})
    _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert time.monotonic() - started >= 1.5
    assert "resumes" in err and _out_records(root) == 1


def test_a_bad_stall_spec_names_the_expected_form() -> None:
    with pytest.raises(ValueError, match=r"<point>:<seconds>\[:<hit>\]"):
        faults.parse_stall("before_prepare")
    with pytest.raises(ValueError, match="unknown fault point"):
        faults.parse_stall("nowhere:1")
    assert faults.parse_stall("after_participant_2:0.5:3") == ("after_participant_2", 0.5, 3)


def test_the_broken_switch_makes_outputs_visible_before_the_point_of_no_return(
    admin: TopicAdmin, root: str
) -> None:
    """With commit_before_prepare a crash before PrepareCommit leaves the outputs of a
    transaction that recovery then aborts: the input will be processed again (twice)."""
    admin.create("out", 1)
    child = _child(
        root,
        **{
            faults.ENV_BREAK: faults.BREAK_COMMIT_BEFORE_PREPARE,
            faults.ENV_POINT: "before_prepare",
        },
    )
    child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL
    coordinator = TransactionCoordinator(admin)
    snap = coordinator.load("tx")
    assert snap is not None and snap.meta.state is TransactionState.ONGOING
    assert _out_records(root) == 1  # visible although the transaction never prepared
    recovered = TransactionalProducer(admin, "tx")
    recovered.init_transactions()  # aborts it, as a restarted application would
    assert _out_records(root) == 1  # ... but the output stays
    assert OffsetsStore(admin).fetch("group") == {}  # so the input is consumed again
    recovered.close()


def test_without_the_switch_the_same_crash_leaves_nothing_visible(
    admin: TopicAdmin, root: str
) -> None:
    admin.create("out", 1)
    child = _child(root, **{faults.ENV_POINT: "before_prepare"})
    child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL
    recovered = TransactionalProducer(admin, "tx")
    recovered.init_transactions()
    assert _out_records(root) == 0
    recovered.close()


@pytest.mark.parametrize("point", ["after_participant_2", "after_participant_5"])
def test_a_participant_point_past_a_small_commit_fires_after_its_last_participant(
    admin: TopicAdmin, root: str, point: str
) -> None:
    """The child's commit has two participants (``out`` and the offsets): an armed
    after_participant_5 (planned from a bigger topology) fires after the second, so the
    transaction is decided and rolled forward by the next producer."""
    admin.create("out", 1)
    child = _child(root, **{faults.ENV_POINT: point})
    _, err = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL, err
    assert "committed" not in err
    coordinator = TransactionCoordinator(admin)
    snap = coordinator.load("tx")
    assert snap is not None and snap.meta.state is TransactionState.PREPARE_COMMIT
    newer = TransactionalProducer(admin, "tx")
    newer.init_transactions()  # rolls the decided transaction forward
    assert _out_records(root) == 1
    assert OffsetsStore(admin).fetch("group") == {("in", 0): 1}
    newer.close()
