"""More emit-on-window-close halves (KIP-825, ``EmitStrategy.ON_WINDOW_CLOSE``) of Kafka's
time-window tests, beside ``test_emit_on_window_close.py``: ``KStreamWindowAggregateTest``
(``shouldEmitFromLastEmitTime``; its ``testJoin``, which reads a closing table's store as
its windows expire, is in ``test_window_store_expiry.py``).

Each window goes out once, when stream time passes its end plus grace, with its final
aggregate; a closing node keeps the last window close it emitted in its window store's
own metadata, so a node rebuilt on the same state (Kafka: a new processor on the same
store and processor metadata) emits nothing twice.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.conftest import S
from topology import EmitStrategy, Grouped, Materialized, Produced, StreamsBuilder
from topology.api.windowed_serdes import WindowedSerdes
from topology.api.windows import TimeWindows

CLOSE = EmitStrategy.on_window_close()
DAY = 24 * 60 * 60 * 1000
WINDOWED = WindowedSerdes.time_windowed_serde_from(S, 10)
Rows = list[tuple[str, str, int]]
CACHING = pytest.mark.parametrize("caching", [True, False], ids=["cache", "no-cache"])


def _concat(key: str, value: str, agg: str) -> str:
    """Kafka's ``MockAggregator.TOSTRING_ADDER`` (from ``MockInitializer.STRING_INIT``)."""
    return f"{agg}+{value}"


def _cache(mat: Materialized, caching: bool) -> Materialized:
    return mat.with_caching_enabled() if caching else mat.with_caching_disabled()


def _closing_table(b: StreamsBuilder, topic: str, windows: TimeWindows, mat: Materialized) -> Any:
    return (
        b.stream(topic)
        .group_by_key(Grouped.with_(S, S))
        .windowed_by(windows)
        .emit_strategy(CLOSE)
        .aggregate(lambda: "0", _concat, mat.with_value_serde(S))
    )


def _pipe(d: Any, records: Sequence[tuple[str, str, int]], topic: str = "topic") -> None:
    i = d.create_input_topic(topic, S, S)
    for key, value, ts in records:
        i.pipe_input(key, value, ts)


def _read(d: Any, topic: str = "output") -> Rows:
    records = d.create_output_topic(topic, WINDOWED, S).read_records_to_list()
    return [(str(r.key), r.value, r.timestamp) for r in records]


# -- KStreamWindowAggregateTest ---------------------------------------------------------------


def _grace5(drive: Any, caching: bool) -> Any:
    """The processor scenarios' node: size 10, advance 5, grace 5, on Kafka's store of
    those scenarios (``getWindowStore``: the time-ordered store, retention one day)."""
    b = StreamsBuilder()
    windows = TimeWindows.of_size_and_grace(10, 5).advance_by(5)
    mat = _cache(Materialized.as_("dummy-store-name"), caching).with_retention(DAY)
    table = _closing_table(b, "topic", windows, mat)
    table.to_stream().to("output", Produced.with_(WINDOWED, S))
    return drive(b.build(), **{"default.dsl.store": "rocksDB"})


@CACHING
def test_emit_from_last_emit_time(
    drive: Any, caching: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KStreamWindowAggregateTest.shouldEmitFromLastEmitTime (emit final): A@0, B@5 and
    C@15 close ``[0, 10)``; the node is then rebuilt on the same state (the driver closed
    and reopened on its state directory) and D@25 closes ``[5, 15)`` and ``[10, 20)``
    only: the windows emitted before the restart are not emitted again."""
    monkeypatch.setattr(tempfile, "mkdtemp", lambda **_: str(tmp_path))  # one state dir
    first = _grace5(drive, caching)
    _pipe(first, [("A", "1", 0), ("B", "2", 5), ("C", "3", 15)])
    assert _read(first) == [("[A@0/10]", "0+1", 0), ("[B@0/10]", "0+2", 5)]
    with monkeypatch.context() as keep:
        keep.setattr(shutil, "rmtree", lambda *args, **kwargs: None)
        first.close()  # the state directory stays
    assert any(tmp_path.iterdir())
    second = _grace5(drive, caching)
    _pipe(second, [("D", "4", 25)])
    assert _read(second) == [("[B@5/15]", "0+2", 5), ("[C@10/20]", "0+3", 15)]
