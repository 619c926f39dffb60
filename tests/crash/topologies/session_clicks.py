"""Clicks per user session: a session-windowed count (inactivity gap 30 s, grace 10 s).

Clicks arrive on ``clicks`` keyed by user, in time order per user; every update of a
session (a merge deletes the sessions it absorbs) goes to ``session-counts`` with the
session's bounds, record by record (no cache), so the output does not depend on where
batches end.
"""

from __future__ import annotations

import random
from datetime import timedelta

from statestores.api import Windowed
from streams.serdes import Serdes
from topology import Materialized, Produced, SessionWindows, StreamsBuilder, Topology

INPUT = "clicks"
OUTPUT = "session-counts"
TOPICS = {INPUT: 2, OUTPUT: 2}
CONFIG = {
    "application.id": "session-clicks",
    "processing.guarantee": "exactly_once_v2",
    "default.key.serde": "string",
    "default.value.serde": "string",
    "cache.max.bytes.buffering": 0,
}
START_MS = 1_735_722_000_000


def session_result(user: Windowed[str], count: int | None) -> tuple[str, str]:
    w = user.window
    return user.key, f"{w.start}-{w.end}:{count}"


def build_topology() -> Topology:
    """Count clicks per user session."""
    b = StreamsBuilder()
    (
        b.stream(INPUT)
        .group_by_key()
        .windowed_by(
            SessionWindows.of_inactivity_gap_and_grace(timedelta(seconds=30), timedelta(seconds=10))
        )
        .count(Materialized.as_("session-counts-store"))
        .to_stream()
        .map(session_result)
        .to(OUTPUT, Produced.with_(Serdes.String(), Serdes.String()))
    )
    return b.build()


def generate(n: int, seed: int = 7) -> list[tuple[str, str, int]]:
    """``n`` clicks of 6 users, each user's in time order, with gaps that open new
    sessions and clicks that bridge two sessions (a merge)."""
    rng = random.Random(seed)
    clocks = {f"user-{u}": START_MS for u in range(6)}
    out = []
    for _ in range(n):
        user = rng.choice(sorted(clocks))
        clocks[user] += rng.choice([2_000, 5_000, 12_000, 45_000])
        out.append((user, "click", clocks[user]))
    return out
