"""``KTable`` (a changelog stream: the latest value per key) and ``GlobalKTable``.

Table nodes forward :class:`~topology.api.record.Change` values. A node sends old values only
when a downstream operator asks (``group_by`` does: its subtractor needs them), which may
force an upstream source table to be materialized, as Kafka's ``enableSendingOldValues``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from common.serdes import Serde
from topology.api.options import Grouped, Materialized, Named, name_of
from topology.api.processor import Processor
from topology.dsl.join_methods import TableJoins
from topology.graph.graph import ProcessorSpec
from topology.graph.naming import KTABLE_FILTER, KTABLE_MAPVALUES, KTABLE_SELECT, KTABLE_TOSTREAM
from topology.graph.stores import KeyValueStoreFactory
from topology.processors.proc_table import (
    TableFilterProcessor,
    TableMapValuesProcessor,
    TableParams,
    TableRepartitionMapProcessor,
    TableToStreamProcessor,
)

if TYPE_CHECKING:
    from topology.dsl.builder import StreamsBuilder
    from topology.dsl.grouped import KGroupedTable
    from topology.dsl.kstream import KStream
    from topology.dsl.suppress import Suppressed

K = TypeVar("K")
V = TypeVar("V")
K2 = TypeVar("K2")
V2 = TypeVar("V2")


def store_factory(
    name: str, mat: Materialized, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None
) -> KeyValueStoreFactory:
    """Return the key-value store factory of a materialized table or aggregate."""
    return KeyValueStoreFactory(
        name=name,
        key_serde=mat.key_serde or key_serde,
        value_serde=mat.value_serde or value_serde,
        supplier=mat.supplier,
        caching_enabled=mat.caching_enabled,
        logging_enabled=mat.logging_enabled,
        logging_config=mat.logging_config,
    )


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
        #: The grace a windowed table's windows close after (``None``: not windowed);
        #: ``suppress(until_window_closes)`` waits this long past a window's end.
        self.window_grace_ms: int | None = None
        # How joins read this table by key (topology.processors.joins.value_getter): a source table
        # materializes on demand, a derived one computes through its parent, a join result
        # through its view.
        self._materialize: Callable[[], None] | None = None
        self._derived_from: tuple[KTable[Any, Any], Callable[[], Any]] | None = None
        self._view: Callable[[], Any] | None = None

    def __repr__(self) -> str:
        return f"KTable({self.node})"

    def _send_old_from_store(self) -> None:
        self.params.send_old_values = True

    def enable_send_old_values(self) -> None:
        """Make this node (and what it needs upstream) forward old values too."""
        self._enable_old()

    def _transform(
        self,
        prefix: str,
        materialized: Materialized | None,
        named: Named | str | None,
        make: Callable[[str, TableParams], Processor[Any, Any, Any, Any]],
        value_serde: Serde[Any] | None,
    ) -> KTable[Any, Any]:

        names, graph = self.builder.names, self.builder.graph
        store = None
        if materialized is not None:
            store = materialized.store_name or names.new_store_name(prefix)
        name = names.name_or_generate(name_of(named), prefix)
        params = TableParams()
        graph.add_processor(
            ProcessorSpec(name=name, supplier=lambda: make(name, params), parents=(self.node,))
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

            table._enable_old = enable
            table._derived_from = (self, lambda: make(name, params))
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

    def to_delta(self, table: str, mode: str = "upsert", *, named: str | None = None) -> None:
        """Write the table's updates to the Delta table ``table`` (see
        :meth:`KStream.to_delta`); in the default ``upsert`` mode it holds one row per
        key, the latest value, and a deleted key's row is deleted.

        Example:
            >>> counts.to_delta("word-counts")  # doctest: +SKIP
        """
        self.to_stream().to_delta(table, mode, named=named)

    def to_stream(self, *, named: Named | str | None = None) -> KStream[K, V]:
        """Return the stream of this table's updates (a deletion is a ``None`` value).

        Example:
            >>> table.to_stream().to("updates")  # doctest: +SKIP
        """
        from topology.dsl.kstream import KStream

        name = self.builder.names.name_or_generate(name_of(named), KTABLE_TOSTREAM)
        self.builder.graph.add_processor(
            ProcessorSpec(name=name, supplier=TableToStreamProcessor, parents=(self.node,))
        )
        return KStream(self.builder, name, self.key_serde, self.value_serde, False)

    def suppress(self, suppressed: Suppressed) -> KTable[K, V]:
        """Hold updates back: ``Suppressed.until_window_closes`` emits each window's final
        result once stream time passes its end plus grace; ``Suppressed.until_time_limit``
        emits a key's latest update a time limit after its first (see
        :mod:`topology.dsl.suppress`).

        Example:
            >>> counts.suppress(
            ...     Suppressed.until_window_closes(BufferConfig.unbounded())
            ... )  # doctest: +SKIP
        """
        from topology.dsl.suppress import suppress

        return suppress(self, suppressed)

    def group_by(
        self, selector: Callable[[K, V], tuple[K2, V2]], grouped: Grouped | None = None
    ) -> KGroupedTable[K2, V2]:
        """Re-group the table by ``selector(key, value) -> (new_key, new_value)`` for an
        aggregation with adder and subtractor.

        Example:
            >>> table.group_by(lambda user, region: (region, user)).count()  # doctest: +SKIP
        """
        from topology.dsl.grouped import KGroupedTable

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
