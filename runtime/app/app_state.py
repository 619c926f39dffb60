"""The lifecycle of a streams application (Kafka's ``KafkaStreams.State``).

::

    CREATED ──► REBALANCING ◄──► RUNNING
       │             │              │
       ▼             ▼              ▼
    PENDING_SHUTDOWN ◄──────────────┘ ──► NOT_RUNNING
                     REBALANCING / RUNNING ──► PENDING_ERROR ──► ERROR

An illegal transition raises :class:`IllegalStateTransitionError` naming both states.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable

from common.errors import StreamsError

log = logging.getLogger(__name__)


class IllegalStateTransitionError(StreamsError):
    """An application was asked to move between two states that are not linked.

    A bug in the caller (e.g. ``start()`` twice); the message names both states.
    """


class AppState(enum.Enum):
    """Where a streams application is in its life."""

    CREATED = "CREATED"
    REBALANCING = "REBALANCING"
    RUNNING = "RUNNING"
    PENDING_SHUTDOWN = "PENDING_SHUTDOWN"
    NOT_RUNNING = "NOT_RUNNING"
    PENDING_ERROR = "PENDING_ERROR"
    ERROR = "ERROR"

    def is_running_or_rebalancing(self) -> bool:
        """Return whether the application processes (or is about to)."""
        return self in (AppState.RUNNING, AppState.REBALANCING)

    def is_terminal(self) -> bool:
        """Return whether nothing more will happen (NOT_RUNNING or ERROR)."""
        return self in (AppState.NOT_RUNNING, AppState.ERROR)


_S = AppState
#: Each state's allowed next states, as Kafka's ``KafkaStreams.State``.
TRANSITIONS: dict[AppState, frozenset[AppState]] = {
    _S.CREATED: frozenset({_S.REBALANCING, _S.PENDING_SHUTDOWN}),
    _S.REBALANCING: frozenset({_S.RUNNING, _S.PENDING_SHUTDOWN, _S.PENDING_ERROR}),
    _S.RUNNING: frozenset({_S.REBALANCING, _S.RUNNING, _S.PENDING_SHUTDOWN, _S.PENDING_ERROR}),
    _S.PENDING_SHUTDOWN: frozenset({_S.NOT_RUNNING}),
    _S.NOT_RUNNING: frozenset(),
    _S.PENDING_ERROR: frozenset({_S.ERROR}),
    _S.ERROR: frozenset(),
}

StateListener = Callable[[AppState, AppState], None]


class AppStateMachine:
    """Holds the state, checks transitions, tells the listener (new, old)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._state = AppState.CREATED
        self._lock = threading.Condition()
        self.listener: StateListener | None = None
        #: The runtime's own observer of every change (called before the user's listener).
        self.observer: StateListener | None = None

    @property
    def state(self) -> AppState:
        return self._state

    def transit(self, new: AppState) -> None:
        """Move to ``new``.

        Raises:
            IllegalStateTransitionError: ``new`` does not follow the current state.
        """
        with self._lock:
            old = self._state
            if new not in TRANSITIONS[old]:
                raise IllegalStateTransitionError(
                    f"[app {self.name}] illegal state transition from {old.value} to {new.value}"
                )
            self._state = new
            self._lock.notify_all()
        log.info("[app %s] state %s -> %s", self.name, old.value, new.value)
        if self.observer is not None and new is not old:
            try:
                self.observer(new, old)
            except Exception:  # never breaks the app either
                log.warning("[app %s] state observer failed", self.name, exc_info=True)
        if self.listener is not None and new is not old:
            try:
                self.listener(new, old)
            except Exception:  # a listener must never break the app
                log.exception("[app %s] state listener failed", self.name)

    def wait_for(self, predicate: Callable[[AppState], bool], timeout: float | None) -> bool:
        """Wait until ``predicate(state)``; return whether it held before ``timeout`` s."""
        with self._lock:
            return self._lock.wait_for(lambda: predicate(self._state), timeout)


class StreamThreadExceptionResponse(enum.Enum):
    """What an uncaught exception handler asks for (Kafka's
    ``StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse``)."""

    REPLACE_THREAD = "REPLACE_THREAD"
    SHUTDOWN_CLIENT = "SHUTDOWN_CLIENT"
    SHUTDOWN_APPLICATION = "SHUTDOWN_APPLICATION"
