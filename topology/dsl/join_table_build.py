"""Recording a table-table equi-join (Kafka's ``KTableKTable{Inner,Left,Outer}Join``):
one join node per side reading the other side through its value getter, and a merge node,
stored when ``Materialized`` is given; the processors are in
:mod:`topology.processors.join_table`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from topology.api.options import Materialized
from topology.dsl.materialize import store_factory
from topology.dsl.repartition import copartition
from topology.graph.graph import ProcessorSpec
from topology.processors.join_table import (
    TableJoinGetter,
    TableJoinMergeProcessor,
    TableJoinMode,
    TableTableJoinProcessor,
)
from topology.processors.joins import (
    KTABLE_JOINOTHER,
    KTABLE_JOINTHIS,
    KTABLE_MERGE,
    GetterSupplier,
)
from topology.processors.proc_table import TableParams

if TYPE_CHECKING:
    from topology.dsl.ktable import KTable

_MODES: dict[tuple[bool, bool], tuple[TableJoinMode, TableJoinMode]] = {
    (False, False): ("inner", "inner"),
    (True, False): ("left", "right"),
    (True, True): ("outer", "outer"),
}


def table_table_join(
    this: KTable[Any, Any],
    other: KTable[Any, Any],
    joiner: Callable[[Any, Any], Any],
    materialized: Materialized | None,
    named: str | None,
    *,
    left_outer: bool,
    right_outer: bool,
) -> KTable[Any, Any]:
    """Record a table-table equi-join; return the joined table (the merge node)."""
    builder = this.builder
    names, graph = builder.names, builder.graph
    store = None
    if materialized is not None:
        store = materialized.store_name or names.new_store_name(KTABLE_MERGE)
    merge = names.name_or_generate(named, KTABLE_MERGE)
    if left_outer:
        this.enable_send_old_values()
    if right_outer:
        other.enable_send_old_values()
    this_mode, other_mode = _MODES[(left_outer, right_outer)]
    this_name = names.suffixed_or_generate(named, "-join-this", KTABLE_JOINTHIS)
    other_name = names.suffixed_or_generate(named, "-join-other", KTABLE_JOINOTHER)
    this_getter, other_getter = this.value_getter(), other.value_getter()
    params = TableParams()
    graph.add_processor(
        ProcessorSpec(
            name=this_name,
            parents=(this.node,),
            stores=other_getter.store_names,
            supplier=lambda: TableTableJoinProcessor(
                this_name, this_mode, True, other_getter, joiner, params
            ),
        )
    )
    graph.add_processor(
        ProcessorSpec(
            name=other_name,
            parents=(other.node,),
            stores=this_getter.store_names,
            supplier=lambda: TableTableJoinProcessor(
                other_name, other_mode, False, this_getter, joiner, params
            ),
        )
    )
    graph.add_processor(
        ProcessorSpec(
            name=merge,
            parents=(this_name, other_name),
            supplier=lambda: TableJoinMergeProcessor(params),
        )
    )
    copartition(this_name, this, other)
    mat = materialized or Materialized()
    key_serde = mat.key_serde or this.key_serde
    table = builder.handles.table(merge, key_serde, mat.value_serde, params)
    if store is not None:
        graph.add_store(store_factory(store, mat, key_serde, mat.value_serde), merge)
        params.store_name = store
        table.queryable_store_name = mat.store_name
        if mat.store_name is None:
            graph.note_generated(merge, store)

    def enable_old() -> None:
        params.send_old_values = True
        this.enable_send_old_values()
        other.enable_send_old_values()

    def view() -> GetterSupplier:
        stores = tuple(dict.fromkeys(this_getter.store_names + other_getter.store_names))
        return GetterSupplier(
            stores,
            lambda: TableJoinGetter(this_mode, this_getter.make(), other_getter.make(), joiner),
        )

    table._enable_old = enable_old
    table._view = view
    return table
