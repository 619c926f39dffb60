"""Safe topology upgrades: a start with a changed topology is compared with the last one.

Every start records its topology's stores and internal topics
(:mod:`runtime.app.topology_record`). The next start compares: a store of the last start
that this topology no longer has would lose its state (in Kafka Streams an operator added
upstream renumbers every generated name after it, and the state is silently gone), and a
repartition topic no longer read would lose the records still in it. The start refuses,
naming each one with the stores this topology adds and what keeps the name
(``Materialized.as_``, ``Grouped.as_``, ``Named``, ``Repartitioned.as_``), unless every
store that goes is given a :class:`StateUpgrade`:

* ``StateUpgrade.keep(old, new)``: the new store starts with the old store's state (its
  changelog records, copied);
* ``StateUpgrade.drop(old)``: the old state is left behind;
* ``StateUpgrade.migrate(old, new, fn)``: ``fn(key, value)`` maps each entry of the old
  key-value store to ``(key, value)``, a list of them, or None; the results are the new
  store's first state.

Keeping and migrating write the new store's changelog before the first batch, in one
commit, and only while it is empty: a start killed anywhere during it writes it once
(the next start finds it written and goes on). A savepoint of the application is taken
first (``pre-upgrade-<digest of the topology>``), so the upgrade can be rewound.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from common.config import StreamsConfig
from common.errors import StreamsError
from runtime.app.cut_reads import copy_records
from runtime.app.savepoints import SavepointError, create_savepoint, load_savepoint
from runtime.app.store_queries import StoreCatalog
from runtime.app.topology_record import TopologyRecord, read_record, record_path
from runtime.group.reset import committed_offsets
from runtime.storage.partitioner import partition_for_key
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.txn import faults
from topology.api.record import ValueAndTimestamp
from topology.graph.stores import ValueAndTimestampSerde
from topology.graph.topology import Topology

log = logging.getLogger(__name__)

Migration = Callable[[Any, Any], Any]


class TopologyUpgradeError(StreamsError):
    """A changed topology would lose state; the message lists what and what to do."""


@dataclass(frozen=True)
class StateUpgrade:
    """How the state of store ``store`` of the last start goes on (see the module)."""

    store: str
    action: Literal["keep", "drop", "migrate"]
    into: str | None = None
    fn: Migration | None = None

    @classmethod
    def keep(cls, old: str, new: str) -> StateUpgrade:
        """Store ``new`` starts with the state of store ``old`` (the same kind)."""
        return cls(old, "keep", new)

    @classmethod
    def drop(cls, old: str) -> StateUpgrade:
        """The state of store ``old`` is left behind."""
        return cls(old, "drop")

    @classmethod
    def migrate(cls, old: str, new: str, fn: Migration) -> StateUpgrade:
        """Store ``new`` starts with ``fn(key, value)`` of each entry of key-value store
        ``old``: a ``(key, value)``, a list of them, or None."""
        return cls(old, "migrate", new, fn)


def upgrade(
    admin: TopicAdmin,
    topology: Topology,
    config: StreamsConfig,
    upgrades: Sequence[StateUpgrade] = (),
) -> None:
    """Compare ``topology`` with the last start's and carry the state as ``upgrades`` say.

    Raises:
        TopologyUpgradeError: state would be lost without an upgrade saying so, an
            upgrade names a store that is not gone, or keeps it in a store of another kind.
    """
    app = config.application_id
    if not admin.root.exists(record_path(admin, app)):
        return  # the first start
    old = read_record(admin, app)
    new = {name: factory.kind for name, factory in _task_stores(topology)}
    gone = {name: s for name, s in old.stores.items() if name not in new}
    done = _done(admin, app)
    given = {u.store: u for u in upgrades if u.store not in done or u.store in gone}
    _check(old, topology, new=new, gone=gone, given=given, admin=admin)
    todo = [given[name] for name in sorted(gone) if given[name].action != "drop"]
    if not todo:
        _record_done(admin, app, done, [given[name] for name in gone])
        return
    if config.eos_enabled:
        _savepoint_first(admin, app, topology)
    faults.reached("upgrade_after_savepoint")
    catalog = StoreCatalog.read(admin, app)
    for step in todo:
        _carry(admin, topology, config, catalog=catalog, old=old, step=step)
    _record_done(admin, app, done, [given[name] for name in gone])
    faults.reached("upgrade_after_state")


def _done_path(admin: TopicAdmin, app: str) -> str:
    return admin.root.path("_apps", app, "upgrades.json")


def _done(admin: TopicAdmin, app: str) -> set[str]:
    """The stores earlier upgrades carried or dropped (an upgrade naming one again, at a
    later start, has nothing left to do)."""
    raw = admin.root.read_bytes(_done_path(admin, app))
    return set() if raw is None else {str(s) for s in json.loads(raw)["stores"]}


def _record_done(admin: TopicAdmin, app: str, done: set[str], steps: list[StateUpgrade]) -> None:
    if steps:
        stores = sorted(done | {s.store for s in steps})
        admin.root.write_bytes(_done_path(admin, app), json.dumps({"stores": stores}).encode())


def _task_stores(topology: Topology) -> Iterable[tuple[str, Any]]:
    for sub in topology.task_subtopologies():
        for name in sub.stores:
            yield name, topology.stores[name]


def _check(
    old: TopologyRecord,
    topology: Topology,
    *,
    new: dict[str, str],
    gone: dict[str, Any],
    given: dict[str, StateUpgrade],
    admin: TopicAdmin,
) -> None:
    app = old.application_id
    problems = []
    for name in sorted(set(given) - set(gone)):
        problems.append(
            f"an upgrade names store {name!r}, which this topology still has or never had"
        )
    added = {n: k for n, k in new.items() if n not in old.stores}
    for name, meta in sorted(gone.items()):
        step = given.get(name)
        if step is None:
            problems.append(f"store {name!r} ({meta.kind}) is gone, and its state with it")
        elif step.into is not None and added.get(step.into) not in (meta.kind, None):
            problems.append(
                f"store {name!r} ({meta.kind}) cannot be kept in {step.into!r} ({added[step.into]})"
            )
        elif step.into is not None and step.into not in new:
            problems.append(
                f"the upgrade of {name!r} names store {step.into!r}, which this "
                "topology does not have"
            )
        elif step.action == "migrate" and meta.kind != "key_value":
            problems.append(
                f"store {name!r} is a {meta.kind} store: migrations map key-value "
                "stores; keep or drop it"
            )
    now = set(topology.repartition_topic_names(app))
    positions: dict[tuple[str, int], int] | None = None  # read only when one is gone
    for topic, out in sorted(old.outputs.items()):
        if out.kind != "repartition" or topic in now or not admin.exists(topic):
            continue
        if positions is None:
            positions = committed_offsets(admin, app)
        ends = TopicReader(admin).end_offsets(topic)
        left = sum(e - positions.get((topic, p), 0) for p, e in ends.items())
        if left > 0:
            problems.append(
                f"repartition topic {topic} is no longer read, with {left} "
                "records not yet processed"
            )
    if problems:
        raise TopologyUpgradeError(_message(app, problems, added, topology))


def _message(app: str, problems: list[str], added: dict[str, str], topology: Topology) -> str:
    lines = [f"the topology of {app!r} changed since its last start and would lose state:"]
    lines += [f"  - {p}" for p in problems]
    if added:
        new = ", ".join(f"{n} ({k})" for n, k in sorted(added.items()))
        lines.append(f"  stores this topology adds: {new}")
    if topology.implicit_names:
        lines.append(f"  generated names here: {topology.implicit_names.describe()}")
    lines.append(
        "Name stateful operators so that their names stay (Materialized.as_(...), "
        "Grouped.as_(...), Named.as_(...), Repartitioned.as_(...); "
        "ensure.explicit.internal.resource.naming=true enforces it), or say what becomes "
        "of each store: upgrades=[StateUpgrade.keep(old, new) | StateUpgrade.drop(old) | "
        "StateUpgrade.migrate(old, new, fn)]"
    )
    return "\n".join(lines)


def _savepoint_first(admin: TopicAdmin, app: str, topology: Topology) -> None:
    digest = hashlib.sha1(str(topology.describe()).encode()).hexdigest()[:12]
    name = f"pre-upgrade-{digest}"
    try:
        load_savepoint(admin, app, name)
    except SavepointError:
        create_savepoint(admin, app, name)
        log.info("[upgrade %s] savepoint %s taken before the upgrade", app, name)


def _carry(
    admin: TopicAdmin,
    topology: Topology,
    config: StreamsConfig,
    *,
    catalog: StoreCatalog,
    old: TopologyRecord,
    step: StateUpgrade,
) -> None:
    """Write the new store's changelog from the old store's state, once."""
    assert step.into is not None
    app = config.application_id
    target = topology.changelog_topics(app).get(step.into)
    source = old.stores[step.store].changelog
    if target is None or source is None or not admin.exists(source):
        log.warning("[upgrade %s] %s keeps no changelog: nothing to carry", app, step.into)
        return
    if step.action == "keep":  # one commit, or none when an earlier start made it
        reader = TopicReader(admin)
        starts, ends = reader.beginning_offsets(source), reader.end_offsets(source)
        copy_records(admin, reader, source, target, starts=starts, ends=ends)
    elif not any(admin.index(target).end_offsets().values()):  # else migrated before
        producer = Producer(admin, buffer_memory=1 << 62)  # one commit: all or nothing
        _migrate(
            admin, topology, config, catalog=catalog, step=step, target=target, producer=producer
        )
        producer.flush()
    log.info("[upgrade %s] store %s carried into %s (%s)", app, step.store, step.into, step.action)


def _migrate(
    admin: TopicAdmin,
    topology: Topology,
    config: StreamsConfig,
    *,
    catalog: StoreCatalog,
    step: StateUpgrade,
    target: str,
    producer: Producer,
) -> None:
    assert step.fn is not None and step.into is not None
    builder: Any = topology.stores[step.into].builder(config)
    key_serde, value_serde = builder.key_serde, builder.value_serde
    partitions = admin.num_partitions(target)
    with catalog.query(admin, step.store, timestamped=True) as store:
        for key, found in store.all():
            value, ts = (
                (found.value, found.timestamp)
                if isinstance(found, ValueAndTimestamp)
                else (found, 0)
            )
            result = step.fn(key, value)
            pairs = (
                [] if result is None else [result] if isinstance(result, tuple) else list(result)
            )
            for new_key, new_value in pairs:
                raw_key = key_serde.serialize(target, new_key)
                wrapped = (
                    ValueAndTimestamp(new_value, ts)
                    if isinstance(value_serde, ValueAndTimestampSerde)
                    else new_value
                )
                raw = None if new_value is None else value_serde.serialize(target, wrapped)
                producer.send(
                    target,
                    raw_key,
                    raw,
                    timestamp=ts,
                    partition=partition_for_key(raw_key, partitions),
                )
