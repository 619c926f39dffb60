"""Recording a foreign-key join (KIP-213) into the graph, with Kafka's node, store and
internal topic names (``doJoinOnForeignKey``); the processors are in
:mod:`topology.processors.join_fk`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from topology.api.options import ForeignKeyExtractor, Materialized
from topology.dsl.materialize import store_factory
from topology.graph.graph import ProcessorSpec, RepartitionTopicSpec, SinkSpec, SourceSpec
from topology.graph.naming import SINK, SOURCE
from topology.graph.stores import KeyValueStoreFactory
from topology.processors.join_fk import (
    FK_JOIN_OUTPUT,
    RESPONSE_RESOLVER,
    SUBSCRIPTION_PROCESSOR,
    SUBSCRIPTION_REGISTRATION,
    SUBSCRIPTION_RESPONSE,
    SUBSCRIPTION_STATE_STORE,
    ForeignTableJoinProcessor,
    ResponseJoinProcessor,
    SubscriptionJoinProcessor,
    SubscriptionReceiveProcessor,
    SubscriptionSendProcessor,
)
from topology.processors.join_fk_wire import (
    CombinedKeySerde,
    FkSerdes,
    ResponseSerde,
    SubscriptionSerde,
)
from topology.processors.proc_table import TableParams, TableSourceProcessor

if TYPE_CHECKING:
    from topology.dsl.ktable import KTable


def _internal_topic(
    builder: Any, topic: str, parents: tuple[str, ...], nodes: tuple[str, str], serdes: Any
) -> None:
    """Add ``parents -> sink -> topic -> source`` (an internal topic, app-id prefixed)."""
    graph = builder.graph
    graph.add_repartition_topic(RepartitionTopicSpec(topic))
    key_serde, value_serde = serdes
    graph.add_sink(
        SinkSpec(
            name=nodes[0],
            parents=parents,
            topic=topic,
            key_serde=key_serde,
            value_serde=value_serde,
            internal=True,
        )
    )
    graph.add_source(
        SourceSpec(
            name=nodes[1],
            topics=(topic,),
            key_serde=key_serde,
            value_serde=value_serde,
            internal=True,
        )
    )


def foreign_key_join(  # noqa: PLR0917 - Kafka's join has this many parts
    this: KTable[Any, Any],
    other: KTable[Any, Any],
    extractor: Callable[[Any], Any] | ForeignKeyExtractor,
    joiner: Callable[[Any, Any], Any],
    materialized: Materialized | None,
    named: str | None,
    *,
    left: bool,
) -> KTable[Any, Any]:
    """Record a foreign-key join of ``this`` (the left, primary-key table) with ``other``
    (keyed by the foreign key); return the joined table keyed by the primary key."""
    names = this.builder.names
    other.enable_send_old_values()  # as Kafka: deletions reach the old foreign key
    this.enable_send_old_values()

    def name(suffix: str, prefix: str) -> str:
        return names.suffixed_or_generate(named, suffix, prefix)

    sub_topic = name("-subscription-registration", SUBSCRIPTION_REGISTRATION) + "-topic"
    serdes = FkSerdes(this.key_serde, other.key_serde, this.value_serde, other.value_serde)
    serdes.topic = sub_topic
    send = name("-subscription-registration-processor", SUBSCRIPTION_REGISTRATION)
    _add(
        this,
        send,
        (this.node,),
        (),
        lambda: SubscriptionSendProcessor(send, serdes, extractor, left),
    )
    sub_nodes = (
        name("-subscription-registration-sink", SINK),
        name("-subscription-registration-source", SOURCE),
    )
    sub_serdes = (other.key_serde, SubscriptionSerde(serdes))
    _internal_topic(this.builder, sub_topic, (send,), sub_nodes, sub_serdes)
    return _foreign_side(this, other, joiner, materialized, name, serdes, sub_nodes[1], left)


def _add(
    table: Any, node: str, parents: tuple[str, ...], stores: tuple[str, ...], make: Any
) -> None:
    table.builder.graph.add_processor(
        ProcessorSpec(name=node, parents=parents, stores=stores, supplier=make)
    )


def _foreign_side(  # noqa: PLR0917 - the second half of foreign_key_join
    this: KTable[Any, Any],
    other: KTable[Any, Any],
    joiner: Callable[[Any, Any], Any],
    materialized: Materialized | None,
    name: Callable[[str, str], str],
    serdes: FkSerdes,
    sub_source: str,
    left: bool,
) -> KTable[Any, Any]:
    graph, keys = this.builder.graph, CombinedKeySerde(serdes)
    store = name("-subscription-store", SUBSCRIPTION_STATE_STORE)
    graph.add_store(
        KeyValueStoreFactory(
            name=store,
            key_serde=keys,
            value_serde=SubscriptionSerde(serdes),
            caching_enabled=False,
        )
    )
    receive = name("-subscription-receive", SUBSCRIPTION_PROCESSOR)
    _add(
        this,
        receive,
        (sub_source,),
        (store,),
        lambda: SubscriptionReceiveProcessor(receive, serdes, store),
    )
    graph.add_copartition_group(receive, graph.source_nodes_of(other.node) | {sub_source})
    foreign = other.value_getter()
    sub_join = name("-subscription-join-foreign", SUBSCRIPTION_PROCESSOR)
    _add(
        this,
        sub_join,
        (receive,),
        foreign.store_names,
        lambda: SubscriptionJoinProcessor(sub_join, serdes, foreign),
    )
    foreign_join = name("-foreign-join-subscription", SUBSCRIPTION_PROCESSOR)
    _add(
        this,
        foreign_join,
        (other.node,),
        (store,),
        lambda: ForeignTableJoinProcessor(foreign_join, serdes, store, keys),
    )
    response_topic = name("-subscription-response", SUBSCRIPTION_RESPONSE) + "-topic"
    nodes = (
        name("-subscription-response-sink", SINK),
        name("-subscription-response-source", SOURCE),
    )
    _internal_topic(
        this.builder,
        response_topic,
        (sub_join, foreign_join),
        nodes,
        (this.key_serde, ResponseSerde(serdes)),
    )
    graph.add_copartition_group(nodes[1], graph.source_nodes_of(this.node) | {nodes[1]})
    primary = this.value_getter()
    resolver = name("-subscription-response-resolver", RESPONSE_RESOLVER)
    _add(
        this,
        resolver,
        (nodes[1],),
        primary.store_names,
        lambda: ResponseJoinProcessor(resolver, serdes, primary, joiner, left),
    )
    return _result(this, resolver, materialized, name)


def _result(
    this: KTable[Any, Any],
    parent: str,
    materialized: Materialized | None,
    name: Callable[[str, str], str],
) -> KTable[Any, Any]:
    """The result table: a table source over the resolver's output, stored when
    ``materialized`` names a store (a store name is always reserved, as Kafka's)."""
    builder, mat = this.builder, materialized or Materialized()
    node = name("-result", FK_JOIN_OUTPUT)
    store = mat.store_name or builder.names.new_store_name(FK_JOIN_OUTPUT)
    params = TableParams()
    _add(this, node, (parent,), (), lambda: TableSourceProcessor(node, params))
    key_serde = mat.key_serde or this.key_serde
    table = builder.handles.table(node, key_serde, mat.value_serde, params)
    table.store_on_demand(
        store_factory(store, mat, key_serde, mat.value_serde), named=mat.store_name is not None
    )
    return table
