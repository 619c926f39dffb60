"""``streams-eos groups`` and the reset planning under it, on real Delta topics.

The fixture topics have known bounds: ``in`` partition 0 holds offsets 2..9 (its first file
was removed, so log-start is 2), partition 1 offsets 0..4, partition 2 offsets 0..2; the
group ``g`` committed ``in-0 = 5``, ``in-1 = 3`` and ``other-0 = 1``, nothing for ``in-2``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from common.errors import InvalidPartitionsError, UnknownTopicError
from runtime.group.assignors import Subscription, assignor_for
from runtime.group.coordinator import GroupCoordinator
from runtime.group.member import GroupMember
from runtime.group.reset import (
    ByDuration,
    FromFile,
    InvalidResetError,
    ResetPlanEntry,
    ShiftBy,
    ToCurrent,
    ToDatetime,
    ToEarliest,
    ToLatest,
    ToOffset,
    TopicScope,
    apply_reset,
    committed_offsets,
    delete_offsets,
    export_csv,
    groups_with_offsets,
    parse_csv,
    parse_datetime,
    parse_duration,
    plan_reset,
)
from runtime.storage.producer import Producer
from runtime.storage.topics import TopicAdmin
from runtime.txn.offsets import OFFSETS_TOPIC, OffsetsStore
from streams.cli import main

IN = [TopicScope("in")]


@pytest.fixture
def topics(admin: TopicAdmin, producer: Producer) -> TopicAdmin:
    """Create ``in`` (3 partitions) and ``other`` (1) and commit ``g``'s offsets."""
    admin.create("in", 3)
    admin.create("other", 1)
    for _ in range(2):
        producer.send("in", None, b"old", partition=0, timestamp=999)
    producer.flush()
    DeltaTable(admin.table_uri("in")).delete("partition = 0 AND value = X'6f6c64'")
    for i in range(8):
        producer.send("in", None, b"a%d" % i, partition=0, timestamp=1002 + i)
    for i in range(5):
        producer.send("in", None, b"b%d" % i, partition=1, timestamp=2000 + i)
    for i in range(3):
        producer.send("in", None, b"c%d" % i, partition=2, timestamp=3000 + i)
    for i in range(4):
        producer.send("other", None, b"o%d" % i, partition=0, timestamp=4000 + i)
    producer.flush()
    OffsetsStore(admin).commit("g", {("in", 0): 5, ("in", 1): 3, ("other", 0): 1})
    return admin


def targets(plan: list[ResetPlanEntry]) -> dict[tuple[str, int], int]:
    return {(e.topic, e.partition): e.target for e in plan}


def clamps(plan: list[ResetPlanEntry]) -> dict[tuple[str, int], int]:
    return {(e.topic, e.partition): e.clamped_from for e in plan if e.clamped_from is not None}


# -- planning -------------------------------------------------------------------------------


def test_fixture_bounds(topics: TopicAdmin) -> None:
    desc = topics.describe("in")
    assert [(p.log_start_offset, p.log_end_offset) for p in desc.partitions] == [
        (2, 10),
        (0, 5),
        (0, 3),
    ]


def test_to_earliest_all_topics_covers_the_committed_partitions(topics: TopicAdmin) -> None:
    plan = plan_reset(topics, "g", scope=None, strategy=ToEarliest())
    assert targets(plan) == {("in", 0): 2, ("in", 1): 0, ("other", 0): 0}
    assert [e.current for e in plan] == [5, 3, 1]


def test_to_latest_topic_scope_covers_every_partition(topics: TopicAdmin) -> None:
    plan = plan_reset(topics, "g", scope=IN, strategy=ToLatest())
    assert targets(plan) == {("in", 0): 10, ("in", 1): 5, ("in", 2): 3}
    assert plan[2].current is None


def test_topic_partition_scope(topics: TopicAdmin) -> None:
    plan = plan_reset(
        topics, "g", scope=[TopicScope.parse("in:0,2"), TopicScope("other")], strategy=ToLatest()
    )
    assert targets(plan) == {("in", 0): 10, ("in", 2): 3, ("other", 0): 4}


def test_to_current_without_a_committed_offset(topics: TopicAdmin) -> None:
    kafka = plan_reset(topics, "g", scope=IN, strategy=ToCurrent())
    assert targets(kafka) == {("in", 0): 5, ("in", 1): 3, ("in", 2): 3}  # log-end, as Kafka
    streams = plan_reset(topics, "g", scope=IN, strategy=ToCurrent(), default_position="earliest")
    assert targets(streams)[("in", 2)] == 0


def test_to_offset_clamps_both_ways(topics: TopicAdmin) -> None:
    plan = plan_reset(topics, "g", scope=IN, strategy=ToOffset(4))
    assert targets(plan) == {("in", 0): 4, ("in", 1): 4, ("in", 2): 3}
    assert clamps(plan) == {("in", 2): 4}
    low = plan_reset(topics, "g", scope=IN, strategy=ToOffset(0))
    assert targets(low) == {("in", 0): 2, ("in", 1): 0, ("in", 2): 0}
    assert clamps(low) == {("in", 0): 0}


def test_shift_by_back_and_forth_with_clamping(topics: TopicAdmin) -> None:
    back = plan_reset(topics, "g", scope=[TopicScope.parse("in:0,1")], strategy=ShiftBy(-4))
    assert targets(back) == {("in", 0): 2, ("in", 1): 0}
    assert clamps(back) == {("in", 0): 1, ("in", 1): -1}
    forth = plan_reset(topics, "g", scope=[TopicScope.parse("in:0,1")], strategy=ShiftBy(3))
    assert targets(forth) == {("in", 0): 8, ("in", 1): 5}
    assert clamps(forth) == {("in", 1): 6}


def test_shift_by_a_partition_without_a_committed_offset(topics: TopicAdmin) -> None:
    with pytest.raises(InvalidResetError, match="partition in-2 since there is no current"):
        plan_reset(topics, "g", scope=IN, strategy=ShiftBy(1))
    plan = plan_reset(topics, "g", scope=IN, strategy=ShiftBy(1), default_position="earliest")
    assert targets(plan) == {("in", 0): 6, ("in", 1): 4, ("in", 2): 1}


def test_to_datetime_is_the_first_offset_at_or_after(topics: TopicAdmin) -> None:
    plan = plan_reset(topics, "g", scope=IN, strategy=ToDatetime(1004))
    assert targets(plan) == {("in", 0): 4, ("in", 1): 0, ("in", 2): 0}
    later = parse_datetime("1970-01-01T01:00:02.002+01:00")
    assert later == 2002
    plan = plan_reset(topics, "g", scope=IN, strategy=ToDatetime(later))
    assert targets(plan) == {("in", 0): 10, ("in", 1): 2, ("in", 2): 0}  # none later: log-end


def test_by_duration_counts_back_from_now(topics: TopicAdmin) -> None:
    plan = plan_reset(
        topics, "g", scope=IN, strategy=ByDuration(parse_duration("PT1M")), now_ms=62_003
    )
    assert targets(plan) == {("in", 0): 10, ("in", 1): 3, ("in", 2): 0}


def test_from_file_with_clamping_and_scope_filter(topics: TopicAdmin) -> None:
    offsets = parse_csv("in,0,7\n\nin,2,9\nother,0,2\n")
    plan = plan_reset(topics, "g", scope=None, strategy=FromFile(offsets))
    assert targets(plan) == {("in", 0): 7, ("in", 2): 3, ("other", 0): 2}
    assert clamps(plan) == {("in", 2): 9}
    only_in = plan_reset(topics, "g", scope=IN, strategy=FromFile(offsets))
    assert targets(only_in) == {("in", 0): 7, ("in", 2): 3}


def test_export_then_from_file_gives_the_same_plan_and_offsets(topics: TopicAdmin) -> None:
    plan = plan_reset(topics, "g", scope=IN, strategy=ShiftBy(-2), default_position="latest")
    csv = export_csv(plan)
    assert csv == "in,0,3\nin,1,1\nin,2,1\n"
    again = plan_reset(topics, "g", scope=None, strategy=FromFile(parse_csv(csv)))
    assert targets(again) == targets(plan)
    apply_reset(topics, "g", again)
    assert committed_offsets(TopicAdmin(topics.root), "g") == {
        ("in", 0): 3,
        ("in", 1): 1,
        ("in", 2): 1,
        ("other", 0): 1,
    }


def test_grouped_csv_keeps_the_groups_lines() -> None:
    text = "g,in,0,1\nh,in,0,2\ng,in,1,3\n"
    assert parse_csv(text, "g") == {("in", 0): 1, ("in", 1): 3}
    with pytest.raises(InvalidResetError, match="no lines for group 'x'"):
        parse_csv(text, "x")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("in,0,1\nin,zero,1\n", "line 2 .*must be numbers"),
        ("in,0\n", "line 1 .*is not 'topic,partition,offset'"),
        ("in,0,1\n\nin,0,2\n", "line 3: in-0 is already in the plan"),
        ("in,0,-1\n", "line 1 .*negative"),
    ],
)
def test_bad_csv_lines_are_named(text: str, message: str) -> None:
    with pytest.raises(InvalidResetError, match=message):
        parse_csv(text)


def test_unknown_topic_and_partition_are_named(topics: TopicAdmin) -> None:
    with pytest.raises(UnknownTopicError, match="'nope'"):
        plan_reset(topics, "g", scope=[TopicScope("nope")], strategy=ToEarliest())
    with pytest.raises(
        InvalidPartitionsError, match="partition 3 is not a partition of topic 'in'"
    ):
        plan_reset(topics, "g", scope=[TopicScope.parse("in:1,3")], strategy=ToEarliest())
    with pytest.raises(InvalidPartitionsError, match="partition 5 .*'other'"):
        plan_reset(topics, "g", scope=None, strategy=FromFile({("other", 5): 1}))


def test_datetime_and_duration_formats() -> None:
    assert parse_datetime("2024-08-04T14:30:00.000") == parse_datetime("2024-08-04T14:30:00.000Z")
    utc = parse_datetime("2024-08-04T14:30:00.000Z")
    assert parse_datetime("2024-08-04T16:30:00.000+0200") == utc
    assert parse_datetime("2024-08-04T12:30:00.000-02") == utc
    assert utc == 1_722_781_800_000
    assert parse_duration("PT0H5M0S") == 300_000
    assert parse_duration("P1DT2H") == 93_600_000
    assert parse_duration("PT1.5S") == 1_500
    for bad in ("2024-08-04 14:30:00.000", "2024-13-04T14:30:00.000", "2024-08-04T14:30:00"):
        with pytest.raises(InvalidResetError, match="--to-datetime"):
            parse_datetime(bad)
    for bad in ("P", "PT", "5M", "PT5X", "-PT5M"):
        with pytest.raises(InvalidResetError, match="--by-duration"):
            parse_duration(bad)


def test_delete_offsets_writes_tombstones_in_one_commit(topics: TopicAdmin) -> None:
    OffsetsStore(topics).commit("h", {("in", 0): 9})
    version = DeltaTable(topics.table_uri(OFFSETS_TOPIC)).version()
    assert delete_offsets(topics, "g", [TopicScope("in")]) == [("in", 0), ("in", 1)]
    assert DeltaTable(topics.table_uri(OFFSETS_TOPIC)).version() == version + 1
    fresh = TopicAdmin(topics.root)
    assert committed_offsets(fresh, "g") == {("other", 0): 1}
    assert groups_with_offsets(fresh) == ["g", "h"]
    assert delete_offsets(fresh, "g") == [("other", 0)]
    assert groups_with_offsets(TopicAdmin(topics.root)) == ["h"]


def test_no_offsets_topic_means_no_groups(admin: TopicAdmin) -> None:
    assert groups_with_offsets(admin) == []
    assert committed_offsets(admin, "g") == {}
    assert not admin.exists(OFFSETS_TOPIC)


# -- the command line -----------------------------------------------------------------------


def groups(capsys: pytest.CaptureFixture[str], root: str, *args: str) -> tuple[int, str, str]:
    """Run ``streams-eos groups ARGS`` in-process; return (code, stdout, stderr)."""
    capsys.readouterr()
    code = main(["groups", "--root", root, *args])
    out, err = capsys.readouterr()
    return code, out, err


def table(out: str) -> list[list[str]]:
    """Return the cells of a printed table (header first)."""
    return [[cell.strip() for cell in line.split("\t")] for line in out.splitlines() if line]


def offsets_version(admin: TopicAdmin) -> int:
    return DeltaTable(admin.table_uri(OFFSETS_TOPIC)).version()


def test_list_and_describe_offsets_with_lag(
    topics: TopicAdmin, root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    OffsetsStore(topics).commit("h", {("other", 0): 4})
    code, out, _ = groups(capsys, root, "--list")
    assert (code, out.split()) == (0, ["g", "h"])
    code, out, err = groups(capsys, root, "--describe", "--group", "g")
    assert code == 0
    assert "Consumer group 'g' has no active members." in err
    assert table(out) == [
        [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ],
        ["g", "in", "0", "5", "10", "5", "-", "-", "-"],
        ["g", "in", "1", "3", "5", "2", "-", "-", "-"],
        ["g", "in", "2", "-", "3", "-", "-", "-", "-"],
        ["g", "other", "0", "1", "4", "3", "-", "-", "-"],
    ]
    code, out, _ = groups(capsys, root, "--describe", "--all-groups", "--state")
    rows = table(out)
    assert rows[1] == ["g", "-", "Dead", "0", "0"]
    assert rows[3] == ["h", "-", "Dead", "0", "0"]
    code, out, err = groups(capsys, root, "--describe", "--group", "nope")
    assert code == 1
    assert "consumer group 'nope' does not exist" in err


def test_reset_is_a_dry_run_unless_executed(
    topics: TopicAdmin, root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    version = offsets_version(topics)
    for mode in ((), ("--dry-run",)):
        code, out, err = groups(
            capsys,
            root,
            "--reset-offsets",
            "--group",
            "g",
            "--topic",
            "in",
            "--to-offset",
            "4",
            *mode,
        )
        assert code == 0
        assert table(out) == [
            ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
            ["g", "in", "0", "4"],
            ["g", "in", "1", "4"],
            ["g", "in", "2", "3"],
        ]
        assert (
            "WARN: New offset (4) is higher than latest offset for topic partition in-2. "
            "Value will be set to 3" in err
        )
        assert "Dry run" in err
    assert offsets_version(topics) == version
    assert committed_offsets(TopicAdmin(root), "g") == {("in", 0): 5, ("in", 1): 3, ("other", 0): 1}


def test_execute_is_one_commit_of_the_groups_offsets_partition(
    topics: TopicAdmin, root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    version = offsets_version(topics)
    code, _, err = groups(
        capsys,
        root,
        "--reset-offsets",
        "--group",
        "g",
        "--all-topics",
        "--to-earliest",
        "--execute",
    )
    assert code == 0
    assert "Dry run" not in err
    assert offsets_version(topics) == version + 1
    # The one new commit adds one file, in the group's partition of __consumer_offsets.
    entry = Path(topics.table_path(OFFSETS_TOPIC), "_delta_log", f"{version + 1:020d}.json")
    actions = [json.loads(line) for line in entry.read_text().splitlines()]
    adds = [a["add"] for a in actions if "add" in a]
    partition = OffsetsStore(topics).partition_for("g")
    assert [a["partitionValues"]["partition"] for a in adds] == [str(partition)]
    assert committed_offsets(TopicAdmin(root), "g") == {
        ("in", 0): 2,
        ("in", 1): 0,
        ("other", 0): 0,
    }


def test_export_feeds_from_file(
    topics: TopicAdmin, root: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = groups(
        capsys,
        root,
        "--reset-offsets",
        "--group",
        "g",
        "--topic",
        "in:0,1",
        "--topic",
        "other",
        "--shift-by",
        "-4",
        "--export",
    )
    assert code == 0
    assert out == "in,0,2\nin,1,0\nother,0,0\n"
    assert "New offset (1) is lower than earliest offset for topic partition in-0" in err
    plan = tmp_path / "plan.csv"
    plan.write_text(out)
    code, out2, _ = groups(
        capsys,
        root,
        "--reset-offsets",
        "--group",
        "g",
        "--from-file",
        str(plan),
        "--export",
        "--execute",
    )
    assert (code, out2) == (0, out)
    assert committed_offsets(TopicAdmin(root), "g") == {("in", 0): 2, ("in", 1): 0, ("other", 0): 0}


def test_by_duration_and_to_datetime_from_the_command_line(
    admin: TopicAdmin, producer: Producer, root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    admin.create("recent", 1)
    now = int(time.time() * 1000)
    for age_min in (120, 60, 10):
        producer.send("recent", None, b"x", partition=0, timestamp=now - age_min * 60_000)
    producer.flush()
    OffsetsStore(admin).commit("g", {("recent", 0): 3})
    code, out, _ = groups(
        capsys,
        root,
        "--reset-offsets",
        "--group",
        "g",
        "--all-topics",
        "--by-duration",
        "PT30M",
        "--export",
    )
    assert (code, out) == (0, "recent,0,2\n")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime((now - 90 * 60_000) / 1000))
    code, out, _ = groups(
        capsys,
        root,
        "--reset-offsets",
        "--group",
        "g",
        "--all-topics",
        "--to-datetime",
        stamp,
        "--export",
    )
    assert (code, out) == (0, "recent,0,1\n")


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--group", "g", "--all-topics"], 1, "needs one strategy"),
        (["--group", "g", "--to-earliest"], 1, "needs a scope"),
        (["--group", "g", "--all-topics", "--to-earliest", "--to-latest"], 2, "not allowed with"),
        (["--group", "g", "--topic", "nope", "--to-earliest"], 1, "topic 'nope' does not exist"),
        (["--group", "g", "--topic", "in:7", "--to-earliest"], 1, "partition 7 is not a partition"),
        (["--group", "g", "--topic", "in", "--shift-by", "1"], 1, "partition in-2 since there is"),
        (["--all-topics", "--to-earliest"], 1, "needs --group"),
    ],
)
def test_reset_errors(  # noqa: PLR0917 - fixtures and parameters
    topics: TopicAdmin,
    root: str,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    code: int,
    message: str,
) -> None:
    if code == 2:
        with pytest.raises(SystemExit) as exit_:
            groups(capsys, root, "--reset-offsets", *args)
        assert exit_.value.code == 2
        assert message in capsys.readouterr().err
        return
    got, _, err = groups(capsys, root, "--reset-offsets", *args)
    assert got == 1
    assert len(err.strip().splitlines()) == 1 and message in err


def test_delete_and_delete_offsets(
    topics: TopicAdmin, root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    OffsetsStore(topics).commit("h", {("other", 0): 4})
    code, out, _ = groups(capsys, root, "--delete-offsets", "--group", "g", "--topic", "other")
    assert code == 0
    assert table(out.split("\n", 1)[1]) == [
        ["TOPIC", "PARTITION", "STATUS"],
        ["other", "0", "Successful"],
    ]
    assert committed_offsets(TopicAdmin(root), "g") == {("in", 0): 5, ("in", 1): 3}
    code, out, _ = groups(capsys, root, "--delete", "--group", "g")
    assert (code, out) == (0, "Deletion of requested consumer groups ('g') was successful.\n")
    assert committed_offsets(TopicAdmin(root), "g") == {}
    code, out, _ = groups(capsys, root, "--list")
    assert out.split() == ["h"]
    code, _, err = groups(capsys, root, "--delete", "--group", "g")
    assert code == 1 and "'g' does not exist" in err


def join(root: str, group: str, topic: str) -> GroupMember:
    """Return a member that joined ``group`` (subscribed to ``topic``) for real."""
    coordinator = GroupCoordinator(TopicAdmin(root), initial_rebalance_delay_ms=0)
    member = GroupMember(
        coordinator,
        group,
        assignor=assignor_for("range"),
        subscription=lambda: Subscription((topic,)),
        session_timeout_ms=60_000,
    )
    member.join(30_000)
    return member


def test_an_active_group_is_refused_until_its_member_leaves(
    topics: TopicAdmin, root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    member = join(root, "g", "in")
    reset = ["--reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--execute"]
    code, _, err = groups(capsys, root, *reset)
    assert code == 1
    assert (
        "Assignments can only be reset if the group 'g' is inactive, but the current state "
        "is Stable." in err
    )
    assert "Stop the application's instances" in err
    assert committed_offsets(TopicAdmin(root), "g")[("in", 0)] == 5
    code, _, err = groups(capsys, root, "--delete", "--group", "g")
    assert code == 1 and "not empty" in err

    code, out, _ = groups(capsys, root, "--describe", "--group", "g")
    rows = table(out)
    owner = member.member_id
    assert [r[6] for r in rows[1:]] == [owner, owner, owner, "-"]  # in-0..2 owned, other-0 not
    code, out, _ = groups(capsys, root, "--describe", "--group", "g", "--members", "--assignment")
    rows = table(out)
    assert rows[0][-2:] == ["#PARTITIONS", "ASSIGNMENT"]
    assert rows[1][1] == owner and rows[1][-2:] == ["3", "in(0,1,2)"]
    code, out, _ = groups(capsys, root, "--describe", "--group", "g", "--state")
    assert table(out)[1][1:4] == ["range", "Stable", "1"]
    code, out, _ = groups(capsys, root, "--list", "--state")
    assert ["g", "Stable"] in table(out)

    member.leave()
    code, _, err = groups(capsys, root, *reset)
    assert code == 0, err
    assert committed_offsets(TopicAdmin(root), "g") == {("in", 0): 2, ("in", 1): 0, ("other", 0): 0}
    code, out, err = groups(capsys, root, "--describe", "--group", "g", "--members")
    assert (code, out) == (0, "")
    assert "Consumer group 'g' has no active members." in err


def test_a_group_log_that_lost_a_middle_version_still_answers_its_newest(
    topics: TopicAdmin, root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each version of a group's log holds the whole group, so the newest is the right
    answer whatever is missing below it."""
    member = join(root, "g", "in")
    member.leave()
    member = join(root, "g", "in")  # more versions: joined, left, joined again
    before = groups(capsys, root, "--describe", "--group", "g", "--members")
    directory = Path(root, "_groups", "g")
    versions = sorted(p for p in directory.iterdir() if p.name.endswith(".json"))
    assert len(versions) >= 3
    versions[len(versions) // 2].unlink()
    after = groups(capsys, root, "--describe", "--group", "g", "--members")
    assert after == before and after[0] == 0
    assert member.member_id in after[1]
