"""``streams-eos groups``: list, describe, reset and delete consumer groups, as Kafka's
``kafka-consumer-groups`` does.

A group is known when it has a log in the group coordinator (members, generation) or
committed offsets in ``__consumer_offsets``. ``--reset-offsets`` is a dry run unless
``--execute`` is given; it refuses a group with active members, as Kafka does, because a
running member would commit its own positions over the reset. Tables are printed as the
other tools print them (cells padded and separated by a tab).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common.errors import StreamsError
from runtime.group.coordinator import (
    GroupCoordinator,
    GroupDescription,
    GroupState,
    MemberDescription,
)
from runtime.group.errors import GroupNotEmptyError
from runtime.group.reset import (
    ByDuration,
    FromFile,
    ResetPlanEntry,
    ResetStrategy,
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
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.txn.coordinator import TransactionCoordinator
from streams.cli import COMMANDS
from streams.cli.transactions import format_table

NONE = "-"
OFFSETS_HEADERS = [
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
]
MEMBERS_HEADERS = ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
STATE_HEADERS = ["GROUP", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS", "GENERATION"]
PLAN_HEADERS = ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
INACTIVE = (GroupState.EMPTY, GroupState.DEAD)


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``groups`` subcommand."""
    p = sub.add_parser(
        "groups",
        parents=[common],
        help=COMMANDS["groups"][1],
        description=(
            "Manage consumer groups as kafka-consumer-groups does. --reset-offsets prints "
            "the plan (a dry run) unless --execute is given; it needs the group inactive."
        ),
    )
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list every group")
    action.add_argument("--describe", action="store_true", help="describe groups")
    action.add_argument("--reset-offsets", action="store_true", help="reset committed offsets")
    action.add_argument("--delete", action="store_true", help="delete groups and their offsets")
    action.add_argument(
        "--delete-offsets", action="store_true", help="delete a group's offsets of --topic"
    )
    p.add_argument("--group", action="append", default=[], help="a group (repeatable)")
    p.add_argument("--all-groups", action="store_true", help="every group")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true", help="describe: offsets and lag")
    view.add_argument("--members", action="store_true", help="describe: the members")
    view.add_argument(
        "--state",
        nargs="?",
        const="",
        metavar="STATE",
        help="describe: the group state; list: add a STATE column (only STATE if given)",
    )
    p.add_argument("--assignment", action="store_true", help="--members: add the assignment")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--all-topics", action="store_true", help="reset: every topic of the group")
    scope.add_argument(
        "--topic", action="append", default=[], metavar="TOPIC[:P,...]", help="topic (repeatable)"
    )
    strategy = p.add_mutually_exclusive_group()
    strategy.add_argument("--to-earliest", action="store_true", help="to the log-start offset")
    strategy.add_argument("--to-latest", action="store_true", help="to the log-end offset")
    strategy.add_argument("--to-current", action="store_true", help="to the committed offset")
    strategy.add_argument("--to-offset", type=int, metavar="N", help="to offset N")
    strategy.add_argument("--shift-by", type=int, metavar="N", help="by N records (may be < 0)")
    strategy.add_argument(
        "--to-datetime", metavar="yyyy-MM-ddTHH:mm:ss.SSS", help="to the first record at/after"
    )
    strategy.add_argument("--by-duration", metavar="PnDTnHnMnS", help="to now minus a duration")
    strategy.add_argument("--from-file", metavar="PLAN.csv", help="to a topic,partition,offset CSV")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the plan only (the default)")
    mode.add_argument("--execute", action="store_true", help="apply the reset")
    p.add_argument("--export", action="store_true", help="print the plan as CSV")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Carry out one ``groups`` action."""
    admin = TopicAdmin(args.root)
    coordinator = GroupCoordinator(admin)
    if args.list:
        return _list(admin, coordinator, args.state)
    groups = _groups(admin, coordinator, args)
    if args.describe:
        return _describe(admin, coordinator, groups, args)
    if args.reset_offsets:
        return _reset(admin, coordinator, groups, args)
    if args.delete:
        return _delete(admin, coordinator, groups)
    return _delete_offsets(admin, coordinator, groups, args)


def known_groups(admin: TopicAdmin, coordinator: GroupCoordinator) -> list[str]:
    """Return every group with a coordinator log or committed offsets, sorted."""
    return sorted(set(coordinator.list_groups()) | set(groups_with_offsets(admin)))


def require_inactive(description: GroupDescription) -> None:
    """Raise unless the group has no active members (state Empty or Dead)."""
    if description.state not in INACTIVE:
        raise StreamsError(
            f"Assignments can only be reset if the group '{description.group}' is inactive, "
            f"but the current state is {description.state.value}. Stop the application's "
            f"instances ({len(description.members)} active member(s)) or wait for their "
            "session timeout, then run again"
        )


# -- list and describe --------------------------------------------------------------------


def _list(admin: TopicAdmin, coordinator: GroupCoordinator, state: str | None) -> int:
    names = known_groups(admin, coordinator)
    if state is None:
        for name in names:
            print(name)
        return 0
    rows = [[name, coordinator.describe(name).state.value] for name in names]
    if state:
        rows = [row for row in rows if row[1].lower() == state.lower()]
    print(format_table(["GROUP", "STATE"], rows))
    return 0


def _groups(
    admin: TopicAdmin, coordinator: GroupCoordinator, args: argparse.Namespace
) -> list[str]:
    known = known_groups(admin, coordinator)
    if args.all_groups:
        if args.group:
            raise StreamsError("give either --group or --all-groups, not both")
        return known
    if not args.group:
        raise StreamsError("this action needs --group G (repeatable) or --all-groups")
    if not args.reset_offsets:
        for group in args.group:
            if group not in known:
                raise StreamsError(
                    f"consumer group '{group}' does not exist (no members and no committed "
                    "offsets); see the groups with 'streams-eos groups --list'"
                )
    return list(dict.fromkeys(args.group))


def _describe(
    admin: TopicAdmin,
    coordinator: GroupCoordinator,
    groups: Sequence[str],
    args: argparse.Namespace,
) -> int:
    for index, group in enumerate(groups):
        if index:
            print()
        description = coordinator.describe(group)
        if args.state is not None:
            print(format_table(STATE_HEADERS, [_state_row(description)]))
            continue
        if not description.members:
            print(f"Consumer group '{group}' has no active members.", file=sys.stderr)
            if args.members:
                continue
        if args.members:
            headers = [*MEMBERS_HEADERS, "ASSIGNMENT"] if args.assignment else MEMBERS_HEADERS
            rows = [_member_row(group, m, args.assignment) for m in description.members]
            print(format_table(headers, rows))
        else:
            print(format_table(OFFSETS_HEADERS, _offset_rows(admin, description)))
    return 0


def _state_row(d: GroupDescription) -> list[str]:
    return [d.group, d.protocol or NONE, d.state.value, str(len(d.members)), str(d.generation)]


def _member_row(group: str, member: MemberDescription, with_assignment: bool) -> list[str]:
    parts = member.assignment.partitions
    row = [
        group,
        member.member_id,
        member.instance_id or NONE,
        member.host or NONE,
        member.client_id or NONE,
        str(len(parts)),
    ]
    if with_assignment:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(parts):
            by_topic.setdefault(topic, []).append(partition)
        cells = [f"{t}({','.join(map(str, ps))})" for t, ps in by_topic.items()]
        tasks = (member.assignment.user_data or {}).get("tasks")
        if tasks:
            cells.append(f"tasks({','.join(map(str, tasks))})")
        row.append(" ".join(cells) or NONE)
    return row


def _offset_rows(admin: TopicAdmin, description: GroupDescription) -> list[list[str]]:
    committed = committed_offsets(admin, description.group)
    owners = {tp: member for member in description.members for tp in member.assignment.partitions}
    topics = sorted({t for t, _ in committed} | {t for t, _ in owners})
    reader = TopicReader(admin)
    rows = []
    for topic in topics:
        ends = reader.end_offsets(topic) if admin.exists(topic) else {}
        partitions = sorted(set(ends) | {p for t, p in (*committed, *owners) if t == topic})
        for partition in partitions:
            current = committed.get((topic, partition))
            end = ends.get(partition)
            lag = NONE if current is None or end is None else str(max(end - current, 0))
            owner = owners.get((topic, partition))
            rows.append(
                [
                    description.group,
                    topic,
                    str(partition),
                    NONE if current is None else str(current),
                    NONE if end is None else str(end),
                    lag,
                    owner.member_id if owner else NONE,
                    (owner.host or NONE) if owner else NONE,
                    (owner.client_id or NONE) if owner else NONE,
                ]
            )
    return rows


# -- reset ----------------------------------------------------------------------------------


def strategy_from_args(args: argparse.Namespace, group: str) -> ResetStrategy:
    """Return the one reset strategy the options name.

    Raises:
        StreamsError: no strategy option was given.
    """
    if args.to_earliest:
        return ToEarliest()
    if args.to_latest:
        return ToLatest()
    if getattr(args, "to_current", False):
        return ToCurrent()
    if args.to_offset is not None:
        if args.to_offset < 0:
            raise StreamsError(f"--to-offset {args.to_offset} is negative; offsets start at 0")
        return ToOffset(args.to_offset)
    if args.shift_by is not None:
        return ShiftBy(args.shift_by)
    if args.to_datetime is not None:
        return ToDatetime(parse_datetime(args.to_datetime))
    if args.by_duration is not None:
        return ByDuration(parse_duration(args.by_duration))
    if args.from_file is not None:
        return FromFile(parse_csv(_read_text(args.from_file), group))
    raise StreamsError(
        "--reset-offsets needs one strategy: --to-earliest, --to-latest, --to-current, "
        "--to-offset N, --shift-by N, --to-datetime T, --by-duration D or --from-file F"
    )


def scope_from_args(args: argparse.Namespace) -> list[TopicScope] | None:
    """Return the reset scope of ``--all-topics`` (None) or ``--topic`` (a list).

    Raises:
        StreamsError: no scope was given and the strategy is not ``--from-file``.
    """
    if args.topic:
        return [TopicScope.parse(spec) for spec in args.topic]
    if not args.all_topics and args.from_file is None:
        raise StreamsError(
            "--reset-offsets needs a scope: --all-topics, or --topic T / --topic T:0,1 (repeatable)"
        )
    return None


def print_plan(plan: Sequence[tuple[str, ResetPlanEntry]], *, export: bool, groups: int) -> None:
    """Print clamping warnings on stderr, then the plan as a table or as CSV."""
    for _, e in plan:
        if e.clamped_from is not None:
            side = "higher than latest" if e.clamped_from > e.target else "lower than earliest"
            print(
                f"WARN: New offset ({e.clamped_from}) is {side} offset for topic partition "
                f"{e.topic}-{e.partition}. Value will be set to {e.target}",
                file=sys.stderr,
            )
    if export:
        if groups > 1:
            sys.stdout.write("".join(f"{g},{export_csv([e])}" for g, e in plan))
        else:
            sys.stdout.write(export_csv(e for _, e in plan))
        return
    rows = [[g, e.topic, str(e.partition), str(e.target)] for g, e in plan]
    print(format_table(PLAN_HEADERS, rows))


def require_no_pending_offsets(admin: TopicAdmin, group: str) -> None:
    """Raise if a transaction holding offsets of ``group`` is still open: completing it
    later would overwrite the reset."""
    if group in TransactionCoordinator(admin).groups_with_pending_offsets():
        raise StreamsError(
            f"group '{group}' has offsets in a transaction that is not complete yet; wait for "
            "it, or abort it with 'streams-eos transactions --find-hanging' / '--abort', "
            "then run again"
        )


def _reset(
    admin: TopicAdmin,
    coordinator: GroupCoordinator,
    groups: Sequence[str],
    args: argparse.Namespace,
) -> int:
    scope = scope_from_args(args)
    plans: list[tuple[str, ResetPlanEntry]] = []
    for group in groups:
        require_inactive(coordinator.describe(group))
        strategy = strategy_from_args(args, group)
        plans.extend((group, e) for e in plan_reset(admin, group, scope=scope, strategy=strategy))
    if args.execute:
        for group in groups:
            require_no_pending_offsets(admin, group)
            require_inactive(coordinator.describe(group))  # again, just before writing
            apply_reset(admin, group, [e for g, e in plans if g == group])
    print_plan(plans, export=args.export, groups=len(groups))
    if not args.execute:
        print(
            "Dry run: no offsets were changed; add --execute to apply this plan.",
            file=sys.stderr,
        )
    return 0


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise StreamsError(f"--from-file {path!r} cannot be read: {exc.strerror or exc}") from exc


# -- delete ---------------------------------------------------------------------------------


def _delete(admin: TopicAdmin, coordinator: GroupCoordinator, groups: Sequence[str]) -> int:
    for group in groups:
        _require_deletable(coordinator.describe(group))
    for group in groups:
        try:
            coordinator.delete_group(group)
        except GroupNotEmptyError as exc:
            raise StreamsError(
                f"group '{group}' could not be deleted: {exc}; stop its members first"
            ) from exc
        delete_offsets(admin, group)
    names = ", ".join(f"'{g}'" for g in groups)
    print(f"Deletion of requested consumer groups ({names}) was successful.")
    return 0


def _require_deletable(description: GroupDescription) -> None:
    if description.state not in INACTIVE:
        raise StreamsError(
            f"group '{description.group}' could not be deleted: the group is not empty (state "
            f"{description.state.value}, {len(description.members)} member(s)); stop the "
            "application's instances or wait for their session timeout, then run again"
        )


def _delete_offsets(
    admin: TopicAdmin,
    coordinator: GroupCoordinator,
    groups: Sequence[str],
    args: argparse.Namespace,
) -> int:
    if len(groups) != 1 or not args.topic:
        raise StreamsError("--delete-offsets needs one --group and at least one --topic")
    group, scopes = groups[0], [TopicScope.parse(spec) for spec in args.topic]
    description = coordinator.describe(group)
    subscribed = {t for m in description.members for t in m.subscription.topics}
    busy = sorted(subscribed & {s.topic for s in scopes})
    if busy:
        raise StreamsError(
            f"cannot delete offsets of group '{group}' for topic(s) {', '.join(busy)}: the "
            "group is subscribed to them; stop its members first"
        )
    deleted = delete_offsets(admin, group, scopes)
    if not deleted:
        names = ", ".join(args.topic)
        raise StreamsError(f"group '{group}' has no committed offsets for --topic {names}")
    rows = [[topic, str(partition), "Successful"] for topic, partition in deleted]
    print(f"Request succeed for deleting offsets with topic {', '.join(args.topic)} group {group}")
    print(format_table(["TOPIC", "PARTITION", "STATUS"], rows))
    return 0
