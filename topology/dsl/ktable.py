"""``KTable`` (a changelog stream: the latest value per key) and ``GlobalKTable``.

Table nodes forward :class:`~topology.api.record.Change` values. A node sends old values only
when a downstream operator asks (``group_by`` does: its subtractor needs them), which may
force an upstream source table to be materialized, as Kafka's ``enableSendingOldValues``.
A join reads a table by key through :meth:`KTable.value_getter`.

A table is *versioned* (KIP-914) when its node is materialized in a versioned store, or,
not materialized itself, derives from a versioned table (Kafka's ``isOutputVersioned``):
its out-of-order updates reach the operators below as non-latest changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from common.errors import TopologyError
from common.serdes import Serde
from topology.api.options import Grouped, Materialized, Named, name_of
from topology.api.processor import Processor
from topology.dsl.grouped import KGroupedTable
from topology.dsl.materialize import store_factory
from topology.dsl.suppress import Suppressed, suppress_table
from topology.dsl.table_joins import TableJoins
from topology.graph.graph import ProcessorSpec
from topology.graph.naming import (
    KTABLE_FILTER,
    KTABLE_MAPVALUES,
    KTABLE_SELECT,
    KTABLE_TOSTREAM,
    KTABLE_TRANSFORMVALUES,
)
from topology.graph.stores import KeyValueStoreFactory
from topology.processors.joins import DerivedGetter, GetterSupplier, StoreGetter
from topology.processors.proc_table import (
    TableFilterProcessor,
    TableMapValuesProcessor,
    TableParams,
    TableRepartitionMapProcessor,
    TableToStreamProcessor,
    TableTransformValuesProcessor,
)

if TYPE_CHECKING:
    from topology.dsl.builder import StreamsBuilder
    from topology.dsl.kstream import KStream

K = TypeVar("K")
V = TypeVar("V")
K2 = TypeVar("K2")
V2 = TypeVar("V2")


@dataclass(frozen=True, slots=True)
class GlobalKTable:
    """A table replicated in full on every instance; joins look it up by key."""

    store_name: str
    topic: str


class KTable(TableJoins, Generic[K, V]):
    """A table handle. Build one with ``StreamsBuilder.table`` or an aggregation."""

    def __init__(
        self,
        builder: StreamsBuilder,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        params: TableParams,
    ) -> None:
        self.builder = builder
        self.node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.params = params
        self.queryable_store_name: str | None = params.store_name
        self._enable_old: Callable[[], object] = self._send_old_from_store
        #: Kafka's ``enableSendingOldValues(false)``: old values without forcing a store
        #: (a source table that is not materialized says no).
        self._try_old: Callable[[], bool] = self._old_values_forced
        #: The grace a windowed table's windows close after (``None``: not windowed);
        #: ``suppress(until_window_closes)`` waits this long past a window's end.
        self.window_grace_ms: int | None = None
        # How joins read this table by key (value_getter): a source table materializes on
        # demand, a derived one computes through its parent, a join result through its view.
        self._materialize: Callable[[], None] | None = None
        self._derived_from: tuple[KTable[Any, Any], Callable[[], Any]] | None = None
        self._view: Callable[[], Any] | None = None
        #: Given ``Materialized`` without a store: not versioned whatever is upstream
        #: (Kafka's ``maybeSetOutputVersioned`` with a store-less ``Materialized``).
        self._unversioned = False

    def __repr__(self) -> str:
        return f"KTable({self.node})"

    def _send_old_from_store(self) -> None:
        self.params.send_old_values = True

    def _old_values_forced(self) -> bool:
        self._enable_old()
        return True

    def enable_send_old_values(self) -> None:
        """Make this node (and what it needs upstream) forward old values too."""
        self._enable_old()

    def store_on_demand(self, factory: KeyValueStoreFactory, *, named: bool) -> None:
        """Store this table-source node in ``factory``'s store once a join reads it or a
        downstream operator needs old values (as Kafka's ``KTableSource.materialize``); at
        once, and queryable, when ``named`` (the user named the store)."""
        params, graph, node = self.params, self.builder.graph, self.node

        def materialize() -> None:
            if params.store_name is None:
                graph.add_store(factory, node)
                params.store_name = factory.name

        def enable_old() -> None:
            materialize()
            params.send_old_values = True

        def old_if_stored() -> bool:
            if params.store_name is None:
                return False
            params.send_old_values = True
            return True

        self._enable_old, self._materialize, self._try_old = enable_old, materialize, old_if_stored
        if named:
            materialize()
            self.queryable_store_name = factory.name

    def versioned_store(self) -> str | None:
        """Return the versioned store that makes this table versioned (its own, or an
        upstream table's when this one is not materialized), or None: Kafka's
        ``InternalStreamsBuilder.isVersionedOrVersionedUpstream``."""
        store = self.params.store_name
        if store is not None:
            factory = self.builder.graph.stores.get(store)
            return store if getattr(factory, "kind", "") == "versioned" else None
        if self._derived_from is not None and not self._unversioned:
            return self._derived_from[0].versioned_store()
        return None  # a join's or a suppression's result that is not materialized

    def value_getter(self) -> GetterSupplier:
        """Return how a join reads this table by key (Kafka's ``valueGetterSupplier``),
        materializing a source table if needed.

        Raises:
            TopologyError: the table can be read neither from a store nor through its parent
                (fatal: materialize it with ``Materialized.as_``).
        """
        if self.params.store_name is None and self._materialize is not None:
            self._materialize()
        store = self.params.store_name
        if store is not None:
            return GetterSupplier((store,), lambda: StoreGetter(store))
        if self._view is not None:
            view: GetterSupplier = self._view()
            return view
        if self._derived_from is not None:
            parent_table, make_operator = self._derived_from
            parent = parent_table.value_getter()
            return GetterSupplier(
                parent.store_names, lambda: DerivedGetter(parent.make(), make_operator())
            )
        raise TopologyError(
            f"Processor {self.node}: a join cannot read this table by key; materialize it "
            "with Materialized.as_(...)"
        )

    def _transform(
        self,
        prefix: str,
        materialized: Materialized | None,
        named: Named | str | None,
        make: Callable[[str, TableParams], Processor[Any, Any, Any, Any]],
        value_serde: Serde[Any] | None,
        *,
        old_when_stored: bool = False,
        stores: tuple[str, ...] = (),
    ) -> KTable[Any, Any]:
        """Record a derived table (filter, map_values). ``old_when_stored``: take old values
        from upstream already when it has a store (Kafka's ``KTableFilter`` does, so that
        a filtered-out key that never existed forwards no tombstone)."""

        names, graph = self.builder.names, self.builder.graph
        store = None
        if materialized is not None:
            store = materialized.store_name or names.new_store_name(prefix)
        name = names.name_or_generate(name_of(named), prefix)
        params = TableParams(versioned_semantics=self.versioned_store() is not None)
        if old_when_stored:
            params.send_old_values = self._try_old()
        graph.add_processor(
            ProcessorSpec(
                name=name,
                supplier=lambda: make(name, params),
                parents=(self.node,),
                stores=stores,
            )
        )
        table: KTable[Any, Any] = KTable(self.builder, name, self.key_serde, value_serde, params)
        table.window_grace_ms = self.window_grace_ms
        if materialized is not None and materialized.store_name is not None:
            assert store is not None
            graph.add_store(store_factory(store, materialized, self.key_serde, value_serde), name)
            params.store_name = table.queryable_store_name = store
        else:
            parent = self

            def enable() -> None:
                params.send_old_values = True
                parent.enable_send_old_values()

            def try_old() -> bool:
                if parent._try_old():
                    params.send_old_values = True
                return params.send_old_values

            table._enable_old, table._try_old = enable, try_old
            table._derived_from = (self, lambda: make(name, params))
            table._unversioned = materialized is not None
        return table

    def filter(
        self,
        predicate: Callable[[K, V], bool],
        materialized: Materialized | None = None,
        *,
        named: Named | str | None = None,
    ) -> KTable[K, V]:
        """Keep the rows for which ``predicate(key, value)`` holds; an update that fails it
        becomes a deletion downstream.

        Example:
            >>> table.filter(lambda k, v: v >= 18)  # doctest: +SKIP
        """
        return self._transform(
            KTABLE_FILTER,
            materialized,
            named,
            lambda n, p: TableFilterProcessor(n, predicate, p, False),
            self.value_serde,
            old_when_stored=True,
        )

    def filter_not(
        self,
        predicate: Callable[[K, V], bool],
        materialized: Materialized | None = None,
        *,
        named: Named | str | None = None,
    ) -> KTable[K, V]:
        """Drop the rows for which ``predicate(key, value)`` holds.

        Example:
            >>> table.filter_not(lambda k, v: v is None)  # doctest: +SKIP
        """
        return self._transform(
            KTABLE_FILTER,
            materialized,
            named,
            lambda n, p: TableFilterProcessor(n, predicate, p, True),
            self.value_serde,
            old_when_stored=True,
        )

    def map_values(
        self,
        mapper: Callable[..., V2],
        materialized: Materialized | None = None,
        *,
        with_key: bool = False,
        named: Named | str | None = None,
    ) -> KTable[K, V2]:
        """Map each value with ``mapper(value)`` (``mapper(key, value)`` with
        ``with_key=True``).

        Example:
            >>> table.map_values(len)  # doctest: +SKIP
        """
        serde = materialized.value_serde if materialized is not None else None
        return self._transform(
            KTABLE_MAPVALUES,
            materialized,
            named,
            lambda n, p: TableMapValuesProcessor(n, mapper, p, with_key),
            serde,
        )

    def transform_values(
        self,
        supplier: Callable[[], Any],
        materialized: Materialized | None = None,
        *store_names: str,
        named: Named | str | None = None,
    ) -> KTable[K, Any]:
        """Transform each value with a transformer from ``supplier()`` (Kafka's
        ``KTable.transformValues``): an object with ``init(context)``, ``transform(key,
        value)`` (called for deletions too, with ``None``) and ``close()``, which may use
        the stores ``store_names`` (added with ``StreamsBuilder.add_state_store``).

        Example:
            >>> table.transform_values(Exclaim, None, "counts")  # doctest: +SKIP
        """
        serde = materialized.value_serde if materialized is not None else None
        return self._transform(
            KTABLE_TRANSFORMVALUES,
            materialized,
            named,
            lambda n, p: TableTransformValuesProcessor(n, supplier, p),
            serde,
            stores=tuple(store_names),
        )

    def to_delta(self, table: str, mode: str = "upsert", *, named: str | None = None) -> None:
        """Write the table's updates to the Delta table ``table`` (see
        :meth:`KStream.to_delta`); in the default ``upsert`` mode it holds one row per
        key, the latest value, and a deleted key's row is deleted.

        Example:
            >>> counts.to_delta("word-counts")  # doctest: +SKIP
        """
        self.to_stream().to_delta(table, mode, named=named)

    def to_stream(
        self,
        mapper: Callable[[K, V], Any] | None = None,
        *,
        named: Named | str | None = None,
    ) -> KStream[Any, V]:
        """Return the stream of this table's updates (a deletion is a ``None`` value);
        with ``mapper``, each update keyed by ``mapper(key, value)`` (Kafka's
        ``toStream(KeyValueMapper)``: ``to_stream().select_key(mapper)``).

        Example:
            >>> table.to_stream().to("updates")  # doctest: +SKIP
            >>> windowed_counts.to_stream(lambda w, n: w.key).to("counts")  # doctest: +SKIP
        """
        name = self.builder.names.name_or_generate(name_of(named), KTABLE_TOSTREAM)
        self.builder.graph.add_processor(
            ProcessorSpec(name=name, supplier=TableToStreamProcessor, parents=(self.node,))
        )
        stream: KStream[Any, V] = self.builder.handles.stream(
            name, self.key_serde, self.value_serde, repartition_required=False
        )
        return stream if mapper is None else stream.select_key(mapper)

    def suppress(self, suppressed: Suppressed) -> KTable[K, V]:
        """Hold updates back: ``Suppressed.until_window_closes`` emits each window's final
        result once stream time passes its end plus grace; ``Suppressed.until_time_limit``
        emits a key's latest update a time limit after its first (see
        :mod:`topology.processors.proc_suppress`).

        Example:
            >>> counts.suppress(
            ...     Suppressed.until_window_closes(BufferConfig.unbounded())
            ... )  # doctest: +SKIP
        """
        return suppress_table(self, suppressed, self.versioned_store())

    def group_by(
        self, selector: Callable[[K, V], tuple[K2, V2]], grouped: Grouped | None = None
    ) -> KGroupedTable[K2, V2]:
        """Re-group the table by ``selector(key, value) -> (new_key, new_value)`` for an
        aggregation with adder and subtractor.

        Example:
            >>> table.group_by(lambda user, region: (region, user)).count()  # doctest: +SKIP
        """
        grouped = grouped or Grouped()
        name = self.builder.names.name_or_generate(name_of(grouped.name), KTABLE_SELECT)
        self.builder.graph.add_processor(
            ProcessorSpec(
                name=name,
                supplier=lambda: TableRepartitionMapProcessor(name, selector),
                parents=(self.node,),
            )
        )
        self.enable_send_old_values()
        return KGroupedTable(self.builder, name, grouped)
