"""``KStream``: the record-stream handle of the DSL (stateless operators, sinks, the
Processor API, grouping). Every method adds one named node and returns a new handle."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from common.delta_rows import RowColumns, RowKeySerde, RowValueSerde, sink_topic
from common.serdes import Serde
from topology.api.options import (
    Grouped,
    Materialized,
    Named,
    Printed,
    Produced,
    Repartitioned,
    name_of,
)
from topology.api.processor import Processor, ProcessorSupplier
from topology.dsl.branch import BranchedKStream
from topology.dsl.cogroup_windowed import require, require_function
from topology.dsl.grouped import KGroupedStream
from topology.dsl.repartition import create_repartitioned_source
from topology.dsl.stream_joins import StreamJoins
from topology.dsl.stream_tables import record_print, record_to_table
from topology.graph.graph import ProcessorSpec, SinkSpec, TopicNameExtractor
from topology.graph.naming import (
    FILTER,
    FLATMAP,
    FLATMAPVALUES,
    FOREACH,
    KEY_SELECT,
    MAP,
    MAPVALUES,
    MERGE,
    PEEK,
    PROCESSOR,
    PROCESSVALUES,
    REPARTITION,
    SINK,
)
from topology.processors.proc_stream import (
    FilterProcessor,
    FlatMapProcessor,
    FlatMapValuesProcessor,
    MapProcessor,
    MapValuesProcessor,
    PassThroughProcessor,
    PeekProcessor,
    SelectKeyProcessor,
)

if TYPE_CHECKING:
    from topology.dsl.builder import StreamsBuilder
    from topology.dsl.ktable import KTable

K = TypeVar("K")
V = TypeVar("V")
K2 = TypeVar("K2")
V2 = TypeVar("V2")


class KStream(StreamJoins, Generic[K, V]):
    """A stream of records. Build one with ``StreamsBuilder.stream``."""

    def __init__(
        self,
        builder: StreamsBuilder,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        repartition_required: bool,
    ) -> None:
        self.builder = builder
        self.node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.repartition_required = repartition_required
        #: The source reading this stream's repartition topic for joins, once a join
        #: created it under the stream's own (generated) name: later joins read it too
        #: (Kafka's ``KStreamImpl.repartitionNode``).
        self.join_repartition: str | None = None

    def __repr__(self) -> str:
        return f"KStream({self.node})"

    def _add(
        self,
        prefix: str,
        named: Named | str | None,
        supplier: Callable[[str], Processor[Any, Any, Any, Any]],
        *,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        repartition: bool,
    ) -> KStream[Any, Any]:
        name = self.builder.names.name_or_generate(name_of(named), prefix)
        self.builder.graph.add_processor(
            ProcessorSpec(name=name, supplier=lambda: supplier(name), parents=(self.node,))
        )
        return KStream(self.builder, name, key_serde, value_serde, repartition)

    def filter(
        self, predicate: Callable[[K, V], bool], *, named: Named | str | None = None
    ) -> KStream[K, V]:
        """Keep the records for which ``predicate(key, value)`` is true.

        Example:
            >>> stream.filter(lambda k, v: v > 0)  # doctest: +SKIP
        """
        require_function(predicate, "predicate", "KStream.filter")
        return self._add(
            FILTER,
            named,
            lambda n: FilterProcessor(n, predicate, False),
            key_serde=self.key_serde,
            value_serde=self.value_serde,
            repartition=self.repartition_required,
        )

    def filter_not(
        self, predicate: Callable[[K, V], bool], *, named: Named | str | None = None
    ) -> KStream[K, V]:
        """Drop the records for which ``predicate(key, value)`` is true.

        Example:
            >>> stream.filter_not(lambda k, v: v is None)  # doctest: +SKIP
        """
        require_function(predicate, "predicate", "KStream.filter_not")
        return self._add(
            FILTER,
            named,
            lambda n: FilterProcessor(n, predicate, True),
            key_serde=self.key_serde,
            value_serde=self.value_serde,
            repartition=self.repartition_required,
        )

    def map(
        self, mapper: Callable[[K, V], tuple[K2, V2]], *, named: Named | str | None = None
    ) -> KStream[K2, V2]:
        """Replace each record by ``mapper(key, value) -> (key, value)``; marks the stream
        for repartitioning before a grouping.

        Example:
            >>> stream.map(lambda k, v: (v, k))  # doctest: +SKIP
        """
        require_function(mapper, "mapper", "KStream.map")
        return self._add(
            MAP,
            named,
            lambda n: MapProcessor(n, mapper),
            key_serde=None,
            value_serde=None,
            repartition=True,
        )

    def map_values(
        self,
        mapper: Callable[..., V2],
        *,
        with_key: bool = False,
        named: Named | str | None = None,
    ) -> KStream[K, V2]:
        """Replace each value by ``mapper(value)`` (``mapper(key, value)`` with
        ``with_key=True``; the key is read-only).

        Example:
            >>> stream.map_values(str.upper)  # doctest: +SKIP
        """
        require_function(mapper, "mapper", "KStream.map_values")
        return self._add(
            MAPVALUES,
            named,
            lambda n: MapValuesProcessor(n, mapper, with_key),
            key_serde=self.key_serde,
            value_serde=None,
            repartition=self.repartition_required,
        )

    def flat_map(
        self,
        mapper: Callable[[K, V], Iterable[tuple[K2, V2]]],
        *,
        named: Named | str | None = None,
    ) -> KStream[K2, V2]:
        """Replace each record by the ``(key, value)`` pairs of ``mapper(key, value)``.

        Example:
            >>> stream.flat_map(lambda k, v: [(w, 1) for w in v.split()])  # doctest: +SKIP
        """
        require_function(mapper, "mapper", "KStream.flat_map")
        return self._add(
            FLATMAP,
            named,
            lambda n: FlatMapProcessor(n, mapper),
            key_serde=None,
            value_serde=None,
            repartition=True,
        )

    def flat_map_values(
        self,
        mapper: Callable[..., Iterable[V2]],
        *,
        with_key: bool = False,
        named: Named | str | None = None,
    ) -> KStream[K, V2]:
        """Replace each record by one record per value of ``mapper(value)`` (or
        ``mapper(key, value)``), keeping the key.

        Example:
            >>> stream.flat_map_values(str.split)  # doctest: +SKIP
        """
        require_function(mapper, "mapper", "KStream.flat_map_values")
        return self._add(
            FLATMAPVALUES,
            named,
            lambda n: FlatMapValuesProcessor(n, mapper, with_key),
            key_serde=self.key_serde,
            value_serde=None,
            repartition=self.repartition_required,
        )

    def select_key(
        self, mapper: Callable[[K, V], K2], *, named: Named | str | None = None
    ) -> KStream[K2, V]:
        """Set each record's key to ``mapper(key, value)``.

        Example:
            >>> stream.select_key(lambda k, v: v["user"])  # doctest: +SKIP
        """
        require_function(mapper, "mapper", "KStream.select_key")
        return self._add(
            KEY_SELECT,
            named,
            lambda n: SelectKeyProcessor(n, mapper),
            key_serde=None,
            value_serde=self.value_serde,
            repartition=True,
        )

    def peek(
        self, action: Callable[[K, V], None], *, named: Named | str | None = None
    ) -> KStream[K, V]:
        """Call ``action(key, value)`` for each record and pass it on unchanged.

        Example:
            >>> stream.peek(lambda k, v: print(k, v))  # doctest: +SKIP
        """
        require_function(action, "action", "KStream.peek")
        return self._add(
            PEEK,
            named,
            lambda n: PeekProcessor(n, action, False),
            key_serde=self.key_serde,
            value_serde=self.value_serde,
            repartition=self.repartition_required,
        )

    def foreach(self, action: Callable[[K, V], None], *, named: Named | str | None = None) -> None:
        """Call ``action(key, value)`` for each record (a terminal operation).

        Example:
            >>> stream.foreach(lambda k, v: seen.append(v))  # doctest: +SKIP
        """
        require_function(action, "action", "KStream.foreach")
        self._add(
            FOREACH,
            named,
            lambda n: PeekProcessor(n, action, True),
            key_serde=None,
            value_serde=None,
            repartition=False,
        )

    def print(self, printed: Printed) -> None:
        """Print each record as ``[label]: key, value`` (Kafka's ``KStream.print``; see
        :class:`~topology.api.options.Printed`), a terminal operation.

        Example:
            >>> stream.print(Printed.to_sys_out().with_label("orders"))  # doctest: +SKIP
        """
        require(printed, "printed", "KStream.print")
        record_print(self, printed)

    def to_table(
        self, *, named: Named | str | None = None, materialized: Materialized | None = None
    ) -> KTable[K, V]:
        """Read this stream as a changelog (Kafka's ``KStream.toTable``, KIP-523): the
        latest value per key, ``None`` deletes; through a repartition topic first when
        the key was changed. Stored (queryable) when ``materialized`` names a store, or
        once a downstream operator needs it.

        Example:
            >>> stream.to_table(materialized=Materialized.as_("latest"))  # doctest: +SKIP
        """
        return record_to_table(self, name_of(named), materialized)

    def split(self, *, named: Named | str | None = None) -> BranchedKStream[K, V]:
        """Split into branches by predicates: ``split().branch(p, Branched.as_("a"))
        .default_branch()`` returns the branches by name (``<split name><branch name>``).

        Example:
            >>> split = stream.split(named="s-").branch(lambda k, v: v > 0)  # doctest: +SKIP
            >>> branches = split.default_branch()  # {"s-1": ..., "s-0": ...}  # doctest: +SKIP
        """
        return BranchedKStream(self, name_of(named))

    def merge(self, other: KStream[K, V], *, named: Named | str | None = None) -> KStream[K, V]:
        """Interleave this stream and ``other`` into one.

        Example:
            >>> stream.merge(other)  # doctest: +SKIP
        """
        require(other, "other", "KStream.merge")
        name = self.builder.names.name_or_generate(name_of(named), MERGE)
        self.builder.graph.add_processor(
            ProcessorSpec(name=name, supplier=PassThroughProcessor, parents=(self.node, other.node))
        )
        required = self.repartition_required or other.repartition_required
        return KStream(self.builder, name, None, None, required)

    def repartition(self, repartitioned: Repartitioned | None = None) -> KStream[K, V]:
        """Write the stream through a repartition topic (``<application.id>-<name>-
        repartition``), partitioned by key or by ``Repartitioned.with_stream_partitioner``.

        Example:
            >>> by_user = Repartitioned.as_("by-user").with_number_of_partitions(4)
            >>> stream.repartition(by_user)  # doctest: +SKIP
        """
        rep = repartitioned or Repartitioned()
        prefix = rep.name or self.builder.names.new_processor_name(REPARTITION)
        key_serde = rep.key_serde or self.key_serde
        value_serde = rep.value_serde or self.value_serde
        source = create_repartitioned_source(
            self.builder,
            self.node,
            prefix,
            key_serde,
            value_serde,
            user_named=rep.name is not None,
            partitioner=rep.partitioner,
            num_partitions=rep.num_partitions,
        )
        return KStream(self.builder, source, key_serde, value_serde, False)

    def to(self, topic: str | TopicNameExtractor, produced: Produced | None = None) -> None:
        """Write the stream to ``topic``, or to the topic ``topic(key, value, context)``
        names for each record.

        Example:
            >>> produced = Produced.with_(Serdes.String(), Serdes.Long())
            >>> stream.to("output", produced)  # doctest: +SKIP
        """
        require(topic, "topic", "KStream.to")
        produced = produced or Produced()
        name = self.builder.names.name_or_generate(produced.name, SINK)
        fixed = topic if isinstance(topic, str) else None
        self.builder.graph.add_sink(
            SinkSpec(
                name=name,
                parents=(self.node,),
                topic=fixed,
                topic_extractor=None if isinstance(topic, str) else topic,
                key_serde=produced.key_serde or self.key_serde,
                value_serde=produced.value_serde or self.value_serde,
                partitioner=produced.partitioner,
            )
        )

    def to_delta(self, table: str, mode: str = "append", *, named: str | None = None) -> None:
        """Write the stream to the Delta table ``table`` as typed rows, in each batch's
        transaction: a ``key`` column (a windowed key adds ``window_start`` and
        ``window_end``), the value's fields as columns when it is a dict, a dataclass or a
        pydantic model (else one ``value`` column), and ``timestamp``.

        ``table`` is a name (the table lives under ``<topics.root>/tables/``), a local
        path, or a URI on the root's object store. ``mode="append"`` adds every record as
        a row; ``mode="upsert"`` keeps one row per key (the latest) and a record with a
        ``None`` value deletes its key's row. The table is created by the first batch
        that writes it, and a new value field becomes a new column.

        Example:
            >>> stream.to_delta("clicks-enriched")  # doctest: +SKIP
        """
        cols = RowColumns()
        produced = Produced.with_(RowKeySerde(cols), RowValueSerde(cols))
        if named is not None:
            produced = produced.with_name(named)
        self.to(sink_topic(table, mode), produced)

    def process(
        self,
        supplier: ProcessorSupplier,
        *stores: str,
        named: Named | str | None = None,
    ) -> KStream[Any, Any]:
        """Run a Processor-API processor (``supplier()`` builds one per task) connected to
        ``stores``; what it forwards forms the new stream.

        Example:
            >>> stream.process(Dedup, "seen-store")  # doctest: +SKIP
        """
        require_function(supplier, "supplier", "KStream.process")
        # a given name burns no index (Kafka's ``new NamedInternal(named).name()``)
        name = name_of(named) or self.builder.names.new_processor_name(PROCESSOR)
        self.builder.graph.add_processor(
            ProcessorSpec(
                name=name, supplier=supplier, parents=(self.node,), stores=stores, user_code=True
            )
        )
        return KStream(self.builder, name, None, None, True)

    def process_values(
        self,
        supplier: ProcessorSupplier,
        *stores: str,
        named: Named | str | None = None,
    ) -> KStream[K, Any]:
        """Like :meth:`process` for a :class:`~topology.api.processor.FixedKeyProcessor`:
        forwarded records keep their key, so no repartition is needed.

        Example:
            >>> stream.process_values(Enrich, "profiles")  # doctest: +SKIP
        """
        require_function(supplier, "supplier", "KStream.process_values")
        # a given name burns no index (Kafka's ``new NamedInternal(named).name()``)
        name = name_of(named) or self.builder.names.new_processor_name(PROCESSVALUES)
        self.builder.graph.add_processor(
            ProcessorSpec(
                name=name,
                supplier=supplier,
                parents=(self.node,),
                stores=stores,
                user_code=True,
                fixed_key=True,
            )
        )
        return KStream(self.builder, name, self.key_serde, None, self.repartition_required)

    def group_by_key(self, grouped: Grouped | None = None) -> KGroupedStream[K, V]:
        """Group by the current key (repartitioning first if the key was changed).

        Example:
            >>> stream.group_by_key().count()  # doctest: +SKIP
        """
        grouped = grouped or Grouped()
        return KGroupedStream(
            self.builder,
            self.node,
            grouped.key_serde or self.key_serde,
            grouped.value_serde or self.value_serde,
            repartition_required=self.repartition_required,
            grouped_name=grouped.name,
        )

    def group_by(
        self, selector: Callable[[K, V], K2], grouped: Grouped | None = None
    ) -> KGroupedStream[K2, V]:
        """Group by ``selector(key, value)``; a repartition topic is added before the
        aggregation.

        Example:
            >>> stream.group_by(lambda k, word: word).count()  # doctest: +SKIP
        """
        require_function(selector, "selector", "KStream.group_by")
        grouped = grouped or Grouped()
        selected = self._add(
            KEY_SELECT,
            grouped.name,
            lambda n: SelectKeyProcessor(n, selector),
            key_serde=None,
            value_serde=self.value_serde,
            repartition=True,
        )
        return KGroupedStream(
            self.builder,
            selected.node,
            grouped.key_serde,
            grouped.value_serde or self.value_serde,
            repartition_required=True,
            grouped_name=grouped.name,
        )
