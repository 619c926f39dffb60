"""Page views per user in 10 s windows, emitted once per window when it closes (KIP-825).

Views arrive on ``views`` keyed by user, a little out of order; a tumbling window of
10 s with 5 s of grace counts them under ``EmitStrategy.on_window_close()``, so each
window goes to ``final-counts`` once, its final count, when its partition's stream time
passes its end plus grace. The node looks for closed windows after every record (the
internal emit interval set to 0), so the output does not depend on the wall clock; the
last emitted window close is kept in the store, logged and committed with the outputs,
so a run killed between a window's emission and its commit emits it again exactly once.

Each input partition's views end with a *flush* record (a key of its own, far ahead),
which closes the partition's last windows. The flush keys' own windows are left out of
the output: the reference runs one task, whose stream time (past the other partition's
views) closes them, where the real run's task of that partition never sees a later
record.
"""

from __future__ import annotations

import itertools
import random
from datetime import timedelta

from common.serdes import Serdes
from runtime.storage.partitioner import partition_for_key
from statestores.api import Windowed
from topology import (
    EmitStrategy,
    Materialized,
    Produced,
    StreamsBuilder,
    TimeWindows,
    Topology,
)
from topology.api.emit import EMIT_INTERVAL_KEY

INPUT = "views"
OUTPUT = "final-counts"
TOPICS = {INPUT: 2, OUTPUT: 2}
CONFIG = {
    "application.id": "emit-final-count",
    "processing.guarantee": "exactly_once_v2",
    "default.key.serde": "string",
    "default.value.serde": "string",
    "statestore.cache.max.bytes": 0,
    EMIT_INTERVAL_KEY: 0,
}
START_MS = 1_735_722_000_000
USERS = [f"user-{i}" for i in range(6)]
FLUSH = "flush-"


def _key_in(partition: int, prefix: str) -> str:
    """The first key ``<prefix><i>`` that the producer puts in ``partition`` of INPUT."""
    keys = (f"{prefix}{i}" for i in itertools.count())
    return next(k for k in keys if partition_for_key(k.encode(), TOPICS[INPUT]) == partition)


def is_view(user: Windowed[str], count: int) -> bool:
    """Whether a window counts views (not a partition's flush record)."""
    return not user.key.startswith(FLUSH)


def window_result(user: Windowed[str], count: int) -> tuple[str, str]:
    w = user.window
    return user.key, f"{w.start}-{w.end}:{count}"


def build_topology() -> Topology:
    """Count views per user in 10 s windows, each forwarded once when it closes."""
    b = StreamsBuilder()
    (
        b.stream(INPUT)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(timedelta(seconds=10), timedelta(seconds=5)))
        .emit_strategy(EmitStrategy.on_window_close())
        .count(Materialized.as_("final-counts-store"))
        .to_stream()
        .filter(is_view)
        .map(window_result)
        .to(OUTPUT, Produced.with_(Serdes.String(), Serdes.String()))
    )
    return b.build()


def generate(n: int, seed: int = 11) -> list[tuple[str, str, int]]:
    """``20 n`` views of 6 users: ``10 n`` of the users of input partition 0, then, two
    minutes later, ``10 n`` of those of partition 1 (with 3 records per partition and
    batch, a run takes over half a minute: the random kills land while it processes).

    Views are about 2 s apart, each up to 4 s late: within the grace period whatever a
    partition's stream time, so none is dropped, and a task that restarts (its stream time
    starts again from its first record) drops none either; windows close all along, so
    kills fall between emissions and their commits. Each partition's views end with its
    flush record a minute ahead. The partitions' time ranges do not overlap, so both
    orders of the reference (:mod:`streams.crash.check`) are one: every key is compared
    strictly.
    """
    rng = random.Random(seed)
    partitions = TOPICS[INPUT]
    clock = START_MS
    out = []
    for partition in range(partitions):
        users = [u for u in USERS if partition_for_key(u.encode(), partitions) == partition]
        for _ in range(10 * n):
            clock += rng.randint(300, 3_500)
            out.append((rng.choice(users), "view", clock - rng.randint(0, 4_000)))
        clock += 60_000
        out.append((_key_in(partition, FLUSH), "flush", clock))
        clock += 60_000
    return out
