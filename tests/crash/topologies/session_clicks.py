"""Clicks per user session: a session-windowed count (inactivity gap 30 s, grace 10 s).

Clicks arrive on ``clicks`` keyed by user, a little out of order; every update of a
session (a merge deletes the sessions it absorbs) goes to ``session-counts`` with the
session's bounds, record by record (no cache), so the output does not depend on where
batches end.
"""

from __future__ import annotations

import random
from datetime import timedelta

from common.serdes import Serdes
from statestores.api import Windowed
from topology import Materialized, Produced, SessionWindows, StreamsBuilder, Topology

INPUT = "clicks"
OUTPUT = "session-counts"
TOPICS = {INPUT: 2, OUTPUT: 2}
CONFIG = {
    "application.id": "session-clicks",
    "processing.guarantee": "exactly_once_v2",
    "default.key.serde": "string",
    "default.value.serde": "string",
    "statestore.cache.max.bytes": 0,
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
    """``24 n`` clicks of 6 users (enough to run through five kills), about 3 s apart
    overall, each up to 5 s late (within the grace period, whatever a partition's stream
    time: nothing is dropped), so sessions open, grow, close after a user's 30 s pause, and
    merge when a late click bridges two."""
    rng = random.Random(seed)
    clock = START_MS
    out = []
    for _ in range(24 * n):
        clock += rng.randint(500, 6_000)
        user = f"user-{rng.randrange(6)}"
        out.append((user, "click", clock - rng.randint(0, 5_000)))
    return out
