"""Page views per minute: a windowed count with ``suppress``, one final result per window.

Views arrive on ``page-views`` keyed by page, slightly out of order (as from browsers).
They are counted per page in tumbling one-minute windows that accept records up to
``GRACE`` late (RocksDB window store ``pageview-counts``); ``suppress(until_window_closes)``
holds each window's running count back (in a buffer whose changelog makes it survive
restarts) and emits it once, when stream time has passed the window's end plus the grace
period, to ``pageview-counts-per-minute``::

    streams-eos run examples/pageviews.py --generate 5000 --until-idle

As in Kafka Streams, stream time is kept per task (per partition): a window closes when a
later view of a page *in the same partition* arrives. A view later than the grace period
is dropped. The generator ends with one view of every page, so every partition's stream
time reaches the end of the data and the same windows close everywhere.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from statestores.api import Windowed
from streams.serdes import Serdes
from topology import (
    BufferConfig,
    Materialized,
    Produced,
    StreamsBuilder,
    Suppressed,
    TimeWindows,
    Topology,
)

INPUT = "page-views"
OUTPUT = "pageview-counts-per-minute"
STORE = "pageview-counts"
TOPICS = {INPUT: 4, OUTPUT: 4}

CONFIG = {
    "application.id": "pageviews",
    "processing.guarantee": "exactly_once_v2",
    "default.key.serde": "string",
    "default.value.serde": "json",
}

WINDOW = timedelta(minutes=1)
GRACE = timedelta(seconds=10)
PAGES = ["/", "/about", "/blog", "/cart", "/checkout", "/docs", "/pricing", "/search"]
#: How many times likelier a view is for each page.
WEIGHTS = [10, 1, 4, 3, 2, 5, 3, 6]
START_MS = 1_735_722_000_000  # 2025-01-01T09:00:00Z


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def window_result(page: Windowed[str], views: int) -> tuple[str, dict[str, Any]]:
    """The output record of a closed window: keyed by page, the window and its count."""
    window = page.window
    value = {
        "page": page.key,
        "window_start": _iso(window.start),
        "window_end": _iso(window.end),
        "views": views,
    }
    return page.key, value


def build_topology() -> Topology:
    """Count views per page and minute; emit each minute's final count once."""
    builder = StreamsBuilder()
    (
        builder.stream(INPUT)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(WINDOW, GRACE))
        .count(Materialized.as_(STORE))
        .suppress(
            Suppressed.until_window_closes(BufferConfig.unbounded()).with_name("final-counts")
        )
        .to_stream()
        .map(window_result)
        .to(OUTPUT, Produced.with_(Serdes.String(), Serdes.Json()))
    )
    return builder.build()


def generate(n: int, seed: int = 42) -> list[tuple[str, dict[str, Any], int]]:
    """Return ``n`` views ``(page, view, timestamp)``, about one a second, each up to 5 s
    late (within the grace period); the last ``len(PAGES)`` are one view of every page at
    the final time, so that every partition's stream time ends there."""
    rng = random.Random(seed)
    clock = START_MS + 5_000
    views = []
    for i in range(n):
        tail = i >= n - len(PAGES)
        if tail:
            page, timestamp = PAGES[i - (n - len(PAGES))], clock
        else:
            clock += rng.randint(200, 1_800)
            page = rng.choices(PAGES, WEIGHTS)[0]
            timestamp = clock - rng.randint(0, 5_000)
        view = {"user": f"user-{rng.randint(1, 150):03d}", "page": page}
        views.append((page, view, timestamp))
    return views


if __name__ == "__main__":
    import sys

    from streams.cli.run import main_for

    sys.exit(main_for(__file__))
