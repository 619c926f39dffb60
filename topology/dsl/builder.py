"""``StreamsBuilder``: the entry point of the DSL.

Example:
    >>> from common.serdes import Serdes
    >>> b = StreamsBuilder()
    >>> (b.stream("words", Consumed.with_(Serdes.String(), Serdes.String()))
    ...   .flat_map_values(str.split)
    ...   .group_by(lambda k, w: w)
    ...   .count(Materialized.as_("counts"))
    ...   .to_stream()
    ...   .to("word-counts"))
    >>> topology = b.build()

The builder is the one place that knows both handle classes: a handle, or a recorder of
joins, aggregations, branches and suppression, makes the stream or table it returns through
``builder.handles`` (:class:`HandleFactory`). So an aggregation makes a ``KTable`` and
``KTable.to_stream`` a ``KStream`` while the DSL modules import each other one way only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from common.config import StreamsConfig, topology_config
from common.errors import TopologyError
from common.serdes import Serde
from statestores.api import StoreBuilder
from statestores.stores import VersionedBytesStoreSupplier
from topology.api.options import Consumed, Materialized
from topology.api.processor import ProcessorSupplier
from topology.dsl.kstream import KStream
from topology.dsl.ktable import GlobalKTable, KTable
from topology.dsl.materialize import store_factory
from topology.graph.graph import GlobalStoreSpec, GraphBuilder, ProcessorSpec, SourceSpec
from topology.graph.naming import KTABLE_SOURCE, SOURCE, NameProvider
from topology.graph.stores import BuilderStoreFactory
from topology.graph.topology import Topology
from topology.processors.proc_table import TableParams, TableSourceProcessor


class HandleFactory:
    """Makes the stream and table handles of one builder's nodes (``builder.handles``)."""

    __slots__ = ("_builder",)

    def __init__(self, builder: StreamsBuilder) -> None:
        self._builder = builder

    def stream(
        self,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        *,
        repartition_required: bool,
    ) -> KStream[Any, Any]:
        """Return the stream of ``node``; ``repartition_required``: its key was changed,
        so a grouping or a join repartitions it first."""
        return KStream(self._builder, node, key_serde, value_serde, repartition_required)

    def table(
        self,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        params: TableParams,
    ) -> KTable[Any, Any]:
        """Return the table of ``node``, whose processor reads ``params``."""
        return KTable(self._builder, node, key_serde, value_serde, params)


class StreamsBuilder:
    """Record a topology with the DSL, then :meth:`build` it.

    Args:
        config: the application's :class:`~common.config.StreamsConfig`, or dotted keys
            (the application's, or only the topology's; Kafka's ``TopologyConfig``):
            ``ensure.explicit.internal.resource.naming=true`` makes :meth:`build` refuse
            generated names of state stores, changelog and repartition topics.

    Raises:
        ConfigError: a key of ``config`` is unknown or its value bad.
    """

    def __init__(self, config: StreamsConfig | Mapping[str, object] | None = None) -> None:
        self.graph = GraphBuilder()
        self.names = NameProvider()
        self.graph.generated_names = self.names.generated
        self.handles = HandleFactory(self)
        keys = topology_config(config)
        self.graph.require_explicit_names = keys.ensure_explicit_internal_resource_naming

    def stream(
        self, topics: str | Sequence[str] | re.Pattern[str], consumed: Consumed | None = None
    ) -> KStream[Any, Any]:
        """Read one topic, several, or every topic matching a pattern.

        Example:
            >>> StreamsBuilder().stream("input").filter(lambda k, v: v is not None)
            KStream(KSTREAM-FILTER-0000000001)
        """
        consumed = consumed or Consumed()
        name = self.names.name_or_generate(consumed.name, SOURCE)
        pattern = topics if isinstance(topics, re.Pattern) else None
        names: tuple[str, ...] = ()
        if isinstance(topics, str):
            names = (topics,)
        elif not isinstance(topics, re.Pattern):
            names = tuple(topics)
        self.graph.add_source(_source(name, names, pattern, consumed))
        return self.handles.stream(
            name, consumed.key_serde, consumed.value_serde, repartition_required=False
        )

    def table(
        self,
        topic: str,
        consumed: Consumed | None = None,
        materialized: Materialized | None = None,
    ) -> KTable[Any, Any]:
        """Read ``topic`` as a changelog: the latest value per key; ``None`` deletes.

        The table is stored (queryable) when ``materialized`` names a store, or when a
        downstream operator needs old values.

        Example:
            >>> t = StreamsBuilder().table("users", materialized=Materialized.as_("users"))
            >>> t.queryable_store_name
            'users'
        """
        consumed = consumed or Consumed()
        mat = materialized or Materialized()
        store = mat.store_name or self.names.new_store_name(topic + "-")
        source = self.names.name_or_generate(consumed.name, SOURCE)
        node = (
            f"{consumed.name}-table-source"
            if consumed.name
            else self.names.new_processor_name(KTABLE_SOURCE)
        )
        self.graph.add_source(_source(source, (topic,), None, consumed))
        params = TableParams()
        self.graph.add_processor(
            ProcessorSpec(
                name=node, supplier=lambda: TableSourceProcessor(node, params), parents=(source,)
            )
        )
        table = self.handles.table(
            node,
            mat.key_serde or consumed.key_serde,
            mat.value_serde or consumed.value_serde,
            params,
        )
        factory = store_factory(store, mat, consumed.key_serde, consumed.value_serde)
        table.store_on_demand(factory, named=mat.store_name is not None)
        return table

    def global_table(
        self,
        topic: str,
        consumed: Consumed | None = None,
        materialized: Materialized | None = None,
    ) -> GlobalKTable:
        """Read ``topic`` fully into a store on every instance (no changelog: the topic is
        the changelog); joins read it by key.

        Example:
            >>> b = StreamsBuilder()
            >>> b.global_table("rates", materialized=Materialized.as_("rates")).store_name
            'rates'

        Raises:
            TopologyError: ``materialized`` gives a versioned store (as Kafka's).
        """
        consumed = consumed or Consumed()
        if materialized is not None and isinstance(
            materialized.supplier, VersionedBytesStoreSupplier
        ):
            raise TopologyError(
                f"GlobalTables cannot be versioned: the global table of topic {topic} is "
                f"materialized in the versioned store {materialized.supplier.name}"
            )
        mat = (materialized or Materialized()).with_logging_disabled()
        store = mat.store_name or self.names.new_store_name(topic + "-")
        source = self.names.name_or_generate(consumed.name, SOURCE)
        node = self.names.new_processor_name(KTABLE_SOURCE)
        self.graph.add_source(_source(source, (topic,), None, consumed))
        params = TableParams(store_name=store)
        self.graph.add_processor(
            ProcessorSpec(
                name=node, supplier=lambda: TableSourceProcessor(node, params), parents=(source,)
            )
        )
        factory = store_factory(store, mat, consumed.key_serde, consumed.value_serde)
        self.graph.add_global_store(GlobalStoreSpec(source, node, store, topic), factory)
        return GlobalKTable(store, topic)

    def add_global_store(
        self,
        store_builder: StoreBuilder,
        topic: str,
        state_update_supplier: ProcessorSupplier,
        consumed: Consumed | None = None,
        *,
        processor_name: str | None = None,
    ) -> StreamsBuilder:
        """Fill a global store from ``topic`` with a Processor-API processor (Kafka's
        ``addGlobalStore``); return this builder.

        Every instance reads the whole topic into the store and ``state_update_supplier()``
        builds the processor that writes it (it forwards nothing). The topic is the
        store's changelog, so logging is disabled on ``store_builder``. Processors of the
        other sub-topologies read the store by name, read-only. ``consumed`` gives the
        serdes, the timestamp extractor and the source's name; ``processor_name`` names
        the processor (default ``KTABLE-SOURCE-<n>``, as Kafka's).

        Example:
            >>> from statestores.stores import Stores
            >>> from common.serdes import Serdes
            >>> s = Serdes.String()
            >>> store = Stores.key_value_store_builder(
            ...     Stores.in_memory_key_value_store("rates"), s, s)
            >>> StreamsBuilder().add_global_store(store, "rates", Updater)  # doctest: +SKIP
        """
        if not isinstance(store_builder, StoreBuilder):
            raise TopologyError(f"add_global_store needs a StoreBuilder, got {store_builder!r}")
        consumed = consumed or Consumed()
        disable = getattr(store_builder, "with_logging_disabled", None)
        if store_builder.logging_enabled:
            if disable is None:
                raise TopologyError(
                    f"StateStore {store_builder.name} for a global store must not have "
                    "logging enabled: the global topic is its changelog"
                )
            store_builder = disable()
        source = self.names.name_or_generate(consumed.name, SOURCE)
        node = self.names.name_or_generate(processor_name, KTABLE_SOURCE)
        self.graph.add_source(_source(source, (topic,), None, consumed))
        self.graph.add_processor(
            ProcessorSpec(
                name=node, supplier=state_update_supplier, parents=(source,), user_code=True
            )
        )
        factory = BuilderStoreFactory(store_builder)
        self.graph.add_global_store(
            GlobalStoreSpec(source, node, store_builder.name, topic), factory
        )
        return self

    def add_state_store(self, builder: StoreBuilder) -> StreamsBuilder:
        """Add a store that Processor-API processors connect to by name (``process(...,
        "store")``); return this builder."""
        if not isinstance(builder, StoreBuilder):
            raise TopologyError(f"add_state_store needs a StoreBuilder, got {builder!r}")
        self.graph.add_store(BuilderStoreFactory(builder))
        return self

    def build(self) -> Topology:
        """Validate the recorded graph and return the frozen :class:`Topology`.

        Raises:
            TopologyError: A store is unknown or a name is reused (the message names the
                node), or explicit naming is required and an internal resource has a
                generated name (the message lists them all, as Kafka's).
        """
        return Topology(self.graph)


def _source(
    name: str, topics: tuple[str, ...], pattern: re.Pattern[str] | None, consumed: Consumed
) -> SourceSpec:
    return SourceSpec(
        name=name,
        topics=topics,
        pattern=pattern,
        key_serde=consumed.key_serde,
        value_serde=consumed.value_serde,
        timestamp_extractor=consumed.timestamp_extractor,
        offset_reset=consumed.offset_reset,
    )
