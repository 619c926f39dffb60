"""Cogrouped streams (Kafka's KIP-150): several grouped streams folded into one aggregate
per key, each with its own aggregator, in one store.

``KGroupedStream.cogroup(aggregator)`` starts a :class:`CogroupedKStream`;
``cogroup(grouped_stream, aggregator)`` adds a stream; ``aggregate(initializer)`` (or a
windowed aggregate, :mod:`topology.dsl.cogroup_windowed`) records, in the order Kafka's
``CogroupedStreamAggregateBuilder`` burns names:

1. the store (``COGROUPKSTREAM-AGGREGATE-STATE-STORE-N`` unless ``Materialized`` names it);
2. for each grouped stream whose key was changed, a repartition topic named after its
   ``Grouped`` name or else the store, made once per cogroup (a later aggregation of the
   same cogroup reads it again, burning the three names Kafka burns);
3. one aggregate processor per grouped stream (``COGROUPKSTREAM-AGGREGATE-N`` or
   ``<named>-cogroup-agg-<i>``), every one writing the one store;
4. a pass-through merge node (``COGROUPKSTREAM-MERGE-N`` or ``<named>-cogroup-merge``) under
   all of them: the result table.

Cogrouping a grouped stream a second time replaces its aggregator and keeps its place, as
Kafka's map does. Where this differs from Kafka, and why:

* Handles are immutable (the DSL records, each method returns a new handle): ``cogroup``
  returns a new handle where Kafka's returns the same one, mutated. A cogroup, the handles
  derived from it and their windowed views share the repartitions already made, as
  Kafka's one handle does.
* The topics the aggregate processors read (a repartition topic for a re-keyed stream,
  else its source topics) must be co-partitioned (:meth:`Topology.check_copartitioning`;
  the runtime gives such a repartition topic the other topics' count). Kafka groups the
  grouped streams' *upstream* source topics instead, so a re-keyed stream's own input
  topic must match the others there, which its repartition makes unnecessary.
* The store's and the table's key serde, unless ``Materialized`` gives one, is the first
  grouped stream's; Kafka's is none (the default serde), though the grouped streams share
  their key type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from common.errors import TopologyError
from common.serdes import Serde
from topology.api.options import Materialized, Named, name_of
from topology.api.processor import Processor
from topology.api.windows import SessionWindows, SlidingWindows, TimeWindows, UnlimitedWindows
from topology.dsl.cogroup_windowed import (
    Aggregator,
    SessionWindowedCogroupedKStream,
    TimeWindowedCogroupedKStream,
    check_options,
    require,
    require_function,
)
from topology.dsl.materialize import store_factory
from topology.dsl.repartition import create_repartitioned_source
from topology.graph.graph import ProcessorSpec
from topology.graph.naming import COGROUP_AGGREGATE, COGROUP_MERGE, FILTER, SINK, SOURCE
from topology.graph.stores import StoreFactory
from topology.processors.proc_cogroup import CogroupAggregateProcessor
from topology.processors.proc_stream import PassThroughProcessor
from topology.processors.proc_table import TableParams

if TYPE_CHECKING:
    from topology.dsl.builder import StreamsBuilder
    from topology.dsl.grouped import KGroupedStream
    from topology.dsl.ktable import KTable

K = TypeVar("K")
VOut = TypeVar("VOut")

#: ``(node name, params, aggregator) -> processor``: one grouped stream's aggregate node.
MakeProcessor = Callable[[str, TableParams, Aggregator], Processor[Any, Any, Any, Any]]
#: ``(store name, materialized) -> store factory``.
MakeStore = Callable[[str, Materialized], StoreFactory]


class CogroupedKStream(Generic[K, VOut]):
    """Grouped streams aggregated together: one aggregator per stream, one initializer,
    one store, one result table.

    Example:
        >>> clicks.group_by_key().cogroup(lambda k, v, agg: agg + 1).cogroup(
        ...     views.group_by_key(), lambda k, v, agg: agg + 10
        ... ).aggregate(lambda: 0)  # doctest: +SKIP
    """

    def __init__(
        self,
        builder: StreamsBuilder,
        patterns: tuple[tuple[KGroupedStream[K, Any], Aggregator], ...],
        repartitions: dict[int, tuple[KGroupedStream[K, Any], str]],
    ) -> None:
        self.builder = builder
        #: Each grouped stream with its aggregator, in the order they were cogrouped.
        self.patterns = patterns
        #: The repartition source made for a re-keyed grouped stream (by its identity),
        #: shared by the handles of one cogroup as Kafka's one handle shares it.
        self._repartitions = repartitions

    @classmethod
    def start(
        cls, grouped: KGroupedStream[K, Any], aggregator: Aggregator
    ) -> CogroupedKStream[K, Any]:
        """Return a new cogroup of ``grouped`` alone (``KGroupedStream.cogroup``)."""
        require_function(aggregator, "aggregator", "KGroupedStream.cogroup")
        return CogroupedKStream(grouped.builder, ((grouped, aggregator),), {})

    def cogroup(
        self, grouped_stream: KGroupedStream[K, Any], aggregator: Aggregator
    ) -> CogroupedKStream[K, VOut]:
        """Add ``grouped_stream``, folded in with ``aggregator(key, value, aggregate)``.

        Raises:
            TopologyError: ``grouped_stream`` or ``aggregator`` is missing, or the stream
                is not a grouped stream of this builder (fatal).

        Example:
            >>> g1.cogroup(lambda k, v, a: a + v).cogroup(
            ...     g2, lambda k, v, a: a - v
            ... )  # doctest: +SKIP
        """
        where = "CogroupedKStream.cogroup"
        require(grouped_stream, "grouped_stream", where)
        require_function(aggregator, "aggregator", where)
        if not callable(getattr(grouped_stream, "aggregate_with", None)):
            raise TopologyError(
                f"{where}: grouped_stream must be a KGroupedStream, "
                f"got {type(grouped_stream).__name__}"
            )
        if grouped_stream.builder is not self.builder:
            raise TopologyError(
                f"{where}: grouped_stream belongs to another StreamsBuilder; cogroup "
                "streams of one builder"
            )
        patterns = list(self.patterns)
        for i, (grouped, _) in enumerate(patterns):
            if grouped is grouped_stream:
                patterns[i] = (grouped, aggregator)
                break
        else:
            patterns.append((grouped_stream, aggregator))
        return CogroupedKStream(self.builder, tuple(patterns), self._repartitions)

    def aggregate(
        self,
        initializer: Callable[[], VOut],
        materialized: Materialized | None = None,
        named: Named | str | None = None,
    ) -> KTable[K, VOut]:
        """Fold every grouped stream's records into one aggregate per key, from
        ``initializer()``. Give the aggregate's serde with ``Materialized.with_value_serde``.

        Raises:
            TopologyError: ``initializer`` is missing or an option has the wrong type
                (fatal).

        Example:
            >>> cogrouped.aggregate(lambda: "", Materialized.as_("totals"))  # doctest: +SKIP
        """
        where = "CogroupedKStream.aggregate"
        require_function(initializer, "initializer", where)
        check_options(materialized, named, where)

        def make(name: str, params: TableParams, aggregator: Aggregator) -> Any:
            return CogroupAggregateProcessor(name, params, initializer, aggregator)

        key_serde = self.key_serde

        def make_store(name: str, mat: Materialized) -> StoreFactory:
            return store_factory(name, mat, key_serde, None)

        return self.build(
            materialized=materialized, named=named, make_processor=make, make_store=make_store
        )

    @overload
    def windowed_by(self, windows: SessionWindows) -> SessionWindowedCogroupedKStream[K, VOut]: ...

    @overload
    def windowed_by(
        self, windows: TimeWindows | SlidingWindows | UnlimitedWindows
    ) -> TimeWindowedCogroupedKStream[K, VOut]: ...

    def windowed_by(
        self, windows: TimeWindows | SlidingWindows | UnlimitedWindows | SessionWindows
    ) -> TimeWindowedCogroupedKStream[K, VOut] | SessionWindowedCogroupedKStream[K, VOut]:
        """Aggregate per key and window (time, sliding, unlimited) or session; the result
        table is keyed by ``Windowed[K]``.

        Raises:
            TopologyError: ``windows`` is missing or of another kind (fatal).

        Example:
            >>> cogrouped.windowed_by(TimeWindows.of_size_with_no_grace(500)).aggregate(
            ...     lambda: ""
            ... )  # doctest: +SKIP
        """
        require(windows, "windows", "CogroupedKStream.windowed_by")
        if isinstance(windows, SessionWindows):
            return SessionWindowedCogroupedKStream(self, windows)
        if isinstance(windows, TimeWindows | SlidingWindows | UnlimitedWindows):
            return TimeWindowedCogroupedKStream(self, windows)
        raise TopologyError(
            "CogroupedKStream.windowed_by: expected TimeWindows, SlidingWindows, "
            f"UnlimitedWindows or SessionWindows, got {type(windows).__name__}"
        )

    @property
    def key_serde(self) -> Serde[Any] | None:
        """The key serde of the store and the table unless ``Materialized`` gives one: the
        first grouped stream's (Kafka's is the default serde; see the module docstring)."""
        return self.patterns[0][0].key_serde

    def build(
        self,
        *,
        materialized: Materialized | None,
        named: Named | str | None,
        make_processor: MakeProcessor,
        make_store: MakeStore,
    ) -> KTable[Any, Any]:
        """Record the store, the repartitions, one aggregate node per grouped stream and
        the merge node (see the module docstring); return the merge node's table."""
        builder, mat = self.builder, materialized or Materialized()
        names, graph = builder.names, builder.graph
        store = mat.store_name or names.new_store_name(COGROUP_AGGREGATE)
        factory = make_store(store, mat)
        parents = [self._parent(grouped, store, mat) for grouped, _ in self.patterns]
        name, params = name_of(named), TableParams(store_name=store)
        nodes: list[str] = []
        for i, ((_, aggregator), parent) in enumerate(zip(self.patterns, parents, strict=True)):
            node = names.suffixed_or_generate(name, f"-cogroup-agg-{i}", COGROUP_AGGREGATE)
            graph.add_processor(
                ProcessorSpec(
                    name=node,
                    supplier=_supplier(make_processor, node, params, aggregator),
                    parents=(parent,),
                )
            )
            if i == 0:
                graph.add_store(factory, node)
            else:
                graph.connect_store(node, store)
            nodes.append(node)
        merge = names.suffixed_or_generate(name, "-cogroup-merge", COGROUP_MERGE)
        graph.add_processor(
            ProcessorSpec(name=merge, supplier=PassThroughProcessor, parents=tuple(nodes))
        )
        if mat.store_name is None:
            graph.note_generated(nodes[0], store)
        if len(parents) > 1:
            sources: set[str] = set()
            for parent in parents:
                sources |= graph.source_nodes_of(parent)
            graph.add_copartition_group(merge, sources)
        key_serde = mat.key_serde or self.key_serde
        table = builder.handles.table(merge, key_serde, mat.value_serde, params)
        table.queryable_store_name = mat.store_name
        return table

    def _parent(self, grouped: KGroupedStream[K, Any], store: str, mat: Materialized) -> str:
        """The node the aggregate of ``grouped`` reads: its repartition source when its key
        was changed (made once per cogroup; Kafka burns the names again), else itself."""
        if not grouped.repartition_required:
            return grouped.node
        made = self._repartitions.get(id(grouped))
        if made is not None and made[0] is grouped:
            names = self.builder.names
            for prefix in (SINK, FILTER, SOURCE):
                names.new_processor_name(prefix)
            return made[1]
        source = create_repartitioned_source(
            self.builder,
            grouped.node,
            grouped.grouped_name or store,
            grouped.key_serde,
            grouped.value_serde,
            user_named=grouped.grouped_name is not None or mat.store_name is not None,
        )
        self._repartitions[id(grouped)] = (grouped, source)
        return source


def _supplier(
    make: MakeProcessor, name: str, params: TableParams, aggregator: Aggregator
) -> Callable[[], Processor[Any, Any, Any, Any]]:
    """The node's processor supplier (a closure per node, not per loop)."""
    return lambda: make(name, params, aggregator)
