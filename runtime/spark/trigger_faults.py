"""Test hooks of a stream thread's trigger: late and lost wake-ups, for liveness tests.

A busy machine makes every step of a wake-up late (the trigger's threads, Spark's stream
execution thread, the batch's start); a bug loses one. Both can be made to happen:

* ``STREAMS_TRIGGER_DELAY_MS=<max>[:<seed>]`` (or :func:`arm_delays`): each wake-up, each
  round of the trigger's log-end watch and each batch's start and end first sleep a random
  0 to ``max`` ms;
* ``STREAMS_TRIGGER_DROP=<reason>[,<reason>...]`` (or :func:`drop`): the wake-ups asked for
  these reasons are dropped (``records``: a topic's log end moved; ``behind``: a batch left
  records behind; ``alarm``: a wall-clock punctuator or a commit fell due; ``rebalance``:
  the group rebalances; ``watchdog``: the thread's stall watchdog; ``*``: all).

Never set either outside tests.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterable

ENV_DELAY = "STREAMS_TRIGGER_DELAY_MS"
ENV_DROP = "STREAMS_TRIGGER_DROP"
REASONS = ("records", "behind", "alarm", "rebalance", "watchdog")


class _Hooks:
    __slots__ = ("dropped", "lock", "max_ms", "rng")

    def __init__(self) -> None:
        self.max_ms = 0
        self.rng = random.Random()
        self.dropped: frozenset[str] = frozenset()
        self.lock = threading.Lock()


_HOOKS = _Hooks()


def arm_delays(max_ms: int, seed: int | None = None) -> None:
    """Sleep a random 0 to ``max_ms`` ms at each hook point (0: never)."""
    with _HOOKS.lock:
        _HOOKS.max_ms = max_ms
        _HOOKS.rng = random.Random(seed)


def drop(reasons: Iterable[str]) -> None:
    """Drop the wake-ups asked for ``reasons`` (see the module).

    Raises:
        ValueError: an unknown reason (the known ones are named).
    """
    wanted = frozenset(reasons)
    unknown = sorted(wanted - {*REASONS, "*"})
    if unknown:
        raise ValueError(f"unknown wake-up reasons {unknown}; known: {', '.join(REASONS)}, *")
    _HOOKS.dropped = wanted


def disarm() -> None:
    """No delays, no dropped wake-ups."""
    arm_delays(0)
    drop(())


def delay() -> None:
    """Sleep as armed (nothing when not armed)."""
    if _HOOKS.max_ms <= 0:
        return
    with _HOOKS.lock:
        seconds = _HOOKS.rng.uniform(0, _HOOKS.max_ms) / 1000
    time.sleep(seconds)


def dropped(reason: str) -> bool:
    """Whether a wake-up asked for ``reason`` is to be lost."""
    wanted = _HOOKS.dropped
    return bool(wanted) and (reason in wanted or "*" in wanted)


def _from_env() -> None:
    text = os.environ.get(ENV_DELAY, "").strip()
    if text:
        max_ms, _, seed = text.partition(":")
        arm_delays(int(max_ms), int(seed) if seed else None)
    reasons = [r.strip() for r in os.environ.get(ENV_DROP, "").split(",") if r.strip()]
    if reasons:
        drop(reasons)


_from_env()
