"""The durable record the transaction coordinator logs per transactional id.

:class:`TransactionMetadata` is the immutable record; each ``prepare_*``/``complete_*``
helper checks the transition (:func:`~runtime.txn.state.check_transition`) and returns a new
record (Kafka's ``TxnTransitMetadata``); :class:`OffsetEntry` is a group offset committed
in the transaction; ``to_json``/``from_json`` are the record's form in the log. As in real
Kafka, InitProducerId (epoch bump or producer id rotation) moves ``Empty``/``Complete*`` to
``Empty`` and clears the transaction's data; the next AddPartitions moves
``Empty``/``Complete*`` straight to ``Ongoing``. On purpose unlike Kafka: ``complete_*``
keeps the finished transaction's participants, offsets and staged files (for inspection)
until the next transaction or InitProducerId, and ``last_producer_id`` changes only on
rotation (Kafka rewrites it to the pre-transition id on every transition).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Self

from common.errors import InvalidTxnStateError, ProducerFencedError
from runtime.storage.committer import StagedFile
from runtime.txn.json_reader import (
    invalid,
    read_flat,
    read_list,
    read_object,
    read_scalars,
    read_str,
)
from runtime.txn.state import (
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    EpochExhausted,
    TransactionState,
    check_transition,
    is_epoch_exhausted,
)

FORMAT_VERSION = 1  # of the JSON written by TransactionMetadata.to_json


@dataclass(frozen=True, slots=True)
class OffsetEntry:
    """A consumer-group offset committed as part of a transaction."""

    group: str
    topic: str
    partition: int
    offset: int
    metadata: str = ""

    @property
    def key(self) -> tuple[str, str, int]:
        """Return ``(group, topic, partition)``, the identity of the entry."""
        return (self.group, self.topic, self.partition)


def _merge_offsets(entries: Iterable[OffsetEntry]) -> tuple[OffsetEntry, ...]:
    merged = {entry.key: entry for entry in entries}  # a later entry wins
    return tuple(merged[key] for key in sorted(merged))


# The transaction's own data, reset when a producer is (re-)initialised.
_CLEARED: dict[str, Any] = dict(
    participants=(), pending_offsets=(), group_ids=(), staged={}, txn_start_timestamp=-1
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionMetadata:
    """The durable state of one transactional id, as written to the transaction log.

    Instances are immutable: each ``prepare_*``/``complete_*`` method checks the transition
    with :func:`check_transition` and returns a new record whose
    ``txn_last_update_timestamp`` is ``now_ms``. Participants and group ids are kept sorted
    and unique; offsets sorted by ``(group, topic, partition)``, one entry per key.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int
    state: TransactionState
    participants: tuple[str, ...] = ()
    pending_offsets: tuple[OffsetEntry, ...] = ()
    group_ids: tuple[str, ...] = ()
    txn_sequence: int = 0
    staged: Mapping[str, tuple[StagedFile, ...]] = field(default_factory=dict, hash=False)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int
    group_generation: int = -1
    member_id: str = ""

    def __post_init__(self) -> None:
        """Normalise the collections (sorted, unique, read-only)."""
        set_ = object.__setattr__
        set_(self, "participants", tuple(sorted(set(self.participants))))
        set_(self, "group_ids", tuple(sorted(set(self.group_ids))))
        set_(self, "pending_offsets", _merge_offsets(self.pending_offsets))
        staged = {topic: tuple(self.staged[topic]) for topic in sorted(self.staged)}
        set_(self, "staged", MappingProxyType(staged))

    @classmethod
    def new(
        cls, transactional_id: str, producer_id: int, txn_timeout_ms: int, *, now_ms: int
    ) -> Self:
        """Return the record of a new transactional id: ``Empty``, no epoch yet (the first
        InitProducerId bumps it to 0)."""
        return cls(
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=NO_PRODUCER_EPOCH,
            txn_timeout_ms=txn_timeout_ms,
            state=TransactionState.EMPTY,
            txn_last_update_timestamp=now_ms,
        )

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        """Return whether the current producer id has no epoch left to hand out."""
        return is_epoch_exhausted(self.producer_epoch)

    def _transit(self, target: TransactionState, *, now_ms: int, **changes: Any) -> Self:
        """Return a copy in ``target`` with ``changes``; raise InvalidTxnStateError if
        the transition is illegal or would leave a live state without producer id/epoch."""
        check_transition(self.state, target)
        result = dataclasses.replace(
            self, state=target, txn_last_update_timestamp=now_ms, **changes
        )
        if target is not TransactionState.DEAD and (
            result.producer_id < 0 or result.producer_epoch < 0
        ):
            raise InvalidTxnStateError(
                f"Transactional id {self.transactional_id!r} has no producer id/epoch yet "
                f"({result.producer_id}/{result.producer_epoch}); InitProducerId must run first"
            )
        return result

    def prepare_add_participants(self, topics: Iterable[str], *, now_ms: int) -> Self:
        """Register ``topics`` in the transaction, starting a new one if none is ongoing.

        From ``Empty``/``Complete*`` this begins transaction ``txn_sequence + 1``. Raises
        InvalidTxnStateError from any other state but ``Ongoing``.
        """
        if isinstance(topics, str):
            raise TypeError("topics must be an iterable of topic names, not a str")
        added = tuple(topics)
        if not self.state.is_complete_or_empty:
            return self._transit(
                TransactionState.ONGOING, now_ms=now_ms, participants=self.participants + added
            )
        return self._transit(
            TransactionState.ONGOING,
            now_ms=now_ms,
            **{**_CLEARED, "participants": added, "txn_start_timestamp": now_ms},
            txn_sequence=self.txn_sequence + 1,
        )

    def prepare_add_offsets(
        self, group: str, offsets: Iterable[OffsetEntry], *, now_ms: int
    ) -> Self:
        """Add ``group``'s ``offsets`` to the ongoing transaction (a later entry for the
        same partition wins).

        Raises InvalidTxnStateError unless ``Ongoing``, ``ValueError`` if an entry belongs
        to another group.
        """
        if self.state is not TransactionState.ONGOING:
            raise InvalidTxnStateError(
                f"Cannot add offsets of group {group!r} in transaction state "
                f"{self.state.state_name}: no transaction is ongoing"
            )
        entries = tuple(offsets)
        strangers = sorted({e.group for e in entries if e.group != group})
        if strangers:
            raise ValueError(f"Offsets of groups {strangers} given for group {group!r}")
        return self._transit(
            TransactionState.ONGOING,
            now_ms=now_ms,
            group_ids=(*self.group_ids, group),
            pending_offsets=self.pending_offsets + entries,
        )

    def prepare_commit(self, staged: Mapping[str, Iterable[StagedFile]], *, now_ms: int) -> Self:
        """Decide to commit: ``Ongoing -> PrepareCommit``, recording the files to commit.

        Raises InvalidTxnStateError from another state, or if a topic in ``staged`` was
        never added to the transaction.
        """
        check_transition(self.state, TransactionState.PREPARE_COMMIT)
        unknown = sorted(set(staged) - set(self.participants))
        if unknown:
            raise InvalidTxnStateError(
                f"Staged files for topics {unknown} that are not in the transaction of "
                f"{self.transactional_id!r} (participants: {list(self.participants)})"
            )
        files = {topic: tuple(staged[topic]) for topic in staged}
        return self._transit(TransactionState.PREPARE_COMMIT, now_ms=now_ms, staged=files)

    def prepare_abort(self, *, now_ms: int) -> Self:
        """Decide to abort: ``Ongoing``/``PrepareEpochFence -> PrepareAbort``.

        Raises InvalidTxnStateError from any other state.
        """
        return self._transit(TransactionState.PREPARE_ABORT, now_ms=now_ms)

    def complete_commit(self, *, now_ms: int) -> Self:
        """Finish a commit: ``PrepareCommit -> CompleteCommit``; raise InvalidTxnStateError
        from any other state."""
        return self._transit(TransactionState.COMPLETE_COMMIT, now_ms=now_ms)

    def complete_abort(self, *, now_ms: int) -> Self:
        """Finish an abort: ``PrepareAbort -> CompleteAbort``; raise InvalidTxnStateError
        from any other state."""
        return self._transit(TransactionState.COMPLETE_ABORT, now_ms=now_ms)

    def prepare_fence_producer_epoch(self, *, now_ms: int) -> Self:
        """Fence the current producer: ``Ongoing -> PrepareEpochFence`` with epoch + 1.

        The last epoch becomes ``NO_PRODUCER_EPOCH``, so the fenced producer cannot pass for
        a retry. Raises InvalidTxnStateError from another state or at ``MAX_EPOCH``.
        """
        check_transition(self.state, TransactionState.PREPARE_EPOCH_FENCE)
        if self.producer_epoch >= MAX_EPOCH:
            raise InvalidTxnStateError(
                f"Cannot fence producer with max epoch {MAX_EPOCH} "
                f"(transactional id {self.transactional_id!r})"
            )
        return self._transit(
            TransactionState.PREPARE_EPOCH_FENCE,
            now_ms=now_ms,
            producer_epoch=self.producer_epoch + 1,
            last_producer_epoch=NO_PRODUCER_EPOCH,
        )

    def prepare_increment_producer_epoch(
        self, txn_timeout_ms: int, expected_epoch: int | None, *, now_ms: int
    ) -> Self:
        """Bump the epoch for InitProducerId (Kafka's ``prepareIncrementProducerEpoch``).

        ``None`` (new producer): ``(epoch + 1, NO_PRODUCER_EPOCH)``; the current epoch (or no
        epoch yet): ``(epoch + 1, epoch)``; the last epoch: a retry, unchanged. Moves
        ``Empty``/``Complete*`` to ``Empty`` (else InvalidTxnStateError). Raises
        :class:`EpochExhausted` instead of bumping past ``MAX_EPOCH - 1`` and
        ProducerFencedError for any other ``expected_epoch``. Matching the producer *id*
        is the caller's job.
        """
        check_transition(self.state, TransactionState.EMPTY)
        epoch, last = self.producer_epoch, self.last_producer_epoch
        if expected_epoch is None:
            new_epoch, new_last = epoch + 1, NO_PRODUCER_EPOCH
        elif epoch in (NO_PRODUCER_EPOCH, expected_epoch):
            new_epoch, new_last = epoch + 1, epoch
        elif expected_epoch == last != NO_PRODUCER_EPOCH:
            new_epoch, new_last = epoch, last
        else:
            raise ProducerFencedError(
                f"Producer of transactional id {self.transactional_id!r} with epoch "
                f"{expected_epoch} is fenced (current epoch {epoch}, previous {last})"
            )
        if new_epoch != epoch and is_epoch_exhausted(epoch):
            raise EpochExhausted(self.transactional_id, self.producer_id, epoch)
        return self._transit(
            TransactionState.EMPTY,
            now_ms=now_ms,
            **_CLEARED,
            producer_epoch=new_epoch,
            last_producer_epoch=new_last,
            txn_timeout_ms=txn_timeout_ms,
        )

    def prepare_producer_id_rotation(
        self,
        new_producer_id: int,
        txn_timeout_ms: int,
        *,
        now_ms: int,
        record_last_epoch: bool = False,
    ) -> Self:
        """Switch to ``new_producer_id`` at epoch 0 (Kafka's ``prepareProducerIdRotation``).

        ``last_producer_id`` becomes the old id; ``last_producer_epoch`` the old epoch if
        ``record_last_epoch`` (Kafka does so when the producer sent its epoch, to recognise
        its retry), else ``NO_PRODUCER_EPOCH``. Moves ``Empty``/``Complete*`` to ``Empty``;
        raises InvalidTxnStateError from other states, ``ValueError`` for a bad new id.
        """
        check_transition(self.state, TransactionState.EMPTY)
        if new_producer_id < 0 or new_producer_id == self.producer_id:
            raise ValueError(f"Cannot rotate producer id {self.producer_id} to {new_producer_id}")
        return self._transit(
            TransactionState.EMPTY,
            now_ms=now_ms,
            **_CLEARED,
            producer_id=new_producer_id,
            last_producer_id=self.producer_id,
            producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            txn_timeout_ms=txn_timeout_ms,
        )

    def prepare_dead(self, *, now_ms: int) -> Self:
        """Expire the transactional id: ``Empty``/``Complete* -> Dead``; raise
        InvalidTxnStateError from any other state."""
        return self._transit(TransactionState.DEAD, now_ms=now_ms)

    def is_expired(self, now_ms: int, expiration_ms: int) -> bool:
        """Return whether the id may expire: a resting state, idle for ``expiration_ms``."""
        return (
            self.state.is_expiration_allowed
            and self.txn_last_update_timestamp <= now_ms - expiration_ms
        )

    def is_timed_out(self, now_ms: int) -> bool:
        """Return whether an ``Ongoing`` transaction outlived its timeout (never Prepare*)."""
        return (
            self.state is TransactionState.ONGOING
            and self.txn_start_timestamp + self.txn_timeout_ms < now_ms
        )

    def to_json(self) -> dict[str, Any]:
        """Return the record as a JSON-serialisable dict."""
        out: dict[str, Any] = {"version": FORMAT_VERSION}
        for f in dataclasses.fields(self):
            out[f.name] = getattr(self, f.name)
        out["state"] = self.state.state_name
        out["participants"] = list(self.participants)
        out["group_ids"] = list(self.group_ids)
        out["pending_offsets"] = [dataclasses.asdict(e) for e in self.pending_offsets]
        staged = self.staged.items()
        out["staged"] = {t: [dataclasses.asdict(f) for f in files] for t, files in staged}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        """Return the record read from :meth:`to_json`'s output.

        Raises :class:`CoordinatorError` naming the first missing, unknown or invalid field.
        """
        d = read_object(data, "", _TOP_KEYS)
        if d["version"] != FORMAT_VERSION:
            raise invalid("version", f"must be {FORMAT_VERSION}, got {d['version']!r}")
        try:
            state = TransactionState.from_name(read_str(d["state"], "state"))
        except ValueError as exc:
            raise invalid("state", str(exc)) from None
        staged = read_object(d["staged"], "staged", None)
        return cls(
            **read_scalars(d, "", _TOP_SCALARS),
            state=state,
            participants=tuple(read_str(v, w) for v, w in read_list(d, "participants")),
            pending_offsets=tuple(
                read_flat(OffsetEntry, v, w) for v, w in read_list(d, "pending_offsets")
            ),
            group_ids=tuple(read_str(v, w) for v, w in read_list(d, "group_ids")),
            staged={
                t: tuple(read_flat(StagedFile, v, w) for v, w in read_list(staged, t, "staged."))
                for t in staged
            },
        )


_TOP_KEYS = frozenset({"version", *(f.name for f in dataclasses.fields(TransactionMetadata))})
_TOP_SCALARS = sorted(
    _TOP_KEYS - {"version", "state", "participants", "pending_offsets"} - {"group_ids", "staged"}
)
