"""Grouped streams and tables and their non-windowed aggregations.

``KGroupedStream.aggregate_with`` is the one place that records an aggregation (the store
name first, then the processor name, then the repartition nodes, as Kafka burns names);
``count``/``reduce``/``aggregate`` call it, and so do the windowed streams of
``windowed_by`` (:mod:`topology.dsl.windowed`), with a window or session store factory and
a windowed processor. The result tables are made through the builder's
:class:`~topology.dsl.builder.HandleFactory`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from common.serdes import Serde, Serdes
from topology.api.options import Grouped, Materialized, Named, name_of
from topology.api.processor import Processor
from topology.dsl.cogroup import CogroupedKStream
from topology.dsl.materialize import store_factory
from topology.dsl.repartition import create_repartitioned_source
from topology.dsl.windowed import SessionWindowedKStream, TimeWindowedKStream, windowed_by
from topology.graph.graph import ProcessorSpec, RepartitionTopicSpec, SinkSpec, SourceSpec
from topology.graph.naming import (
    AGGREGATE,
    KTABLE_AGGREGATE,
    KTABLE_REDUCE,
    REDUCE,
    REPARTITION_TOPIC_SUFFIX,
    SINK,
    SOURCE,
)
from topology.graph.stores import ChangeSerde, StoreFactory
from topology.processors.proc_aggregate import count_add, count_init, count_sub
from topology.processors.proc_stream_aggregate import (
    StreamAggregateProcessor,
    StreamCountProcessor,
    StreamReduceProcessor,
)
from topology.processors.proc_table import TableParams
from topology.processors.proc_table_aggregate import TableAggregateProcessor

if TYPE_CHECKING:
    from topology.api.windows import SessionWindows, SlidingWindows, TimeWindows, UnlimitedWindows
    from topology.dsl.builder import StreamsBuilder
    from topology.dsl.ktable import KTable

K = TypeVar("K")
V = TypeVar("V")
A = TypeVar("A")

#: ``(node name, params) -> processor``: how an aggregation builds its processor.
MakeProcessor = Callable[[str, TableParams], Processor[Any, Any, Any, Any]]
#: ``(store name, materialized) -> store factory``.
MakeStore = Callable[[str, Materialized], StoreFactory]


class KGroupedStream(Generic[K, V]):
    """A stream grouped by key, ready for an aggregation."""

    def __init__(
        self,
        builder: StreamsBuilder,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        *,
        repartition_required: bool,
        grouped_name: str | None,
    ) -> None:
        self.builder = builder
        self.node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.repartition_required = repartition_required
        self.grouped_name = grouped_name

    def aggregate_with(
        self,
        prefix: str,
        *,
        materialized: Materialized | None,
        named: Named | str | None,
        make_processor: MakeProcessor,
        make_store: MakeStore,
        value_serde: Serde[Any] | None,
        combiner: str | None = None,
    ) -> KTable[Any, Any]:
        """Record an aggregation node (and its repartition when needed) and its store.

        The extension point of the windows phase: pass a window or session store factory
        and the windowed processor; the result table's keys are then ``Windowed[K]``.
        ``combiner``: see :class:`~topology.graph.graph.ProcessorSpec`.
        """
        builder, mat = self.builder, materialized or Materialized()
        store = mat.store_name or builder.names.new_store_name(prefix)
        name = builder.names.name_or_generate(name_of(named), prefix)
        parent = self.node
        if self.repartition_required:
            parent = create_repartitioned_source(
                builder,
                self.node,
                self.grouped_name or store,
                self.key_serde,
                self.value_serde,
                user_named=self.grouped_name is not None or mat.store_name is not None,
            )
        params = TableParams(store_name=store)
        builder.graph.add_processor(
            ProcessorSpec(
                name=name,
                supplier=lambda: make_processor(name, params),
                parents=(parent,),
                combiner=combiner,
            )
        )
        builder.graph.add_store(make_store(store, mat), name)
        if mat.store_name is None:
            builder.graph.note_generated(name, store)
        key_serde = mat.key_serde or self.key_serde
        table = builder.handles.table(name, key_serde, mat.value_serde or value_serde, params)
        table.queryable_store_name = mat.store_name
        return table

    def _kv_store(self, value_serde: Serde[Any] | None) -> MakeStore:
        key_serde = self.key_serde
        return lambda name, mat: store_factory(name, mat, key_serde, value_serde)

    def count(
        self, materialized: Materialized | None = None, *, named: Named | str | None = None
    ) -> KTable[K, int]:
        """Count the records per key (null keys and values are skipped).

        Example:
            >>> words.group_by(lambda k, w: w).count(Materialized.as_("counts"))  # doctest: +SKIP
        """
        serde = Serdes.Long()
        return self.aggregate_with(
            AGGREGATE,
            materialized=materialized,
            named=named,
            make_processor=StreamCountProcessor,
            make_store=self._kv_store(serde),
            value_serde=serde,
            combiner="count",
        )

    def reduce(
        self,
        reducer: Callable[[V, V], V],
        materialized: Materialized | None = None,
        *,
        named: Named | str | None = None,
    ) -> KTable[K, V]:
        """Combine the values per key with ``reducer(aggregate, value)``.

        Example:
            >>> amounts.group_by_key().reduce(lambda a, b: a + b)  # doctest: +SKIP
        """
        return self.aggregate_with(
            REDUCE,
            materialized=materialized,
            named=named,
            make_processor=lambda n, p: StreamReduceProcessor(n, p, reducer),
            make_store=self._kv_store(self.value_serde),
            value_serde=self.value_serde,
        )

    def aggregate(
        self,
        initializer: Callable[[], A],
        aggregator: Callable[[K, V, A], A],
        materialized: Materialized | None = None,
        *,
        named: Named | str | None = None,
    ) -> KTable[K, A]:
        """Fold the values per key: ``aggregator(key, value, aggregate)`` from
        ``initializer()``. Give the aggregate's serde with ``Materialized.with_value_serde``.

        Example:
            >>> s.group_by_key().aggregate(list, lambda k, v, agg: [*agg, v])  # doctest: +SKIP
        """
        return self.aggregate_with(
            AGGREGATE,
            materialized=materialized,
            named=named,
            make_processor=lambda n, p: StreamAggregateProcessor(n, p, initializer, aggregator),
            make_store=self._kv_store(None),
            value_serde=None,
        )

    def cogroup(self, aggregator: Callable[[K, V, A], A]) -> CogroupedKStream[K, A]:
        """Start a cogroup (KIP-150): this stream folded in with ``aggregator(key, value,
        aggregate)``; add more grouped streams with ``CogroupedKStream.cogroup`` and
        aggregate them all into one table (see :mod:`topology.dsl.cogroup`).

        Raises:
            TopologyError: ``aggregator`` is missing (fatal).

        Example:
            >>> g1.cogroup(lambda k, v, a: a + v).cogroup(
            ...     g2, lambda k, v, a: a - v
            ... ).aggregate(lambda: 0)  # doctest: +SKIP
        """
        return CogroupedKStream.start(self, aggregator)

    @overload
    def windowed_by(self, windows: SessionWindows) -> SessionWindowedKStream[K, V]: ...

    @overload
    def windowed_by(
        self, windows: TimeWindows | SlidingWindows | UnlimitedWindows
    ) -> TimeWindowedKStream[K, V]: ...

    def windowed_by(
        self, windows: TimeWindows | SlidingWindows | UnlimitedWindows | SessionWindows
    ) -> TimeWindowedKStream[K, V] | SessionWindowedKStream[K, V]:
        """Aggregate per key and window (time, sliding, unlimited) or session; results
        are keyed by ``Windowed[K]`` (see :mod:`topology.dsl.windowed`).

        Example:
            >>> clicks.group_by_key().windowed_by(
            ...     TimeWindows.of_size_and_grace(60_000, 10_000)
            ... ).count()  # doctest: +SKIP
        """
        return windowed_by(self, windows)


class KGroupedTable(Generic[K, V]):
    """A table re-grouped by ``KTable.group_by``; aggregations get old and new values as a
    subtraction and an addition, through a repartition topic."""

    def __init__(self, builder: StreamsBuilder, select_node: str, grouped: Grouped) -> None:
        self.builder = builder
        self.node = select_node
        self.grouped = grouped

    def _aggregate(
        self,
        prefix: str,
        *,
        materialized: Materialized | None,
        named: Named | str | None,
        make: MakeProcessor,
        value_serde: Serde[Any] | None,
    ) -> KTable[Any, Any]:
        builder, mat, grouped = self.builder, materialized or Materialized(), self.grouped
        names, graph = builder.names, builder.graph
        store = mat.store_name or names.new_store_name(prefix)
        sink, source = names.new_processor_name(SINK), names.new_processor_name(SOURCE)
        name = names.name_or_generate(name_of(named), prefix)
        topic = (grouped.name or store) + REPARTITION_TOPIC_SUFFIX
        change_serde = ChangeSerde(grouped.value_serde)
        graph.add_repartition_topic(RepartitionTopicSpec(topic))
        graph.add_sink(
            SinkSpec(
                name=sink,
                parents=(self.node,),
                topic=topic,
                key_serde=grouped.key_serde,
                value_serde=change_serde,
                internal=True,
            )
        )
        graph.add_source(
            SourceSpec(
                name=source,
                topics=(topic,),
                key_serde=grouped.key_serde,
                value_serde=change_serde,
                internal=True,
            )
        )
        params = TableParams(store_name=store)
        graph.add_processor(
            ProcessorSpec(name=name, supplier=lambda: make(name, params), parents=(source,))
        )
        graph.add_store(store_factory(store, mat, grouped.key_serde, value_serde), name)
        if mat.store_name is None:
            graph.note_generated(name, store)
        if grouped.name is None and mat.store_name is None:
            graph.note_generated(name, topic)
        key_serde = mat.key_serde or grouped.key_serde
        table = builder.handles.table(name, key_serde, mat.value_serde or value_serde, params)
        table.queryable_store_name = mat.store_name
        return table

    def count(
        self, materialized: Materialized | None = None, *, named: Named | str | None = None
    ) -> KTable[K, int]:
        """Count the rows per group (a row leaving a group decrements it).

        Example:
            >>> users.group_by(lambda u, region: (region, u)).count()  # doctest: +SKIP
        """
        return self._aggregate(
            KTABLE_AGGREGATE,
            materialized=materialized,
            named=named,
            make=lambda n, p: TableAggregateProcessor(
                n, p, initializer=count_init, adder=count_add, subtractor=count_sub
            ),
            value_serde=Serdes.Long(),
        )

    def reduce(
        self,
        adder: Callable[[V, V], V],
        subtractor: Callable[[V, V], V],
        materialized: Materialized | None = None,
        *,
        named: Named | str | None = None,
    ) -> KTable[K, V]:
        """Combine per group: ``adder(agg, new)`` and ``subtractor(agg, old)``.

        Example:
            >>> t.group_by(sel).reduce(lambda a, v: a + v, lambda a, v: a - v)  # doctest: +SKIP
        """
        return self._aggregate(
            KTABLE_REDUCE,
            materialized=materialized,
            named=named,
            make=lambda n, p: TableAggregateProcessor(
                n, p, initializer=None, adder=adder, subtractor=subtractor, reducing=True
            ),
            value_serde=self.grouped.value_serde,
        )

    def aggregate(
        self,
        initializer: Callable[[], A],
        adder: Callable[[K, V, A], A],
        subtractor: Callable[[K, V, A], A],
        materialized: Materialized | None = None,
        *,
        named: Named | str | None = None,
    ) -> KTable[K, A]:
        """Fold per group from ``initializer()``: ``adder(key, new, agg)`` and
        ``subtractor(key, old, agg)``.

        Example:
            >>> t.group_by(sel).aggregate(
            ...     lambda: 0, lambda k, v, a: a + v, lambda k, v, a: a - v
            ... )  # doctest: +SKIP
        """
        return self._aggregate(
            KTABLE_AGGREGATE,
            materialized=materialized,
            named=named,
            make=lambda n, p: TableAggregateProcessor(
                n, p, initializer=initializer, adder=adder, subtractor=subtractor
            ),
            value_serde=None,
        )
