"""Interactive queries: a store's committed state, read on the driver (Kafka's IQ).

A task's store lives in an executor's Python worker (on a cluster, on another machine), and
its writes since the last commit are not committed. The driver answers from a **standby
replica** of its own instead, as Kafka's standby tasks keep one: per partition of the
store, a store of the same kind restored from the newest snapshot and the store's changelog
read ``read_committed``, and caught up with the changelog's new committed records before
every query. So a query sees the state of the last transaction committed when it asks,
never an uncommitted write. A transaction decided before the query but still adding its
files to the topics one after another (its outputs may already be visible, its changelog
not yet) is waited for, up to :data:`SETTLE_S`: a query never answers less than the
outputs committed before it asked. It works while the application runs, after it stopped,
and from another process (``streams-eos state``), wherever the storage root is reachable.

The replicas live in a temporary directory of the querying process, removed by
:meth:`QueryableStore.close` or when the process exits; a query stays usable after its
application stopped.

A store's entries are spread over its partitions; a key lives in one of them. ``get`` asks
each partition; ``range``, ``all`` and the window and session fetches return one partition
after another, each in key order (as Kafka's composite stores do across local stores).
"""

from __future__ import annotations

import pickle
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from common.config import StreamsConfig
from common.errors import StreamsError
from runtime.state.adapters import RootSnapshotStorage, TopicChangelogReader
from runtime.storage.topics import TopicAdmin
from runtime.txn.coordinator import TransactionCoordinator
from runtime.txn.state import TransactionState
from statestores.metered import changelog_topic
from statestores.state_manager import SNAPSHOT_INTERVAL_KEY, ProcessorStateManager
from topology.api.record import ValueAndTimestamp
from topology.engine.task import config_dict
from topology.graph.topology import Topology


class InvalidStateStoreError(StreamsError):
    """The store cannot be queried (Kafka's ``InvalidStateStoreException``): no such
    store, no changelog to read it from, or the wrong kind asked for."""


#: How long a query waits for a transaction that was decided but is still adding its files
#: to the topics (it takes milliseconds; one that takes longer has lost its instance and
#: completes when a new one starts, and is not waited for again).
SETTLE_S = 2.0

#: Where an application keeps what ``streams-eos state`` needs to query its stores.
CATALOG = "queryable-stores.pickle"


def catalog_path(admin: TopicAdmin, application_id: str) -> str:
    """Where the application keeps its store catalog (``_apps/<application.id>/``): the
    running application writes it with Spark's cloudpickle (plain pickle cannot take
    lambdas), ``streams-eos state`` reads it with plain pickle, without Spark."""
    return admin.root.path("_apps", application_id, CATALOG)


@dataclass(frozen=True)
class StoreCatalog:
    """An application's stores as a query needs them: each store's factory (kind, serdes,
    supplier) and sub-topology, and the configuration without ``storage.options``."""

    application_id: str
    config: dict[str, Any]
    stores: dict[str, tuple[Any, int]]

    @classmethod
    def of(cls, topology: Topology, config: StreamsConfig) -> StoreCatalog:
        """The catalog of ``topology``'s task stores."""
        stores = {
            name: (topology.stores[name], sub.id)
            for sub in topology.task_subtopologies()
            for name in sub.stores
        }
        properties = {
            k: v for k, v in config.to_properties().items() if not k.startswith("storage.options")
        }
        return cls(config.application_id, properties, stores)

    @classmethod
    def read(cls, admin: TopicAdmin, application_id: str) -> StoreCatalog:
        """The catalog the application kept.

        Raises:
            InvalidStateStoreError: none was kept, or it cannot be loaded here.
        """
        data = admin.root.read_bytes(catalog_path(admin, application_id))
        if data is None:
            raise InvalidStateStoreError(
                f"application {application_id!r} has kept no store catalog under "
                f"{admin.root.uri}: start it once (with this version), or check "
                "--application-id and --root"
            )
        try:
            catalog = pickle.loads(data)
        except Exception as exc:
            raise InvalidStateStoreError(
                f"cannot load the store catalog of {application_id!r} ({exc}); run this "
                "command where the application's own modules (its serdes) can be imported"
            ) from exc
        assert isinstance(catalog, StoreCatalog)
        return catalog

    def query(self, admin: TopicAdmin, name: str, *, timestamped: bool = False) -> QueryableStore:
        """A query of store ``name``."""
        found = self.stores.get(name)
        if found is None:
            known = ", ".join(sorted(self.stores)) or "none"
            raise InvalidStateStoreError(
                f"application {self.application_id!r} has no state store named {name!r} "
                f"(its stores: {known})"
            )
        factory, sub = found
        config = StreamsConfig(**{**self.config, "topics.root": admin.root.uri})
        return QueryableStore(factory, sub, config, admin, name, timestamped=timestamped)


class Replica:
    """The standby replica of one partition of a store (restored from ``snapshots``,
    default the application's, and the changelog ``reader`` gives)."""

    def __init__(
        self,
        factory: Any,
        config: StreamsConfig,
        admin: TopicAdmin,
        *,
        task_id: str,
        directory: str,
        reader: Any = None,
        snapshots: Any = None,
    ) -> None:
        partition = int(task_id.rsplit("_", 1)[1])
        app_config = {**config_dict(config), SNAPSHOT_INTERVAL_KEY: 0}
        self.manager = ProcessorStateManager(
            application_id=config.application_id,
            task_id=task_id,
            partition=partition,
            state_dir=directory,
            app_config=app_config,
            changelog_reader=reader or TopicChangelogReader(admin),
            snapshots=snapshots or RootSnapshotStorage(admin.root),
            transactional=config.eos_enabled,
        )
        builder: Any = factory.builder(config)
        # no cache: a cache would keep answering what it read before a catch-up
        uncached = getattr(builder, "with_caching_disabled", None)
        self.store: Any = (uncached() if uncached else builder).build()
        self.store.init(self.manager)

    def catch_up(self) -> None:
        self.manager.catch_up()

    def close(self) -> None:
        self.store.close()


class QueryableStore:
    """A read-only view of store ``name``'s committed state (see the module).

    Key-value stores: ``get``, ``range``, ``reverse_range``, ``all``, ``reverse_all``,
    ``prefix_scan``, ``approximate_num_entries`` (plain values: a DSL store's timestamps are
    left out, as Kafka's ``keyValueStore()`` query type does; ``timestamped=True`` keeps
    them). Window stores: ``fetch(key, time_from, time_to)`` (``(window start, value)``
    pairs), ``fetch_all(time_from, time_to)``, ``all``. Session stores:
    ``fetch(key)``, ``find_sessions(key, earliest_session_end, latest_session_start)``.
    Versioned stores: ``get(key, as_of_timestamp)`` and ``get_versions(key, from, to)``.

    Args:
        factory: the store's factory (its kind, serdes and supplier).
        subtopology_id: the sub-topology whose tasks hold the store.
        config: the application's configuration.
        admin: the storage root.
        name: the store.
        timestamped: keep a DSL key-value store's timestamps (``ValueAndTimestamp``).

    Raises:
        InvalidStateStoreError: the store keeps no changelog, or has none yet.
    """

    def __init__(
        self,
        factory: Any,
        subtopology_id: int,
        config: StreamsConfig,
        admin: TopicAdmin,
        name: str,
        *,
        timestamped: bool = False,
    ) -> None:
        topic = checked_changelog(factory, config, admin, name)
        builder: Any = factory.builder(config)
        self.name = name
        self.changelog = topic
        #: The serde of the store's keys (what a key must be to look it up).
        self.key_serde: Any = builder.key_serde
        self.kind: str = factory.kind
        #: A DSL store's ValueAndTimestamp values are answered as plain values.
        self.unwrap = not timestamped
        self._dir = tempfile.mkdtemp(prefix=f"iq-{config.application_id}-{name}-")
        # removed at exit when close() was never called
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._dir, True)
        self._lock = threading.Lock()
        self._replicas: list[Replica] = []
        self._application_id = config.application_id
        self._coordinator = TransactionCoordinator(admin)
        #: decided transactions that did not complete within SETTLE_S: (id, sequence)
        self._stuck: set[tuple[str, int]] = set()
        try:
            for p in range(admin.num_partitions(topic)):
                task_id = f"{subtopology_id}_{p}"
                self._replicas.append(
                    Replica(
                        factory, config, admin, task_id=task_id, directory=f"{self._dir}/{task_id}"
                    )
                )
        except BaseException:
            self.close()
            raise
        self._closed = False

    # -- key-value stores -----------------------------------------------------------------

    def get(self, key: Any, as_of_timestamp: int | None = None) -> Any:
        """The committed value of ``key`` (None: none). A versioned store answers a
        :class:`~statestores.api.VersionedRecord`: the latest version, or the one valid at
        ``as_of_timestamp`` (KIP-960's ``VersionedKeyQuery``)."""
        if self.kind == "versioned":
            found = self._collect("versioned", lambda s: [s.get(key, as_of_timestamp)])
            return next((v for v in found if v is not None), None)
        if as_of_timestamp is not None:
            raise InvalidStateStoreError(
                f"store {self.name!r} is a {self.kind.replace('_', '-')} store: only a "
                "versioned store answers a get as of a time"
            )
        found = self._collect("key_value", lambda s: [s.get(key)])
        return next((self._value(v) for v in found if v is not None), None)

    def get_versions(
        self,
        key: Any,
        from_timestamp: int | None = None,
        to_timestamp: int | None = None,
        *,
        ascending: bool = False,
    ) -> list[Any]:
        """Versioned store: the versions of ``key`` valid at some time in
        ``[from_timestamp, to_timestamp]`` (open bounds when None), newest first unless
        ``ascending`` (KIP-968's ``MultiVersionedKeyQuery``)."""
        return self._collect(
            "versioned",
            lambda s: s.get_versions(key, from_timestamp, to_timestamp, ascending=ascending),
        )

    def range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        """Entries with ``from_key <= key <= to_key`` (each partition in key order)."""
        return self._items(lambda s: s.range(from_key, to_key))

    def reverse_range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        """As :meth:`range`, each partition in reverse key order."""
        return self._items(lambda s: s.reverse_range(from_key, to_key))

    def all(self) -> Iterator[tuple[Any, Any]]:
        """Every entry (each partition in key order; windowed keys for a window store)."""
        if self.kind == "window":
            return self._window_items(lambda s: s.all())
        return self._items(lambda s: s.all())

    def reverse_all(self) -> Iterator[tuple[Any, Any]]:
        """Every entry, each partition in reverse key order."""
        return self._items(lambda s: s.reverse_all())

    def prefix_scan(self, prefix: Any, prefix_serializer: Any = None) -> Iterator[tuple[Any, Any]]:
        """Entries whose serialized key starts with the serialized ``prefix``."""
        return self._items(lambda s: s.prefix_scan(prefix, prefix_serializer))

    def approximate_num_entries(self) -> int:
        """About how many entries the store holds (summed over its partitions)."""
        with self._lock:
            self._catch_up()
            return sum(int(r.store.approximate_num_entries()) for r in self._replicas)

    # -- window stores --------------------------------------------------------------------

    def fetch(self, key: Any, time_from: int | None = None, time_to: int | None = None) -> Any:
        """Window store: ``(window start, value)`` of ``key``'s windows starting in
        ``[time_from, time_to]``. Session store: ``(session window, value)`` of ``key``'s
        sessions."""
        if self.kind == "session":
            return self._pairs(self._collect("session", lambda s: s.fetch(key)))
        lo = 0 if time_from is None else time_from
        hi = (1 << 62) if time_to is None else time_to
        return self._pairs(self._collect("window", lambda s: s.fetch(key, lo, hi)))

    def fetch_all(self, time_from: int, time_to: int) -> list[tuple[Any, Any]]:
        """Window store: ``(windowed key, value)`` of every window starting in
        ``[time_from, time_to]``."""
        return self._pairs(self._collect("window", lambda s: s.fetch_all(time_from, time_to)))

    # -- session stores -------------------------------------------------------------------

    def find_sessions(
        self, key: Any, earliest_session_end: int, latest_session_start: int
    ) -> list[tuple[Any, Any]]:
        """Session store: ``key``'s sessions ending at or after ``earliest_session_end``
        and starting at or before ``latest_session_start``."""
        return self._pairs(
            self._collect(
                "session",
                lambda s: s.find_sessions(key, earliest_session_end, latest_session_start),
            )
        )

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Close the replicas and remove their directory (idempotent)."""
        with self._lock:
            for replica in self._replicas:
                replica.close()
            self._replicas = []
            self._closed = True
            self._cleanup()

    def __enter__(self) -> QueryableStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------

    def _catch_up(self) -> None:
        if self._closed:
            raise InvalidStateStoreError(f"the query of store {self.name!r} is closed")
        self.settle()
        for replica in self._replicas:
            replica.catch_up()

    def settle(self) -> None:
        """Wait until no transaction of the application that writes this store's changelog
        is between its commit decision and its last topic commit (see the module)."""
        settle(self._coordinator, self._application_id, self.changelog, self._stuck)

    def _value(self, found: Any) -> Any:
        if self.unwrap and isinstance(found, ValueAndTimestamp):
            return found.value
        return found

    def _items(self, read: Any) -> Iterator[tuple[Any, Any]]:
        # each partition's entries read under the lock, so a catch-up never runs mid-read
        out = self._collect("key_value", read)
        return iter([(k, self._value(v)) for k, v in out])

    def _window_items(self, read: Any) -> Iterator[tuple[Any, Any]]:
        return iter(self._pairs(self._collect("window", read)))

    def _pairs(self, items: list[Any]) -> list[tuple[Any, Any]]:
        return [(k, self._value(v)) for k, v in items]

    def _collect(self, kind: str, read: Any) -> list[Any]:
        """``read(store)``'s items of every partition, caught up first (under the lock: a
        catch-up never runs in the middle of a read)."""
        if self.kind != kind:
            raise InvalidStateStoreError(
                f"store {self.name!r} is a {self.kind.replace('_', '-')} store, not a "
                f"{kind.replace('_', '-')} store: use the queries of its kind"
            )
        with self._lock:
            self._catch_up()
            return [item for r in self._replicas for item in read(r.store)]


def checked_changelog(factory: Any, config: StreamsConfig, admin: TopicAdmin, name: str) -> str:
    """The changelog topic of store ``name``, which a read of its state restores from.

    Raises:
        InvalidStateStoreError: the store keeps no changelog, or has none yet.
    """
    topic = changelog_topic(config.application_id, name)
    if not getattr(factory.builder(config), "logging_enabled", True):
        raise InvalidStateStoreError(
            f"store {name!r} keeps no changelog (logging disabled): its state exists only "
            "inside the tasks; enable logging to query it"
        )
    if not admin.exists(topic):
        raise InvalidStateStoreError(
            f"store {name!r} has no changelog topic {topic} yet: start the application "
            f"{config.application_id} once first"
        )
    return topic


def settle(
    coordinator: TransactionCoordinator,
    application_id: str,
    changelog: str,
    stuck: set[tuple[str, int]],
) -> None:
    """Wait (up to :data:`SETTLE_S`) until no transaction of ``application_id`` that
    writes ``changelog`` is between its commit decision and its last topic commit; one
    that takes longer joins ``stuck`` and is not waited for again."""
    deadline = time.monotonic() + SETTLE_S
    prefix = f"{application_id}-"
    while (
        rolling := {
            (meta.transactional_id, meta.txn_sequence)
            for meta in coordinator.list()
            if meta.transactional_id.startswith(prefix)
            and meta.state is TransactionState.PREPARE_COMMIT
            and changelog in meta.staged
        }
        - stuck
    ):
        if time.monotonic() > deadline:
            stuck |= rolling
            return
        time.sleep(0.005)


def query_of(
    topology: Topology,
    config: StreamsConfig,
    admin: TopicAdmin,
    name: str,
    *,
    timestamped: bool = False,
) -> QueryableStore:
    """A query of store ``name`` of ``topology``.

    Raises:
        InvalidStateStoreError: no such store, or it keeps no changelog.
    """
    if name not in topology.stores:
        known = ", ".join(sorted(topology.stores)) or "none"
        raise InvalidStateStoreError(
            f"no state store named {name!r} in the topology (its stores: {known}); name a "
            "store given with Materialized.as_(...) or add_state_store(...)"
        )
    subs = [s for s in topology.task_subtopologies() if name in s.stores]
    if not subs:
        raise InvalidStateStoreError(
            f"store {name!r} is a global store: read its source topic instead"
        )
    factory = topology.stores[name]
    return QueryableStore(factory, subs[0].id, config, admin, name, timestamped=timestamped)
