"""A batch whose transaction the store fails at any step leaves the thread's producer
able to begin the next one: the failure aborts it, and a producer an abort could not
finish is initialised again (Kafka Streams resets its producer the same way)."""

from __future__ import annotations

from typing import Any

import pytest

from common.config import StreamsConfig
from common.errors import GenerationFencedError, StorageError
from runtime.group.errors import UnknownMemberIdError
from runtime.storage.topics import TopicAdmin
from runtime.tasks.contract import POSITION
from runtime.thread.commit import Batch
from runtime.thread.commit_eos import ExactlyOncePerTask, ExactlyOnceV2, _Undecided
from runtime.txn.coordinator import TransactionCoordinator
from runtime.txn.offsets import OffsetsStore
from runtime.txn.producer import ProducerState
from runtime.txn.state import TransactionState


def config(admin: TopicAdmin, guarantee: str) -> StreamsConfig:
    return StreamsConfig(
        **{
            "application.id": "app",
            "topics.root": admin.root.uri,
            "processing.guarantee": guarantee,
        }
    )


def batch(offset: int, *, fail: bool = False) -> Batch:
    def run(staging: str, txn: Any, tasks: Any) -> list[dict[str, Any]]:
        if fail:
            raise StorageError("cannot write a staged file: the store is away")
        row = {"kind": POSITION, "task": "0_0", "topic": "lines", "partition": 0}
        return [{**row, "offset": offset}]

    return Batch(offset, ["out"], run, lambda: None)


def fail_transit_to(monkeypatch: pytest.MonkeyPatch, state: TransactionState) -> list[str]:
    """The store refuses, once, the transaction log's write of ``state``."""
    transit = TransactionCoordinator.transit
    failed: list[str] = []

    def refusing(self: TransactionCoordinator, snap: Any, new: Any) -> Any:
        if new.state is state and not failed:
            failed.append(new.transactional_id)
            raise StorageError(f"cannot append to the log: {state.value} did not land")
        return transit(self, snap, new)

    monkeypatch.setattr(TransactionCoordinator, "transit", refusing)
    return failed


@pytest.fixture
def topics(admin: TopicAdmin) -> TopicAdmin:
    admin.create("lines", 1)
    admin.create("out", 1)
    return admin


def committed(admin: TopicAdmin) -> dict[tuple[str, int], int]:
    return OffsetsStore(admin).fetch("app")


def test_a_refused_registration_aborts_the_batch(
    topics: TopicAdmin, monkeypatch: pytest.MonkeyPatch
) -> None:
    eos = ExactlyOnceV2(topics, config(topics, "exactly_once_v2"), "app-p-1")
    eos.start(["0_0"])
    assert eos.commit_batch(batch(10)).committed
    failed = fail_transit_to(monkeypatch, TransactionState.ONGOING)
    with pytest.raises(StorageError, match="did not land"):
        eos.commit_batch(batch(20))
    assert failed == ["app-p-1"]
    assert eos.producer is not None and eos.producer.state is ProducerState.READY
    assert committed(topics) == {("lines", 0): 10}
    assert eos.commit_batch(batch(30)).committed  # was: "not allowed in state IN_TRANSACTION"
    assert committed(topics) == {("lines", 0): 30}


@pytest.mark.parametrize("guarantee", ["exactly_once_v2", "exactly_once"])
def test_a_producer_whose_abort_was_refused_is_initialised_again(
    topics: TopicAdmin, monkeypatch: pytest.MonkeyPatch, guarantee: str
) -> None:
    strategy_class = ExactlyOnceV2 if guarantee == "exactly_once_v2" else ExactlyOncePerTask
    strategy = strategy_class(topics, config(topics, guarantee), "app-p-1")
    strategy.start(["0_0"])
    assert strategy.commit_batch(batch(10)).committed
    fail_transit_to(monkeypatch, TransactionState.PREPARE_ABORT)
    with pytest.raises(StorageError):
        strategy.commit_batch(batch(20, fail=True))
    stuck = strategy.all_producers()[0]
    assert stuck.state is not ProducerState.READY
    coordinator = TransactionCoordinator(topics)
    before = coordinator.load(stuck.transactional_id)
    assert before is not None and before.meta.state is TransactionState.ONGOING
    strategy.recover()  # what the thread does once it waited the failure out
    fresh = strategy.all_producers()[0]
    assert fresh is not stuck and fresh.state is ProducerState.READY
    after = coordinator.load(fresh.transactional_id)
    assert after is not None and after.meta.state is TransactionState.EMPTY  # aborted, bumped
    assert after.meta.producer_epoch > before.meta.producer_epoch  # the old one fenced
    assert committed(topics) == {("lines", 0): 10}
    assert strategy.commit_batch(batch(30)).committed
    assert committed(topics) == {("lines", 0): 30}
    strategy.close()


def test_init_producer_id_rides_out_a_storage_failure(
    topics: TopicAdmin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that stalls while a thread starts (a GET taking 30 s, in a chaos run) costs
    the start a retry, not the instance: InitProducerId is tried again."""
    failed = fail_transit_to(monkeypatch, TransactionState.EMPTY)  # the epoch bump
    eos = ExactlyOnceV2(topics, config(topics, "exactly_once_v2"), "app-p-1")
    eos.start(["0_0"])
    assert failed == ["app-p-1"]
    assert eos.producer is not None and eos.producer.state is ProducerState.READY
    assert eos.commit_batch(batch(10)).committed
    eos.close()


def test_a_thread_waits_only_for_its_own_partitions(topics: TopicAdmin) -> None:
    """A task's partitions are its sub-topology's source topics at its partition number:
    a thread of sub-topology 1's tasks does not wait for a transaction holding offsets of
    sub-topology 0's source partitions (which another instance runs)."""
    eos = ExactlyOnceV2(topics, config(topics, "exactly_once_v2"), "app-p-1")
    assert eos.task_partitions(["0_0"]) is None  # sources not known: the whole group
    eos.sources = {"lines": 0, "app-rep-repartition": 1}
    assert eos.task_partitions(["1_0", "1_3"]) == {
        ("app-rep-repartition", 0),
        ("app-rep-repartition", 3),
    }
    assert eos.task_partitions(["0_2"]) == {("lines", 2)}
    assert eos.task_partitions(["global"]) is None


def test_a_cancelled_batch_is_fenced_until_its_prepare_commit_and_never_after(
    topics: TopicAdmin,
) -> None:
    """The commit's storage retries of a batch whose member left the group stop with
    GenerationFencedError (it can never commit); from the PrepareCommit on (its
    generation check called) nothing stops them: the outcome is being decided."""
    out: list[BaseException | None] = [None]
    cancelled = Batch(20, ["out"], lambda *_: [], lambda: None, lambda: out[0])
    undecided = _Undecided(cancelled)
    assert undecided.fenced() is None
    out[0] = UnknownMemberIdError("group 'app' has no member 'm'")
    fenced = undecided.fenced()
    assert isinstance(fenced, GenerationFencedError) and "no member 'm'" in str(fenced)
    undecided.validate()
    assert undecided.fenced() is None
    eos = ExactlyOnceV2(topics, config(topics, "exactly_once_v2"), "app-p-1")
    eos.start(["0_0"])
    assert eos.commit_batch(batch(10)).committed  # not cancelled: commits as before
    eos.close()
