"""The crash harness without Spark: kill plans, input files, comparisons, the report."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from common.config import StreamsConfig
from runtime.storage.partitioner import partition_for_key
from streams.crash.check import OutRecord, compare_outputs, compute_reference
from streams.crash.harness import BASE_TIMESTAMP, CrashTest, CrashTestError, load_jsonl
from streams.crash.inputs import InputRecord
from streams.crash.plan import CrashReport, KillEvent, RunRecord, fault_points, plan_kills
from tests.crash.conftest import example
from topology import StreamsBuilder


def test_fault_points_cover_every_participant() -> None:
    assert fault_points(2) == [
        "before_prepare",
        "after_prepare",
        "after_participant_1",
        "after_participant_2",
        "before_complete",
        "after_complete",
    ]


def test_a_plan_spreads_its_kills_over_every_kind_and_every_fault_point() -> None:
    points = fault_points(4)
    plan = plan_kills(50, seed=3, guarantee="exactly_once_v2", points=points)
    kinds = Counter(k.kind for k in plan)
    assert kinds["fault"] == 25 and kinds["random"] > 0 and kinds["commit"] > 0
    assert {k.point for k in plan if k.kind == "fault"} == set(points)
    assert plan == plan_kills(50, seed=3, guarantee="exactly_once_v2", points=points)
    five = plan_kills(5, seed=0, guarantee="exactly_once_v2", points=points)
    assert [k.kind for k in five] == ["fault", "random", "fault", "commit", "fault"]


def test_at_least_once_has_one_fault_point_before_its_positions_commit() -> None:
    points = fault_points(3, "at_least_once")
    assert points == ["before_offsets_commit"]
    plan = plan_kills(6, seed=1, guarantee="at_least_once", points=points)
    assert {k.kind for k in plan} == {"fault", "commit", "random"}
    assert {k.point for k in plan if k.kind == "fault"} == {"before_offsets_commit"}
    with pytest.raises(ValueError, match="need fault points"):
        plan_kills(1, seed=1, guarantee="at_least_once", points=[], kinds=("fault",))


def test_an_input_file_is_one_json_object_per_line(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(
        '{"key": "k1", "value": "a b"}\n'
        "\n"
        '{"key": null, "value": "c", "timestamp": 5, "headers": {"h": "x"}}\n'
    )
    first, second = load_jsonl("lines", path)
    assert (first.key, first.value, first.timestamp) == ("k1", "a b", BASE_TIMESTAMP)
    assert (second.key, second.timestamp, second.headers) == (None, 5, (("h", "x"),))
    assert second.raw() == (None, b"c", [("h", b"x")])


@pytest.mark.parametrize(
    ("line", "what"),
    [
        ('{"key": 1, "value": "x"}', "key is int"),
        ('{"key": "k"}', "not an object with a value"),
        ('{"value": "x", "timestamp": "soon"}', "timestamp is not an integer"),
        ("[1, 2]", "not an object"),
        ("{nope", "Expecting property name"),
    ],
)
def test_a_bad_input_line_is_named(tmp_path: Path, line: str, what: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"key": "ok", "value": "ok"}\n' + line + "\n")
    with pytest.raises(CrashTestError, match=rf"bad.jsonl:2: .*{what}"):
        load_jsonl("t", path)
    with pytest.raises(CrashTestError, match="cannot be read"):
        load_jsonl("t", tmp_path / "missing.jsonl")


def _show(topic: str, key: bytes | None, value: bytes | None) -> tuple[str, str]:
    return repr(key), repr(value)


def _home(key: bytes, partitions: int = 4) -> int:
    return partition_for_key(key, partitions)


def test_outputs_equal_to_the_reference_pass_whatever_the_interleaving_of_keys() -> None:
    expected = [OutRecord(b"a", b"1"), OutRecord(b"b", b"1"), OutRecord(b"a", b"2")]
    actual: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
    for key, value in [(b"b", b"1"), (b"a", b"1"), (b"a", b"2")]:
        actual.setdefault(_home(key), []).append((key, value))
    check = compare_outputs({"out": expected}, {"out": actual}, {"out": 4}, _show)
    assert check.ok and check.records_out == check.records_expected == 3 and not check.diff


def test_duplicates_losses_misplaced_and_reordered_records_are_counted() -> None:
    a, b, c = b"a", b"b", b"c"
    expected = [OutRecord(a, b"1"), OutRecord(a, b"2"), OutRecord(b, b"1"), OutRecord(c, b"1")]
    expected += [OutRecord(c, b"2")]
    actual: dict[int, list[tuple[bytes | None, bytes | None]]] = {p: [] for p in range(4)}
    actual[_home(a)] += [(a, b"1"), (a, b"2"), (a, b"2")]  # a duplicate
    actual[(_home(b) + 1) % 4] += [(b, b"1")]  # in the wrong partition
    actual[_home(c)] += [(c, b"2"), (c, b"1")]  # out of order
    actual[_home(a)] += [(b"d", b"9")]  # unexpected key: a duplicate too
    check = compare_outputs({"out": expected}, {"out": actual}, {"out": 4}, _show)
    assert (check.duplicates, check.losses, check.misplaced, check.reordered) == (2, 0, 1, 1)
    assert not check.ok
    assert (
        "out key b'a': duplicates/losses; expected [b'1', b'2'] (2) got [b'1', b'2', b'2'] (3)"
        in check.diff
    )
    missing = compare_outputs({"out": expected}, {"out": {}}, {"out": 4}, _show)
    assert missing.losses == 5 and missing.duplicates == 0


def test_the_report_says_what_happened_and_exits_non_zero_on_a_violation() -> None:
    report = CrashReport("app.py", "app", "exactly_once_v2", 7, "/tmp/x", kills_planned=2)
    report.kills = [
        KillEvent(0, "fault", "fault:after_prepare#1", 21.5, "commit"),
        KillEvent(1, "random", "random", 3.2, "startup"),
    ]
    report.runs = [
        RunRecord(0, -9, 21.5, True, None, "run-000.log"),
        RunRecord(1, -9, 3.2, True, None, "run-001.log"),
        RunRecord(2, 0, 30.0, False, 12.0, "run-002.log"),
    ]
    report.records_in, report.records_expected, report.records_out = 10, 20, 20
    assert report.exactly_once and report.exit_code == 0
    assert report.restarts == 2 and report.recovery_p50 == report.recovery_max == 12.0
    text = report.text()
    assert "kills: 2 of 2 planned; restarts: 2" in text
    assert "run 0: fault fault:after_prepare#1 at 21.5s (commit)" in text
    assert "recovery: p50=12.00s max=12.00s" in text and "exactly-once HELD" in text
    report.duplicates, report.diff = 3, ["out key 'a': duplicates/losses; ..."]
    assert report.exit_code == 1 and "exactly-once VIOLATED" in report.text()
    data = json.loads(report.to_json())
    assert data["duplicates"] == 3 and data["exactly_once"] is False
    assert data["recovery_p50_s"] == 12.0 and data["kills"][1]["phase"] == "startup"


def test_keys_fed_from_several_input_partitions_are_not_held_to_one_order() -> None:
    """Records of the output key "all" come from every input partition, so their order
    depends on batching; the per-key word counts after a repartition do not."""
    builder = StreamsBuilder()
    builder.stream("in").select_key(lambda _k, _v: "all").to("out")
    config = StreamsConfig.from_dict(
        {
            "application.id": "loose",
            "topics.root": "memory://unused",
            "default.key.serde": "string",
            "default.value.serde": "string",
        }
    )
    records = [InputRecord("in", f"k{i}", f"v{i}", BASE_TIMESTAMP + i) for i in range(20)]
    ref = compute_reference(builder.build(), config, records, {"out": 4}, {"in": 4})
    assert ref.unordered["out"] == {b"all"} and ref.unstable["out"] == set()
    shuffled = {_home(b"all"): [(b"all", f"v{i}".encode()) for i in reversed(range(20))]}
    check = compare_outputs(
        ref.outputs, {"out": shuffled}, {"out": 4}, _show, unordered=ref.unordered
    )
    assert check.ok and check.unordered_keys == 1
    strict = compare_outputs(ref.outputs, {"out": shuffled}, {"out": 4}, _show)
    assert strict.reordered == 1


def test_keys_whose_values_depend_on_batching_are_compared_by_count() -> None:
    expected = [OutRecord(b"a", b"joined"), OutRecord(b"a", b"joined")]
    actual = {_home(b"a"): [(b"a", b"guest"), (b"a", b"joined")]}
    loose = compare_outputs(
        {"out": expected}, {"out": actual}, {"out": 4}, _show, unstable={"out": {b"a"}}
    )
    assert loose.ok and loose.unstable_keys == 1
    actual[_home(b"a")].append((b"a", b"joined"))
    assert (
        compare_outputs(
            {"out": expected}, {"out": actual}, {"out": 4}, _show, unstable={"out": {b"a"}}
        ).duplicates
        == 1
    )


def test_a_workdir_holding_a_crash_test_is_refused(tmp_path: Path) -> None:
    (tmp_path / "root" / "topics").mkdir(parents=True)
    test = CrashTest(example("wordcount"), generate=3, workdir=tmp_path)
    with pytest.raises(CrashTestError, match="give a new --workdir"):
        test.setup()
    with pytest.raises(CrashTestError, match="no input"):
        CrashTest(example("wordcount"), workdir=tmp_path / "other")
