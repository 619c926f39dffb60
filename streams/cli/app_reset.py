"""``streams-eos application-reset``: make a Streams application reprocess its input, as
Kafka's ``kafka-streams-application-reset`` (``StreamsResetter``) does.

For the application ``A`` (its consumer group is ``A``), in this order:

1. refuse while the group has active members (``--force`` removes them first);
2. reset the committed offsets of the input topics to the chosen point (default: the
   beginning), move the intermediate topics' offsets to their end, and delete the
   offsets of A's internal topics — one atomic commit of ``__consumer_offsets``;
3. delete A's internal topics: ``A-...-changelog``, ``A-...-repartition`` and the
   foreign-key join topics, Kafka's naming rule;
4. delete A's store snapshots (``<root>/snapshots/A``) and its Spark checkpoint and
   markers (``<root>/_apps/A``), so the next run starts from the committed offsets;
5. delete the local state ``<state.dir>/A`` with ``--local``, or say to do so on every
   machine (``StreamsApp.cleanup()`` does it too).

Every action is printed; ``--dry-run`` only prints them.
"""

from __future__ import annotations

import argparse
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from common.config import StreamsConfig
from common.errors import StreamsError
from runtime.group.coordinator import GroupCoordinator
from runtime.group.reset import (
    ResetPlanEntry,
    ResetStrategy,
    ToEarliest,
    ToLatest,
    TopicScope,
    apply_reset,
    committed_offsets,
    plan_reset,
)
from runtime.storage.topics import TopicAdmin
from streams.cli import COMMANDS, groups

#: Kafka's ``StreamsResetter.matchesInternalTopicFormat`` suffixes.
INTERNAL_SUFFIXES = (
    "-changelog",
    "-repartition",
    "-subscription-registration-topic",
    "-subscription-response-topic",
)


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``application-reset`` subcommand."""
    p = sub.add_parser(
        "application-reset",
        parents=[common],
        help=COMMANDS["application-reset"][1],
        description=(
            "Reset the input offsets of an application's group, delete its internal topics, "
            "store snapshots and Spark checkpoint, as kafka-streams-application-reset does. "
            "Stop every instance first."
        ),
    )
    p.add_argument("--application-id", required=True, help="the application.id")
    p.add_argument(
        "--input-topics",
        metavar="T,...",
        help="input topics to reset (default: the non-internal topics the group has "
        "committed offsets for)",
    )
    p.add_argument("--intermediate-topics", metavar="T,...", help="topics to skip to their end")
    p.add_argument(
        "--internal-topics", metavar="T,...", help="only these internal topics are deleted"
    )
    strategy = p.add_mutually_exclusive_group()
    strategy.add_argument("--to-earliest", action="store_true", help="(default) the beginning")
    strategy.add_argument("--to-latest", action="store_true", help="the log-end offset")
    strategy.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    strategy.add_argument("--shift-by", type=int, metavar="N", help="N records from current")
    strategy.add_argument("--to-datetime", metavar="yyyy-MM-ddTHH:mm:ss.SSS", help="a time")
    strategy.add_argument("--by-duration", metavar="PnDTnHnMnS", help="now minus a duration")
    strategy.add_argument("--from-file", metavar="PLAN.csv", help="a topic,partition,offset CSV")
    p.add_argument("--dry-run", action="store_true", help="print the actions only")
    p.add_argument("--force", action="store_true", help="remove active members first")
    p.add_argument("--local", action="store_true", help="also delete the local state dir")
    p.add_argument("--state-dir", help="state.dir for --local (default: state.dir's default)")
    p.set_defaults(handler=run)


@dataclass(frozen=True)
class ResetTopics:
    """The topics an application reset touches."""

    inputs: list[str]
    intermediates: list[str]
    internals: list[str]


def is_internal_topic(topic: str, application_id: str) -> bool:
    """Return whether ``topic`` is named like an internal topic of ``application_id``."""
    return topic.startswith(f"{application_id}-") and topic.endswith(INTERNAL_SUFFIXES)


def run(args: argparse.Namespace) -> int:
    """Reset the application (or print what would be done)."""
    admin = TopicAdmin(args.root)
    app = args.application_id
    say = _Printer(dry_run=args.dry_run)
    _ensure_inactive(GroupCoordinator(admin), app, force=args.force, say=say)
    topics = resolve_topics(admin, app, args)
    plan = _plan(admin, app, topics, _strategy(args, app))
    if not args.dry_run:
        groups.require_no_pending_offsets(admin, app)
    _reset_offsets(admin, app, topics, plan, say)
    _delete_internal_topics(admin, topics.internals, say)
    _delete_dir(admin, "store snapshots", admin.root.path("snapshots", app), say)
    _delete_dir(admin, "Spark checkpoint and markers", admin.root.path("_apps", app), say)
    _local_state(args, app, say)
    return 0


def resolve_topics(admin: TopicAdmin, app: str, args: argparse.Namespace) -> ResetTopics:
    """Return the input, intermediate and internal topics of the reset.

    Raises:
        StreamsError: a named topic does not exist, is given twice, or an
            ``--internal-topics`` entry is not an internal topic of the application.
    """
    inputs = _split(args.input_topics)
    intermediates = _split(args.intermediate_topics)
    both = sorted(set(inputs) & set(intermediates))
    if both:
        raise StreamsError(
            f"topic(s) {', '.join(both)} given as both --input-topics and --intermediate-topics"
        )
    for flag, names in (("--input-topics", inputs), ("--intermediate-topics", intermediates)):
        missing = [t for t in names if not admin.exists(t)]
        if missing:
            raise StreamsError(f"{flag}: topic(s) {', '.join(missing)} do not exist")
    named = set(inputs) | set(intermediates)
    inferred = [t for t in admin.list() if is_internal_topic(t, app) and t not in named]
    if args.input_topics is None:
        committed = {t for t, _ in committed_offsets(admin, app)}
        inputs = sorted(
            t
            for t in committed - named
            if not is_internal_topic(t, app) and admin.exists(t)  # a deleted topic: skipped
        )
    internals = inferred
    if args.internal_topics is not None:
        internals = _split(args.internal_topics)
        foreign = [t for t in internals if t not in inferred]
        if foreign:
            raise StreamsError(
                f"--internal-topics: {', '.join(foreign)} not internal topic(s) of application "
                f"'{app}' (its internal topics: {', '.join(inferred) or 'none'})"
            )
    return ResetTopics(inputs, intermediates, internals)


# -- steps --------------------------------------------------------------------------------


class _Printer:
    """Prints each action; in a dry run, every line says nothing was done."""

    def __init__(self, *, dry_run: bool) -> None:
        self.dry_run = dry_run
        if dry_run:
            print("----Dry run----")

    def __call__(self, line: str) -> None:
        print(line)


def _ensure_inactive(
    coordinator: GroupCoordinator, app: str, *, force: bool, say: _Printer
) -> None:
    description = coordinator.describe(app)
    if not description.members:
        return
    ids = ", ".join(m.member_id for m in description.members)
    if not force:
        raise StreamsError(
            f"Consumer group '{app}' is still active and has following members: [{ids}]. "
            "Make sure to stop all running application instances before running the reset "
            "tool. You can use option '--force' to remove active members from the group."
        )
    say(f"Force deleting all active members in the group: {app}")
    if not say.dry_run:
        for member in description.members:
            coordinator.leave_group(app, member.member_id, instance_id=member.instance_id)


def _strategy(args: argparse.Namespace, app: str) -> ResetStrategy:
    if not any(
        getattr(args, name) not in (None, False)
        for name in (
            "to_earliest",
            "to_latest",
            "to_offset",
            "shift_by",
            "to_datetime",
            "by_duration",
            "from_file",
        )
    ):
        return ToEarliest()
    return groups.strategy_from_args(args, app)


def _plan(
    admin: TopicAdmin, app: str, topics: ResetTopics, strategy: ResetStrategy
) -> list[ResetPlanEntry]:
    plan: list[ResetPlanEntry] = []
    if topics.inputs:
        scope = [TopicScope(t) for t in topics.inputs]
        plan += plan_reset(admin, app, scope=scope, strategy=strategy, default_position="earliest")
    if topics.intermediates:
        scope = [TopicScope(t) for t in topics.intermediates]
        plan += plan_reset(admin, app, scope=scope, strategy=ToLatest())
    return plan


def _reset_offsets(
    admin: TopicAdmin,
    app: str,
    topics: ResetTopics,
    plan: Sequence[ResetPlanEntry],
    say: _Printer,
) -> None:
    if topics.inputs:
        say(f"Reset-offsets for input topics [{', '.join(topics.inputs)}]")
    else:
        say("No input topics to reset (the group has no committed input offsets).")
    if topics.intermediates:
        say(f"Seek-to-end for intermediate topics [{', '.join(topics.intermediates)}]")
    if plan:
        say(f"Following input topics offsets will be reset to (for consumer group {app})")
        for e in plan:
            note = "" if e.clamped_from is None else f" (clamped from {e.clamped_from})"
            say(f"Topic: {e.topic} Partition: {e.partition} Offset: {e.target}{note}")
    delete = [TopicScope(t) for t in topics.internals]
    internal_offsets = [
        tp for tp in committed_offsets(admin, app) if tp[0] in set(topics.internals)
    ]
    if internal_offsets:
        say(f"Deleting the committed offsets of {len(internal_offsets)} internal partition(s)")
    if not say.dry_run:
        apply_reset(admin, app, plan, delete=delete)


def _delete_internal_topics(admin: TopicAdmin, internals: Sequence[str], say: _Printer) -> None:
    if not internals:
        say("No internal topics to delete.")
        return
    say(f"Deleting inferred internal topics [{', '.join(internals)}]")
    for topic in internals:
        if not say.dry_run:
            admin.delete(topic)
        say(f"Topic {topic} is marked for deletion.")


def _delete_dir(admin: TopicAdmin, what: str, path: str, say: _Printer) -> None:
    if not admin.root.exists(path):
        return
    say(f"Deleting {what} under {path}")
    if not say.dry_run:
        admin.root.delete_dir(path)


def _local_state(args: argparse.Namespace, app: str, say: _Printer) -> None:
    state_dir = args.state_dir or _default_state_dir(app, args.root)
    local = os.path.join(os.path.abspath(state_dir), app)
    if args.local:
        if os.path.isdir(local):
            say(f"Deleting local state directory {local}")
            if not say.dry_run:
                shutil.rmtree(local)
        else:
            say(f"No local state directory at {local}")
    else:
        say(
            f"Done. Before restarting, delete the local state '{os.path.join(state_dir, app)}' "
            "(state.dir/application.id) on every machine that ran the application: run this "
            "tool there with --local [--state-dir DIR], or call StreamsApp.cleanup()."
        )
    if say.dry_run:
        say("Dry run: nothing was changed; run again without --dry-run to apply it.")


def _default_state_dir(app: str, root: str) -> str:
    config = StreamsConfig(**{"application.id": app, "topics.root": root})
    return config.state_dir


def _split(value: str | None) -> list[str]:
    if value is None:
        return []
    return list(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
