"""The transaction state machine (runtime.txn.state) and its record (runtime.txn.metadata)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest

from common.errors import (
    CoordinatorError,
    InvalidTxnStateError,
    ProducerFencedError,
    StreamsError,
)
from runtime.storage.committer import StagedFile
from runtime.txn.metadata import OffsetEntry, TransactionMetadata
from runtime.txn.state import (
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    EpochExhausted,
    TransactionState,
    check_transition,
    is_epoch_exhausted,
)

# Kafka's states and ids (TransactionMetadata.scala, TransactionState.fromId).
KAFKA_IDS = {
    "Empty": 0,
    "Ongoing": 1,
    "PrepareCommit": 2,
    "PrepareAbort": 3,
    "CompleteCommit": 4,
    "CompleteAbort": 5,
    "Dead": 6,
    "PrepareEpochFence": 7,
}

# Every legal (from, to) pair, written out from Kafka's validPreviousStates.
KAFKA_ALLOWED = {
    ("Empty", "Empty"),
    ("CompleteCommit", "Empty"),
    ("CompleteAbort", "Empty"),
    ("Ongoing", "Ongoing"),
    ("Empty", "Ongoing"),
    ("CompleteCommit", "Ongoing"),
    ("CompleteAbort", "Ongoing"),
    ("Ongoing", "PrepareCommit"),
    ("Ongoing", "PrepareAbort"),
    ("PrepareEpochFence", "PrepareAbort"),
    ("PrepareCommit", "CompleteCommit"),
    ("PrepareAbort", "CompleteAbort"),
    ("Empty", "Dead"),
    ("CompleteAbort", "Dead"),
    ("CompleteCommit", "Dead"),
    ("Ongoing", "PrepareEpochFence"),
}
ALL_PAIRS = [(a, b) for a in KAFKA_IDS for b in KAFKA_IDS]
RESTING = {"Empty", "CompleteCommit", "CompleteAbort"}

TID = "app-0_1"
PID = 4000
NOW = 1_000_000
FILE_A = StagedFile("part-0.parquet", 0, 10, 2048, 100, 200)
FILE_B = StagedFile("part-1.parquet", 1, 5, 1024, 150, 250)


def st(name: str) -> TransactionState:
    return TransactionState.from_name(name)


def make(state: str, **changes: Any) -> TransactionMetadata:
    """Return an initialised record (epoch 3, one txn so far) in the state named ``state``."""
    base = TransactionMetadata(
        transactional_id=TID,
        producer_id=PID,
        producer_epoch=3,
        last_producer_epoch=2,
        txn_timeout_ms=60_000,
        state=st(state),
        participants=("t1",),
        txn_sequence=1,
        txn_start_timestamp=NOW - 5_000,
        txn_last_update_timestamp=NOW - 1_000,
    )
    return dataclasses.replace(base, **changes)


# --- (a) the state table, exhaustively -------------------------------------------------


def test_states_ids_and_names_are_kafkas() -> None:
    assert {s.state_name: s.value for s in TransactionState} == KAFKA_IDS
    assert [s.name for s in TransactionState] == [
        "EMPTY",
        "ONGOING",
        "PREPARE_COMMIT",
        "PREPARE_ABORT",
        "COMPLETE_COMMIT",
        "COMPLETE_ABORT",
        "DEAD",
        "PREPARE_EPOCH_FENCE",
    ]
    for name, state_id in KAFKA_IDS.items():
        assert TransactionState.from_name(name) is TransactionState(state_id)


def test_from_name_rejects_unknown_names() -> None:
    for bad in ("empty", "ONGOING", "Aborted", ""):
        with pytest.raises(ValueError, match="Unknown transaction state"):
            TransactionState.from_name(bad)


@pytest.mark.parametrize(("current", "target"), ALL_PAIRS)
def test_check_transition_follows_kafkas_table(current: str, target: str) -> None:
    if (current, target) in KAFKA_ALLOWED:
        check_transition(st(current), st(target))
    else:
        with pytest.raises(InvalidTxnStateError) as info:
            check_transition(st(current), st(target))
        assert f"Cannot transition transaction state from {current} to {target}" in str(info.value)


def test_valid_previous_states_match_the_table() -> None:
    for target in KAFKA_IDS:
        expected = {a for a, b in KAFKA_ALLOWED if b == target}
        assert {s.state_name for s in st(target).valid_previous_states} == expected
        assert isinstance(st(target).valid_previous_states, frozenset)


def test_state_predicates() -> None:
    def names(pred: Callable[[TransactionState], bool]) -> set[str]:
        return {s.state_name for s in TransactionState if pred(s)}

    assert names(lambda s: s.is_expiration_allowed) == RESTING
    assert names(lambda s: s.is_complete_or_empty) == RESTING
    assert names(lambda s: s.is_prepare) == {"PrepareCommit", "PrepareAbort", "PrepareEpochFence"}


def test_error_message_lists_allowed_sources() -> None:
    with pytest.raises(InvalidTxnStateError, match=r"allowed from: Ongoing, PrepareEpochFence"):
        check_transition(TransactionState.EMPTY, TransactionState.PREPARE_ABORT)


# --- (b) every transition helper from every state ---------------------------------------

Helper = Callable[[TransactionMetadata], TransactionMetadata]
HELPERS: dict[str, tuple[Helper, set[str], str]] = {
    "add_participants": (
        lambda m: m.prepare_add_participants(["t2"], now_ms=NOW),
        RESTING | {"Ongoing"},
        "Ongoing",
    ),
    "add_offsets": (
        lambda m: m.prepare_add_offsets("g", [OffsetEntry("g", "in", 0, 5)], now_ms=NOW),
        {"Ongoing"},
        "Ongoing",
    ),
    "commit": (
        lambda m: m.prepare_commit({"t1": [FILE_A]}, now_ms=NOW),
        {"Ongoing"},
        "PrepareCommit",
    ),
    "abort": (
        lambda m: m.prepare_abort(now_ms=NOW),
        {"Ongoing", "PrepareEpochFence"},
        "PrepareAbort",
    ),
    "complete_commit": (
        lambda m: m.complete_commit(now_ms=NOW),
        {"PrepareCommit"},
        "CompleteCommit",
    ),
    "complete_abort": (lambda m: m.complete_abort(now_ms=NOW), {"PrepareAbort"}, "CompleteAbort"),
    "fence": (
        lambda m: m.prepare_fence_producer_epoch(now_ms=NOW),
        {"Ongoing"},
        "PrepareEpochFence",
    ),
    "increment": (
        lambda m: m.prepare_increment_producer_epoch(30_000, 3, now_ms=NOW),
        RESTING,
        "Empty",
    ),
    "rotate": (lambda m: m.prepare_producer_id_rotation(9, 30_000, now_ms=NOW), RESTING, "Empty"),
    "dead": (lambda m: m.prepare_dead(now_ms=NOW), RESTING, "Dead"),
}


@pytest.mark.parametrize("state", list(KAFKA_IDS))
@pytest.mark.parametrize("helper", list(HELPERS))
def test_helper_from_every_state(helper: str, state: str) -> None:
    call, valid_from, target = HELPERS[helper]
    before = make(state)
    snapshot = before.to_json()
    if state in valid_from:
        after = call(before)
        assert after.state is st(target)
        assert after.txn_last_update_timestamp == NOW
    else:
        # add_offsets has its own message: it needs Ongoing, not just a legal transition
        match = f"state {state}:" if helper == "add_offsets" else f"from {state} to {target}"
        with pytest.raises(InvalidTxnStateError, match=match):
            call(before)
    assert before.to_json() == snapshot  # never mutated


def test_add_participants_starts_a_new_transaction_from_a_resting_state() -> None:
    done = make(
        "CompleteCommit",
        participants=("old",),
        pending_offsets=(OffsetEntry("g", "in", 0, 1),),
        group_ids=("g",),
        staged={"old": (FILE_A,)},
    )
    m = done.prepare_add_participants(["t9", "t2", "t9"], now_ms=NOW)
    assert m.participants == ("t2", "t9")
    assert (m.txn_sequence, m.txn_start_timestamp) == (2, NOW)
    assert (m.pending_offsets, m.group_ids, dict(m.staged)) == ((), (), {})
    assert (m.producer_id, m.producer_epoch) == (PID, 3)


def test_add_participants_to_an_ongoing_transaction_is_a_union() -> None:
    m = make("Ongoing", participants=("t5", "t1"))
    m2 = m.prepare_add_participants(["t3", "t1"], now_ms=NOW)
    assert m2.participants == ("t1", "t3", "t5")
    assert (m2.txn_sequence, m2.txn_start_timestamp) == (1, NOW - 5_000)


def test_add_participants_needs_an_initialised_producer() -> None:
    fresh = TransactionMetadata.new(TID, PID, 60_000, now_ms=NOW)
    with pytest.raises(InvalidTxnStateError, match="InitProducerId"):
        fresh.prepare_add_participants(["t1"], now_ms=NOW)
    with pytest.raises(TypeError):
        make("Ongoing").prepare_add_participants("t1", now_ms=NOW)


def test_add_offsets_merges_per_partition_later_wins() -> None:
    m = make("Ongoing").prepare_add_offsets(
        "g2", [OffsetEntry("g2", "in", 1, 10), OffsetEntry("g2", "in", 0, 7)], now_ms=NOW
    )
    m = m.prepare_add_offsets(
        "g1", [OffsetEntry("g1", "in", 0, 3), OffsetEntry("g1", "in", 0, 4, "m")], now_ms=NOW
    )
    m = m.prepare_add_offsets("g2", [OffsetEntry("g2", "in", 1, 12)], now_ms=NOW)
    assert m.group_ids == ("g1", "g2")
    assert m.pending_offsets == (
        OffsetEntry("g1", "in", 0, 4, "m"),
        OffsetEntry("g2", "in", 0, 7),
        OffsetEntry("g2", "in", 1, 12),
    )
    assert m.state is TransactionState.ONGOING


def test_add_offsets_errors() -> None:
    with pytest.raises(InvalidTxnStateError, match="no transaction is ongoing"):
        make("Empty").prepare_add_offsets("g", [], now_ms=NOW)
    with pytest.raises(ValueError, match="other"):
        make("Ongoing").prepare_add_offsets("g", [OffsetEntry("other", "in", 0, 1)], now_ms=NOW)


def test_commit_records_staged_files_and_keeps_them_to_complete() -> None:
    m = make("Ongoing", participants=("t1", "t2"))
    m = m.prepare_add_offsets("g", [OffsetEntry("g", "in", 0, 9)], now_ms=NOW - 10)
    prepared = m.prepare_commit({"t2": [FILE_B], "t1": (FILE_A, FILE_B)}, now_ms=NOW)
    assert dict(prepared.staged) == {"t1": (FILE_A, FILE_B), "t2": (FILE_B,)}
    assert prepared.pending_offsets == m.pending_offsets
    done = prepared.complete_commit(now_ms=NOW + 1)
    assert done.staged == prepared.staged
    assert done.txn_last_update_timestamp == NOW + 1


def test_commit_refuses_files_for_topics_outside_the_transaction() -> None:
    with pytest.raises(InvalidTxnStateError, match=r"\['zz'\]"):
        make("Ongoing").prepare_commit({"t1": [FILE_A], "zz": [FILE_B]}, now_ms=NOW)


def test_staged_is_read_only_and_copied() -> None:
    source = {"t1": [FILE_A]}
    m = make("Ongoing").prepare_commit(source, now_ms=NOW)
    source["t1"].append(FILE_B)
    assert m.staged["t1"] == (FILE_A,)
    with pytest.raises(TypeError):
        m.staged["t1"] = ()  # type: ignore[index]


def test_abort_after_fence_keeps_the_bumped_epoch() -> None:
    fenced = make("Ongoing").prepare_fence_producer_epoch(now_ms=NOW)
    aborted = fenced.prepare_abort(now_ms=NOW + 1).complete_abort(now_ms=NOW + 2)
    assert aborted.state is TransactionState.COMPLETE_ABORT
    assert (aborted.producer_epoch, aborted.last_producer_epoch) == (4, NO_PRODUCER_EPOCH)


# --- (c) epoch bumps and rotation -------------------------------------------------------


def test_new_id_starts_without_epoch_and_first_init_gives_zero() -> None:
    fresh = TransactionMetadata.new(TID, PID, 60_000, now_ms=NOW)
    assert (fresh.state, fresh.producer_epoch) == (TransactionState.EMPTY, NO_PRODUCER_EPOCH)
    assert (fresh.last_producer_id, fresh.last_producer_epoch) == (NO_PRODUCER_ID, -1)
    assert (fresh.txn_sequence, fresh.txn_start_timestamp) == (0, -1)
    first = fresh.prepare_increment_producer_epoch(30_000, None, now_ms=NOW + 5)
    assert (first.producer_epoch, first.last_producer_epoch) == (0, NO_PRODUCER_EPOCH)
    assert (first.txn_timeout_ms, first.txn_last_update_timestamp) == (30_000, NOW + 5)
    # an expected epoch against a new id (no epoch yet) also bumps to 0
    also = fresh.prepare_increment_producer_epoch(30_000, 17, now_ms=NOW)
    assert (also.producer_epoch, also.last_producer_epoch) == (0, NO_PRODUCER_EPOCH)


def test_no_expected_epoch_bumps_and_forgets_the_last() -> None:
    m = make("CompleteCommit").prepare_increment_producer_epoch(60_000, None, now_ms=NOW)
    assert (m.producer_epoch, m.last_producer_epoch) == (4, NO_PRODUCER_EPOCH)


def test_expected_current_epoch_bumps_and_remembers_it() -> None:
    m = make("CompleteAbort").prepare_increment_producer_epoch(60_000, 3, now_ms=NOW)
    assert (m.state, m.producer_epoch, m.last_producer_epoch) == (TransactionState.EMPTY, 4, 3)


def test_retry_with_last_epoch_is_unchanged() -> None:
    m = make("Empty").prepare_increment_producer_epoch(60_000, 2, now_ms=NOW)
    assert (m.producer_id, m.producer_epoch, m.last_producer_epoch) == (PID, 3, 2)


def test_unknown_expected_epoch_is_fenced() -> None:
    for expected in (0, 1, 4, 100):
        with pytest.raises(ProducerFencedError, match=f"epoch {expected} is fenced"):
            make("Empty").prepare_increment_producer_epoch(60_000, expected, now_ms=NOW)
    # a last epoch of -1 (after a fence or a fresh init) matches no retry
    cleared = make("Empty", last_producer_epoch=NO_PRODUCER_EPOCH)
    with pytest.raises(ProducerFencedError):
        cleared.prepare_increment_producer_epoch(60_000, NO_PRODUCER_EPOCH, now_ms=NOW)


def test_increment_clears_the_transaction_data_but_not_the_sequence() -> None:
    done = make("CompleteCommit", staged={"t1": (FILE_A,)}, group_ids=("g",), txn_sequence=8)
    m = done.prepare_increment_producer_epoch(45_000, 3, now_ms=NOW)
    assert (m.participants, m.group_ids, dict(m.staged)) == ((), (), {})
    assert (m.txn_start_timestamp, m.txn_sequence, m.txn_timeout_ms) == (-1, 8, 45_000)


def test_epoch_exhaustion_signal() -> None:
    assert not is_epoch_exhausted(MAX_EPOCH - 2)
    assert is_epoch_exhausted(MAX_EPOCH - 1) and is_epoch_exhausted(MAX_EPOCH)
    last_ok = make("Empty", producer_epoch=32765, last_producer_epoch=32764)
    m = last_ok.prepare_increment_producer_epoch(60_000, 32765, now_ms=NOW)
    assert (m.producer_epoch, m.is_producer_epoch_exhausted) == (32766, True)
    for expected in (None, 32766):
        with pytest.raises(EpochExhausted) as info:
            m.prepare_increment_producer_epoch(60_000, expected, now_ms=NOW)
        assert (info.value.producer_id, info.value.producer_epoch) == (PID, 32766)
        assert not isinstance(info.value, StreamsError)
    # a retry of the call that reached 32766 still succeeds; a stranger is still fenced
    assert m.prepare_increment_producer_epoch(60_000, 32765, now_ms=NOW).producer_epoch == 32766
    with pytest.raises(ProducerFencedError):
        m.prepare_increment_producer_epoch(60_000, 7, now_ms=NOW)


def test_rotation() -> None:
    old = make("CompleteCommit", producer_epoch=32766, txn_sequence=12, staged={"t1": (FILE_A,)})
    m = old.prepare_producer_id_rotation(PID + 1, 20_000, now_ms=NOW)
    assert (m.producer_id, m.last_producer_id) == (PID + 1, PID)
    assert (m.producer_epoch, m.last_producer_epoch) == (0, NO_PRODUCER_EPOCH)
    assert (m.state, m.txn_timeout_ms, m.txn_sequence) == (TransactionState.EMPTY, 20_000, 12)
    assert (m.participants, dict(m.staged), m.txn_start_timestamp) == ((), {}, -1)
    kept = old.prepare_producer_id_rotation(PID + 1, 20_000, now_ms=NOW, record_last_epoch=True)
    assert kept.last_producer_epoch == 32766
    assert m.prepare_increment_producer_epoch(20_000, 0, now_ms=NOW).producer_epoch == 1
    for bad in (PID, -1):
        with pytest.raises(ValueError, match="rotate"):
            old.prepare_producer_id_rotation(bad, 20_000, now_ms=NOW)


# --- (d) fencing ------------------------------------------------------------------------


def test_fence_bumps_the_epoch_and_clears_the_last() -> None:
    m = make("Ongoing").prepare_fence_producer_epoch(now_ms=NOW)
    assert (m.state, m.producer_epoch) == (TransactionState.PREPARE_EPOCH_FENCE, 4)
    assert m.last_producer_epoch == NO_PRODUCER_EPOCH
    assert m.participants == ("t1",) and m.txn_start_timestamp == NOW - 5_000


def test_fence_at_max_epoch() -> None:
    below = make("Ongoing", producer_epoch=MAX_EPOCH - 1)
    assert below.prepare_fence_producer_epoch(now_ms=NOW).producer_epoch == MAX_EPOCH
    with pytest.raises(InvalidTxnStateError, match="Cannot fence producer with max epoch"):
        make("Ongoing", producer_epoch=MAX_EPOCH).prepare_fence_producer_epoch(now_ms=NOW)


# --- (e) the transaction sequence -------------------------------------------------------


def test_sequence_counts_transactions_not_participants() -> None:
    m = TransactionMetadata.new(TID, PID, 60_000, now_ms=0)
    m = m.prepare_increment_producer_epoch(60_000, None, now_ms=1)
    assert m.txn_sequence == 0
    m = m.prepare_add_participants(["a"], now_ms=2)
    assert m.txn_sequence == 1
    m = m.prepare_add_participants(["b"], now_ms=3).prepare_add_participants(["c"], now_ms=4)
    assert m.txn_sequence == 1
    m = m.prepare_commit({}, now_ms=5).complete_commit(now_ms=6)
    m = m.prepare_add_participants(["a"], now_ms=7)
    assert m.txn_sequence == 2
    m = m.prepare_abort(now_ms=8).complete_abort(now_ms=9)
    m = m.prepare_increment_producer_epoch(60_000, m.producer_epoch, now_ms=10)
    m = m.prepare_producer_id_rotation(PID + 1, 60_000, now_ms=11)
    assert m.txn_sequence == 2
    assert m.prepare_add_participants(["a"], now_ms=12).txn_sequence == 3


# --- (f) JSON ---------------------------------------------------------------------------


def full() -> TransactionMetadata:
    return TransactionMetadata(
        transactional_id="app-1_0",
        producer_id=77,
        producer_epoch=12,
        last_producer_id=76,
        last_producer_epoch=11,
        txn_timeout_ms=45_000,
        state=TransactionState.PREPARE_COMMIT,
        participants=("out-b", "out-a"),
        pending_offsets=(OffsetEntry("g", "in", 2, 40, "meta"), OffsetEntry("g", "in", 0, 9)),
        group_ids=("g", "h"),
        txn_sequence=31,
        staged={"out-b": (FILE_B,), "out-a": (FILE_A, FILE_B)},
        txn_start_timestamp=NOW - 300,
        txn_last_update_timestamp=NOW,
        group_generation=5,
        member_id="member-1",
    )


def test_json_round_trip_with_every_field_set() -> None:
    original = full()
    doc = original.to_json()
    assert doc["state"] == "PrepareCommit" and doc["version"] == 1
    assert set(doc) == {f.name for f in dataclasses.fields(TransactionMetadata)} | {"version"}
    loaded = TransactionMetadata.from_json(json.loads(json.dumps(doc)))
    assert loaded == original
    assert hash(loaded) == hash(original)
    for f in dataclasses.fields(TransactionMetadata):
        assert getattr(loaded, f.name) == getattr(original, f.name), f.name
    assert loaded.participants == ("out-a", "out-b")
    assert loaded.pending_offsets[0] == OffsetEntry("g", "in", 0, 9)


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda d: d.pop(key)


def _set(key: str, value: object) -> Callable[[dict[str, Any]], None]:
    return lambda d: d.__setitem__(key, value)


BAD_DOCS: list[tuple[Callable[[dict[str, Any]], None], str]] = [
    (_drop("producer_epoch"), "'producer_epoch' is missing"),
    (_set("surprise", 1), "'surprise' is unknown"),
    (_set("version", 2), "'version'"),
    (_set("producer_id", "77"), "'producer_id' must be an integer"),
    (_set("txn_sequence", True), "'txn_sequence' must be an integer"),
    (_set("producer_epoch", MAX_EPOCH + 1), "'producer_epoch' must be in"),
    (_set("txn_timeout_ms", 0), "'txn_timeout_ms'"),
    (_set("state", "Aborted"), "'state'"),
    (_set("state", 1), "'state' must be a string"),
    (_set("member_id", None), "'member_id' must be a string"),
    (_set("participants", "out-a"), "'participants' must be a list"),
    (_set("group_ids", ["g", 3]), "'group_ids[1]' must be a string"),
    (
        lambda d: d["pending_offsets"][1].__setitem__("partition", -1),
        "'pending_offsets[1].partition'",
    ),
    (lambda d: d["pending_offsets"][0].pop("offset"), "'pending_offsets[0].offset' is missing"),
    (lambda d: d["staged"]["out-a"][1].pop("size"), "'staged.out-a[1].size' is missing"),
    (lambda d: d["staged"].__setitem__("out-b", {}), "'staged.out-b' must be a list"),
    (_set("staged", []), "'staged' must be an object"),
]


@pytest.mark.parametrize(("corrupt", "message"), BAD_DOCS)
def test_from_json_names_the_bad_field(
    corrupt: Callable[[dict[str, Any]], None], message: str
) -> None:
    doc = json.loads(json.dumps(full().to_json()))
    TransactionMetadata.from_json(doc)  # valid before the corruption
    corrupt(doc)
    with pytest.raises(CoordinatorError) as info:
        TransactionMetadata.from_json(doc)
    assert message in str(info.value)


def test_from_json_rejects_a_non_object() -> None:
    with pytest.raises(CoordinatorError, match="must be an object"):
        TransactionMetadata.from_json([])  # type: ignore[arg-type]


# --- (g) timeout and expiry -------------------------------------------------------------


def test_timeout_is_kafkas_strict_rule_for_ongoing_only() -> None:
    start, timeout = NOW - 5_000, 60_000
    ongoing = make("Ongoing")
    assert not ongoing.is_timed_out(start + timeout)
    assert ongoing.is_timed_out(start + timeout + 1)
    for state in set(KAFKA_IDS) - {"Ongoing"}:
        assert not make(state).is_timed_out(start + 10 * timeout), state


def test_expiry_only_in_resting_states_after_the_expiration() -> None:
    last_update, expiration = NOW - 1_000, 10_000
    for state in KAFKA_IDS:
        m = make(state)
        assert not m.is_expired(last_update + expiration - 1, expiration), state
        assert m.is_expired(last_update + expiration, expiration) is (state in RESTING), state
        assert m.is_expired(last_update + 100 * expiration, expiration) is (state in RESTING)
