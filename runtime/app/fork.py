"""Starting from a savepoint: the same application rewound, or a new one forked from it.

``StreamsApp(..., from_savepoint="N")`` (``streams-eos run FILE --from-savepoint N``)
starts the application from its own savepoint ``N``: a rewind (:mod:`runtime.app.rewind`)
first, then the run. ``from_savepoint="A/N"`` (``--application-id B``) starts a new
application ``B`` from savepoint ``N`` of application ``A``, with a topology that may have
changed, its own internal topics and its own outputs; ``A`` and its outputs are not
touched. Before ``B``'s first batch:

* each store of ``B`` that ``A`` had (the same name and kind) gets ``A``'s changelog at the
  cut, copied into ``B``'s changelog, so ``B``'s tasks restore ``A``'s state at the cut;
  a store ``A`` had and ``B`` has not is left behind (said in the log);
* the records of ``A``'s repartition topics that ``A`` had not consumed at the cut are
  copied into ``B``'s (read through the cut's offset index: the savepoint pinned them);
* ``B``'s consumer group gets ``A``'s positions at the cut on every input topic.

Each topic's copy is one commit, and done only while that topic is empty; the positions are
one commit; ``_apps/B/forked-from.json``, written last, makes a later start of ``B`` go on
from where it is. A ``B`` that already has positions of its own is refused.
"""

from __future__ import annotations

import json
import logging
from typing import Protocol

from common.config import StreamsConfig
from common.errors import StreamsError
from runtime.app.cut_reads import CutReader, copy_records
from runtime.app.initial_state import InitialState, load_initial_state
from runtime.app.internal_topics import TopicPlan
from runtime.app.local_state import forget_rewound_state
from runtime.app.rewind import apply_rewind, check_no_unfinished_rewind, plan_rewind
from runtime.app.savepoints import Savepoint, load_savepoint
from runtime.app.upgrades import StateUpgrade, upgrade
from runtime.group.reset import ResetPlanEntry, apply_reset, committed_offsets
from runtime.storage.topics import TopicAdmin
from topology.graph.topology import Topology

log = logging.getLogger(__name__)

FORKED = "forked-from.json"


class StartingApp(Protocol):
    """What :func:`prepare_start` reads of the application that starts."""

    admin: TopicAdmin
    topology: Topology
    plan: TopicPlan | None
    config: StreamsConfig
    from_savepoint: str | None
    upgrades: tuple[StateUpgrade, ...]
    initial_state: dict[str, InitialState]


def prepare_start(app: StartingApp) -> None:
    """Before a start: refuse while a rewind is unfinished, start from
    ``app.from_savepoint`` when given, check a changed topology against the last start's
    and carry its state as ``app.upgrades`` say (:mod:`runtime.app.upgrades`), load the
    stores' ``app.initial_state`` (:mod:`runtime.app.initial_state`), and drop
    the local state a rewind left behind
    (:func:`~runtime.app.local_state.forget_rewound_state`)."""
    admin, config = app.admin, app.config
    assert app.plan is not None
    check_no_unfinished_rewind(admin, config.application_id)
    if app.from_savepoint:
        start_from_savepoint(admin, app.topology, app.plan, config, app.from_savepoint)
    upgrade(admin, app.topology, config, app.upgrades)
    load_initial_state(admin, app.topology, config, app.initial_state)
    forget_rewound_state(admin, config.state_dir, config.application_id)


def start_from_savepoint(
    admin: TopicAdmin, topology: Topology, plan: TopicPlan, config: StreamsConfig, source: str
) -> None:
    """Bring the application to savepoint ``source`` before its first batch (see the
    module): ``N`` (its own: a rewind) or ``A/N`` (application ``A``'s: a fork).

    Raises:
        SavepointError: no such savepoint; a rewind refused (groups read past the cut).
        StreamsError: the new application has positions of its own already, or was forked
            from another savepoint; a store changed kind.
    """
    app = config.application_id
    owner, _, name = source.rpartition("/")
    owner = owner or app
    if owner == app:
        apply_rewind(admin, plan_rewind(admin, app, name))
        return
    marker = admin.root.path("_apps", app, FORKED)
    origin = {"application_id": owner, "savepoint": name}
    raw = admin.root.read_bytes(marker)
    if raw is not None:
        if json.loads(raw) != origin:
            raise StreamsError(
                f"application {app!r} was forked from {json.loads(raw)}, not from savepoint "
                f"{name} of {owner!r}: choose a new application id for this fork"
            )
        return  # forked at an earlier start: it goes on from where it is
    if committed_offsets(admin, app):
        raise StreamsError(
            f"application {app!r} has committed positions of its own: a fork starts a new "
            "application; choose an application id never used, or reset this one first "
            "(streams-eos application-reset)"
        )
    fork(admin, load_savepoint(admin, owner, name), topology, plan, app)
    admin.root.write_bytes(marker, json.dumps(origin).encode())


def fork(admin: TopicAdmin, sp: Savepoint, topology: Topology, plan: TopicPlan, app: str) -> None:
    """Copy the cut's stores and in-flight repartition records into ``app``'s topics,
    and give its group the cut's positions."""
    old = sp.application_id
    reader = CutReader(admin, {t: cut.index for t, cut in sp.topics.items()})
    changelogs = topology.changelog_topics(app)
    for store, cut in sorted(sp.stores.items()):
        target = changelogs.get(store)
        if target is None:
            log.warning(
                "[fork %s] store %s of %s is not in this topology: left behind", app, store, old
            )
            continue
        kind = topology.stores[store].kind
        if kind != cut.kind:
            raise StreamsError(
                f"store {store!r} is a {kind} store here but a {cut.kind} store in "
                f"savepoint {sp.name} of {old!r}: rename it (Materialized.as_) to start it empty"
            )
        starts = {p: reader.index(cut.changelog).log(p).start for p in cut.ends}
        copy_records(admin, reader, cut.changelog, target, starts=starts, ends=cut.ends)
    positions: list[ResetPlanEntry] = []
    for topic, parts in sorted(sp.positions.items()):
        kind = sp.record.outputs[topic].kind if topic in sp.record.outputs else "topic"
        if kind != "repartition":
            positions += [ResetPlanEntry(topic, p, None, o) for p, o in sorted(parts.items())]
            continue
        target = f"{app}-{topic.removeprefix(f'{old}-')}"
        if target not in plan.sources:
            log.warning("[fork %s] repartition topic %s is not read here: left behind", app, topic)
            continue
        ends = sp.topics[topic].ends
        copy_records(admin, reader, topic, target, starts=dict(parts), ends=ends)
        positions += [ResetPlanEntry(target, p, None, 0) for p in ends]
    apply_reset(admin, app, positions)
    log.info("[fork %s] forked from savepoint %s of %s", app, sp.name, old)
