"""Session windowed aggregations through the TopologyTestDriver, with exact outputs
(merging with the tombstones Kafka forwards; Kafka's
``KStreamSessionWindowAggregateProcessorTest`` cases)."""

from __future__ import annotations

from typing import Any

from statestores.api import Window, Windowed
from tests.topology.conftest import L, S
from topology import Grouped, Materialized, Produced, StreamsBuilder
from topology.api.windowed_serdes import WindowedSerdes
from topology.api.windows import SessionWindows

SESSION = WindowedSerdes.session_windowed_serde_from(S)


def _count(drive: Any, windows: SessionWindows, caching: bool = False) -> Any:
    b = StreamsBuilder()
    mat = Materialized.as_("sessions")
    (
        b.stream("in")
        .group_by_key(Grouped.with_(S, S))
        .windowed_by(windows)
        .count(mat if caching else mat.with_caching_disabled())
        .to_stream()
        .to("out", Produced.with_(SESSION, L))
    )
    return drive(b.build())


def _out(d: Any, value_serde: Any = L) -> list[tuple[str, Any, int]]:
    records = d.create_output_topic("out", SESSION, value_serde).read_records_to_list()
    return [(str(r.key), r.value, r.timestamp) for r in records]


def test_forward_removed_sessions_when_merging(drive: Any) -> None:
    """Kafka's ``shouldImmediatelyForwardRemovedSessionsWhenMerging``."""
    d = _count(drive, SessionWindows.of_inactivity_gap_with_no_grace(300_000))
    i = d.create_input_topic("in", S, S)
    i.pipe_input("a", "1", 0)
    i.pipe_input("a", "1", 5)
    assert _out(d) == [("[a@0/0]", 1, 0), ("[a@0/0]", None, 0), ("[a@0/5]", 2, 5)]


def test_record_bridging_two_sessions_merges_them(drive: Any) -> None:
    d = _count(drive, SessionWindows.of_inactivity_gap_and_grace(10, 20))
    i = d.create_input_topic("in", S, S)
    i.pipe_input("k", "v", 0)
    i.pipe_input("k", "v", 20)  # more than the gap after 0: a second session
    i.pipe_input("k", "v", 10)  # within the gap of both (and within grace): bridges them
    assert _out(d) == [
        ("[k@0/0]", 1, 0),
        ("[k@20/20]", 1, 20),
        ("[k@0/0]", None, 0),  # tombstones of the merged sessions, stamped with their end
        ("[k@20/20]", None, 20),
        ("[k@0/20]", 3, 20),
    ]
    store = d.get_session_store("sessions")
    assert list(store.fetch("k")) == [(Windowed("k", Window(0, 20)), 3)]


def test_multiple_sessions_and_merging(drive: Any) -> None:
    """Kafka's ``shouldHandleMultipleSessionsAndMerging`` inputs, every update forwarded."""
    gap = 300_000
    d = _count(drive, SessionWindows.of_inactivity_gap_with_no_grace(gap))
    i = d.create_input_topic("in", S, S)
    for key, ts in [
        ("a", 0), ("b", 0), ("c", 0), ("d", 0), ("d", gap // 2), ("a", gap + 1),
        ("b", gap + 1), ("a", gap + 1 + gap // 2), ("c", gap + 1 + gap // 2),
    ]:  # fmt: skip
        i.pipe_input(key, "1", ts)
    g1, g2 = gap + 1, gap + 1 + gap // 2
    assert _out(d) == [
        ("[a@0/0]", 1, 0),
        ("[b@0/0]", 1, 0),
        ("[c@0/0]", 1, 0),
        ("[d@0/0]", 1, 0),
        ("[d@0/0]", None, 0),
        (f"[d@0/{gap // 2}]", 2, gap // 2),
        (f"[a@{g1}/{g1}]", 1, g1),
        (f"[b@{g1}/{g1}]", 1, g1),
        (f"[a@{g1}/{g1}]", None, g1),
        (f"[a@{g1}/{g2}]", 2, g2),
        (f"[c@{g2}/{g2}]", 1, g2),
    ]


def test_caching_forwards_one_update_per_session_and_commit(drive: Any) -> None:
    d = _count(drive, SessionWindows.of_inactivity_gap_with_no_grace(10), caching=True)
    i = d.create_input_topic("in", S, S)
    i.pipe_input("k", "v", 0)
    i.pipe_input("k", "v", 5)  # [0, 0] removed and [0, 5] written before the commit
    i.pipe_input("k", "v", 3)  # inside [0, 5]: removed and re-put, one update
    assert _out(d) == [
        ("[k@0/0]", 1, 0),
        ("[k@0/0]", None, 0),
        ("[k@0/5]", 2, 5),
        ("[k@0/5]", 3, 5),
    ]


def test_late_session_records_dropped_after_gap_plus_grace(drive: Any) -> None:
    """Kafka's ``shouldLogAndMeterWhenSkippingLateRecordWithNonzeroGrace``: a session
    closes once stream time passes its end + gap + grace."""
    d = _count(drive, SessionWindows.of_inactivity_gap_and_grace(10, 1))
    i = d.create_input_topic("in", S, S)
    i.pipe_input("dummy", "v", 0)
    i.pipe_input("OnTime1", "v", 0)
    i.pipe_input("dummy", "v", 11)
    i.pipe_input("OnTime2", "v", 0)  # 0 + 10 + 1 >= 11: still open
    i.pipe_input("dummy", "v", 12)
    i.pipe_input("Late1", "v", 0)  # 0 + 10 + 1 < 12: dropped
    assert _out(d) == [
        ("[dummy@0/0]", 1, 0),
        ("[OnTime1@0/0]", 1, 0),
        ("[dummy@11/11]", 1, 11),  # 11 is more than the gap after [0, 0]: a new session
        ("[OnTime2@0/0]", 1, 0),
        ("[dummy@11/11]", None, 11),
        ("[dummy@11/12]", 2, 12),
    ]
    assert d.metrics().total("dropped-records-total") == 1


def test_session_reduce_and_aggregate_with_merger(drive: Any) -> None:
    b = StreamsBuilder()
    grouped = b.stream("in").group_by_key(Grouped.with_(S, S))
    windows = SessionWindows.of_inactivity_gap_and_grace(10, 20)
    (
        grouped.windowed_by(windows)
        .reduce(lambda a, v: a + v, Materialized.with_(S, S).with_caching_disabled())
        .to_stream()
        .to("out", Produced.with_(SESSION, S))
    )
    (
        grouped.windowed_by(windows)
        .aggregate(
            lambda: "",
            lambda k, v, agg: agg + v,
            lambda k, a, b: f"({a}|{b})",
            Materialized.with_(S, S).with_caching_disabled(),
        )
        .to_stream()
        .to("agg", Produced.with_(SESSION, S))
    )
    d = drive(b.build())
    i = d.create_input_topic("in", S, S)
    for value, ts in [("x", 0), ("y", 20), ("z", 10)]:
        i.pipe_input("k", value, ts)
    assert _out(d, S)[-1] == ("[k@0/20]", "xyz", 20)
    records = d.create_output_topic("agg", SESSION, S).read_records_to_list()
    # the initializer merged with each found session in turn, then the record aggregated
    assert (str(records[-1].key), records[-1].value) == ("[k@0/20]", "((|x)|y)z")
