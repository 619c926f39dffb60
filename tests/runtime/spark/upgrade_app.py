"""Word-count topologies in versions, to test topology upgrades; run one until idle in a
process of its own (a crash test kills it at the fault point ``STREAMS_FAULT_POINT``).

    python -m tests.runtime.spark.upgrade_app ROOT STATE_DIR VERSION

``unnamed`` counts words with generated names; ``unnamed-filtered`` inserts a filter before
the count (every generated name after it moves); ``named`` and ``named-filtered`` are the
same with their stateful operators named; ``migrated`` keeps its counts in a store of
another name, seeded from ``named``'s by a migration that upper-cases every word;
``kept`` keeps ``named``'s counts in a store renamed ``tallies``; ``initial=PATH`` is
``named`` with its counts loaded first from a Delta table.
"""

from __future__ import annotations

import sys
from typing import Any

from common.serdes import Serdes
from runtime.app.app import StreamsApp
from runtime.app.initial_state import InitialState
from runtime.app.upgrades import StateUpgrade
from tests.runtime.spark.helpers import eos_config
from topology import Grouped, Materialized, Produced, StreamsBuilder

S, L = Serdes.String(), Serdes.Long()
APP = "upgrade-wc"


def word_count(version: str) -> Any:
    """The topology of ``version`` (see the module)."""
    b = StreamsBuilder()
    words = b.stream("lines").flat_map_values(str.split)
    if version.endswith("filtered"):
        words = words.filter(lambda _k, w: bool(w))
    if version == "migrated":
        words = words.map_values(str.upper)
    named = version != "unnamed" and not version.startswith("unnamed")
    grouped = words.group_by(lambda _k, w: w, Grouped.as_("by-word") if named else None)
    store = {"named": "counts", "migrated": "counts-upper", "kept": "tallies"}.get(
        version.removesuffix("-filtered")
    )
    counts = grouped.count(Materialized.as_(store) if store else None)
    counts.to_stream().to("counts-out", Produced.with_(S, L))
    return b.build()


def upgrades(version: str) -> list[StateUpgrade]:
    """What a start of ``version`` says of the stores it no longer has."""
    if version == "kept":
        return [StateUpgrade.keep("counts", "tallies")]
    if version != "migrated":
        return []
    return [StateUpgrade.migrate("counts", "counts-upper", lambda k, v: (k.upper(), v))]


def config(root: str, state_dir: str) -> dict[str, Any]:
    return eos_config(APP, root, state_dir)


def run(root: str, state_dir: str, version: str, spark: Any = None) -> None:
    """Run ``version`` until idle (``initial=PATH``: ``named``, its store seeded from the
    Delta table at PATH, columns ``word`` and ``count``)."""
    initial = {}
    if version.startswith("initial="):
        table = version.removeprefix("initial=")
        version, initial = "named", {"counts": InitialState.delta(table, key="word", value="count")}
    app = StreamsApp(
        word_count(version),
        config(root, state_dir),
        spark=spark,
        upgrades=upgrades(version),
        initial_state=initial,
    )
    app.run_until_idle()


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2], sys.argv[3])
