"""Records the stream operators that end in a table or outside the topology:
``KStream.to_table`` (Kafka's ``toTable``, KIP-523) and ``KStream.print``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from topology.api.options import Materialized, Printed
from topology.dsl.materialize import store_factory
from topology.dsl.repartition import create_repartitioned_source
from topology.graph.graph import ProcessorSpec
from topology.graph.naming import PRINTER, TOTABLE
from topology.processors.proc_stream import PrintProcessor
from topology.processors.proc_table import TableParams, TableSourceProcessor

if TYPE_CHECKING:
    from topology.dsl.kstream import KStream
    from topology.dsl.ktable import KTable


def record_to_table(
    stream: KStream[Any, Any], named: str | None, materialized: Materialized | None
) -> KTable[Any, Any]:
    """Record ``stream.to_table``: a table-source node under the stream (under its
    repartition topic's source when the key was changed), stored on demand. Names come in
    Kafka's order: the node, its store, then the repartition's sink, filter and source."""
    builder = stream.builder
    names = builder.names
    name = names.name_or_generate(named, TOTABLE)
    mat = materialized or Materialized()
    store = mat.store_name or names.new_store_name(TOTABLE)
    key_serde = mat.key_serde or stream.key_serde
    value_serde = mat.value_serde or stream.value_serde
    parent = stream.node
    if stream.repartition_required:
        parent = create_repartitioned_source(
            builder, stream.node, name, key_serde, value_serde, user_named=named is not None
        )
    params = TableParams()
    builder.graph.add_processor(
        ProcessorSpec(
            name=name, supplier=lambda: TableSourceProcessor(name, params), parents=(parent,)
        )
    )
    table = builder.handles.table(name, key_serde, value_serde, params)
    table.store_on_demand(
        store_factory(store, mat, key_serde, value_serde), named=mat.store_name is not None
    )
    return table


def record_print(stream: KStream[Any, Any], printed: Printed) -> None:
    """Record ``stream.print``: a printing node under the stream, labelled with the
    stream's node name unless ``printed`` names a label."""
    builder = stream.builder
    name = builder.names.name_or_generate(printed.name, PRINTER)
    label = printed.label if printed.label is not None else stream.node
    builder.graph.add_processor(
        ProcessorSpec(
            name=name,
            supplier=lambda: PrintProcessor(name, label, printed.mapper, printed.path),
            parents=(stream.node,),
        )
    )
