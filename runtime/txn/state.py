"""Kafka's coordinator-side transaction state machine and producer epochs.

:class:`TransactionState` has Kafka's 8 states, ids, names and ``validPreviousStates``, and
:func:`check_transition` refuses a move the state machine does not allow, naming both
states. The producer-epoch limits live here too: ``MAX_EPOCH`` stays reserved for fencing,
:func:`is_epoch_exhausted` says when no epoch is left to hand out, and
:class:`EpochExhausted` tells the coordinator to rotate the producer id. The durable record
that moves through these states is :class:`~runtime.txn.metadata.TransactionMetadata`.
"""

from __future__ import annotations

import enum

from common.errors import InvalidTxnStateError

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # Short.MaxValue


class TransactionState(enum.Enum):
    """A coordinator-side transaction state; the value is Kafka's state id."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def state_name(self) -> str:
        """Return Kafka's name of the state (``PREPARE_COMMIT`` -> ``PrepareCommit``)."""
        return "".join(word.capitalize() for word in self.name.split("_"))

    @property
    def valid_previous_states(self) -> frozenset[TransactionState]:
        """Return the states this state may be entered from."""
        return _VALID_PREVIOUS[self]

    @property
    def is_expiration_allowed(self) -> bool:
        """Return whether an idle transactional id in this state may expire."""
        return self in _RESTING

    @property
    def is_prepare(self) -> bool:
        """Return whether the state is a decided-but-unfinished ``Prepare*`` state."""
        return self in _PREPARE

    @property
    def is_complete_or_empty(self) -> bool:
        """Return whether a new transaction may begin from this state."""
        return self in _RESTING

    @classmethod
    def from_name(cls, name: str) -> TransactionState:
        """Return the state with Kafka's name ``name``; raise ``ValueError`` if unknown."""
        for state in cls:
            if state.state_name == name:
                return state
        known = [state.state_name for state in cls]
        raise ValueError(f"Unknown transaction state {name!r}; known: {known}")


_S = TransactionState
_RESTING = frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})
_PREPARE = frozenset({_S.PREPARE_COMMIT, _S.PREPARE_ABORT, _S.PREPARE_EPOCH_FENCE})
_VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    _S.EMPTY: _RESTING,
    _S.ONGOING: _RESTING | {_S.ONGOING},
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: _RESTING,
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}


def check_transition(current: TransactionState, target: TransactionState) -> None:
    """Check that Kafka's state machine allows ``current -> target``.

    Raises :class:`InvalidTxnStateError` naming both states if it does not.
    """
    allowed = target.valid_previous_states
    if current not in allowed:
        names = ", ".join(sorted(s.state_name for s in allowed))
        raise InvalidTxnStateError(
            f"Cannot transition transaction state from {current.state_name} to "
            f"{target.state_name} (allowed from: {names})"
        )


def is_epoch_exhausted(epoch: int) -> bool:
    """Return whether no epoch may be handed out after ``epoch`` (Kafka: ``>= MAX - 1``).

    The last epoch, ``MAX_EPOCH``, stays reserved so that the coordinator can always fence.
    """
    return epoch >= MAX_EPOCH - 1


class EpochExhausted(Exception):  # noqa: N818 - a signal to the caller, not an error
    """Signal that the producer's epochs are used up: allocate a new producer id and call
    :meth:`~runtime.txn.metadata.TransactionMetadata.prepare_producer_id_rotation`."""

    def __init__(self, transactional_id: str, producer_id: int, producer_epoch: int) -> None:
        super().__init__(
            f"Producer id {producer_id} of transactional id {transactional_id!r} has "
            f"exhausted its epochs (epoch {producer_epoch}); rotate the producer id"
        )
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
