"""Recording the joins of a stream (stream-stream, stream-table, stream-global-table) into
the graph: node names in Kafka's order, repartitioning of a stream whose key changed,
stores, and the co-partitioning requirement of each join. ``KStream.join`` & co. call
these functions; table-table joins are recorded by :mod:`topology.dsl.join_table_build`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from common.errors import TopologyError
from topology.api.options import Joined, StreamJoined
from topology.dsl.repartition import copartition, create_repartitioned_source
from topology.graph.graph import ProcessorSpec
from topology.graph.naming import FILTER, MERGE, SINK, SOURCE, suffixed
from topology.graph.stores import KeyValueStoreFactory
from topology.processors.join_grace import BufferKeySerde
from topology.processors.join_stream import (
    JoinWindowProcessor,
    JoinWindowStoreFactory,
    OuterJoinStoreFactory,
    SideSpec,
    StreamStreamJoinProcessor,
    TimeTrackers,
)
from topology.processors.join_table import StreamTableJoinProcessor
from topology.processors.joins import (
    JOIN,
    JOINOTHER,
    JOINTHIS,
    LEFTJOIN,
    OUTEROTHER,
    OUTERSHARED,
    OUTERTHIS,
    WINDOWED,
    GetterSupplier,
    JoinWindows,
    StoreGetter,
    keyed_joiner,
)
from topology.processors.proc_stream import PassThroughProcessor
from topology.processors.proc_suppress import BufferValueSerde

if TYPE_CHECKING:
    from topology.dsl.kstream import KStream
    from topology.dsl.ktable import GlobalKTable, KTable


def _repartitioned(
    stream: KStream[Any, Any], prefix: str, value_serde: Any, key_serde: Any, user_named: bool
) -> KStream[Any, Any]:
    """Return ``stream`` itself, or read back through a repartition topic when its key
    was changed (Kafka's ``repartitionForJoin``)."""
    if not stream.repartition_required:
        return stream
    key_serde = key_serde or stream.key_serde
    value_serde = value_serde or stream.value_serde
    builder = stream.builder
    if prefix == stream.node and stream.join_repartition is not None:
        # joined again under its own name: the same repartition topic, read by the same
        # source; the names advance all the same, as Kafka's do (topology compatibility)
        for kind in (SINK, FILTER, SOURCE):
            builder.names.new_processor_name(kind)
        source = stream.join_repartition
    else:
        source = create_repartitioned_source(
            builder, stream.node, prefix, key_serde, value_serde, user_named=user_named
        )
        if prefix == stream.node:
            stream.join_repartition = source
    return builder.handles.stream(source, key_serde, value_serde, repartition_required=False)


def _check_supplier(supplier: Any, windows: JoinWindows) -> None:
    if not getattr(supplier, "retain_duplicates", False):
        raise TopologyError(f"Store {supplier.name}: a join store supplier must retain duplicates")
    if (supplier.retention_ms, supplier.window_size_ms) != (windows.retention_ms, windows.size_ms):
        raise TopologyError(
            f"Store {supplier.name}: retention {supplier.retention_ms} ms and window size "
            f"{supplier.window_size_ms} ms must match the JoinWindows ({windows.retention_ms} "
            f"ms = size + grace, {windows.size_ms} ms)"
        )


@dataclass(frozen=True, slots=True)
class _StreamJoinNames:
    """The node names of a stream-stream join, generated in Kafka's order."""

    this_windowed: str
    other_windowed: str
    this_generated: str  # always generated: default store names derive from it
    other_generated: str
    this_join: str
    other_join: str
    merge: str
    this_suffix: str
    other_suffix: str

    @classmethod
    def make(
        cls, names: Any, name: str | None, left_outer: bool, right_outer: bool
    ) -> _StreamJoinNames:
        this_suffix = "-outer-this-join" if right_outer else "-this-join"
        other_suffix = "-outer-other-join" if left_outer else "-other-join"
        this_windowed = names.suffixed_or_generate(name, "-this-windowed", WINDOWED)
        other_windowed = names.suffixed_or_generate(name, "-other-windowed", WINDOWED)
        this_generated = names.new_processor_name(OUTERTHIS if right_outer else JOINTHIS)
        other_generated = names.new_processor_name(OUTEROTHER if left_outer else JOINOTHER)
        return cls(
            this_windowed,
            other_windowed,
            this_generated,
            other_generated,
            this_generated if name is None else name + this_suffix,
            other_generated if name is None else name + other_suffix,
            names.suffixed_or_generate(name, "-merge", MERGE),
            this_suffix,
            other_suffix,
        )


def _window_stores(
    sj: StreamJoined, n: _StreamJoinNames, windows: JoinWindows, serdes: tuple[Any, Any, Any]
) -> list[JoinWindowStoreFactory]:
    key_serde, this_serde, other_serde = serdes
    this_supplier, other_supplier = sj.this_store_supplier, sj.other_store_supplier
    both = this_supplier is not None and other_supplier is not None
    if both and this_supplier.name == other_supplier.name:  # type: ignore[union-attr]
        raise TopologyError("Both join store suppliers have the same name; give unique names")
    stores = []
    for supplier, base, suffix, serde in (
        (this_supplier, n.this_generated, n.this_suffix, this_serde),
        (other_supplier, n.other_generated, n.other_suffix, other_serde),
    ):
        if supplier is not None:
            _check_supplier(supplier, windows)
            store_name = supplier.name
        else:
            store_name = (base if sj.store_name is None else sj.store_name + suffix) + "-store"
        stores.append(
            JoinWindowStoreFactory(
                name=store_name,
                key_serde=key_serde,
                value_serde=serde,
                retention_ms=windows.retention_ms,
                window_size_ms=windows.size_ms,
                supplier=supplier,
                logging_enabled=sj.logging_enabled,
                logging_config=sj.logging_config,
            )
        )
    return stores


def _outer_store(
    sj: StreamJoined, n: _StreamJoinNames, right_outer: bool, serdes: tuple[Any, Any, Any]
) -> OuterJoinStoreFactory:
    tail = "-outer-shared-join" if right_outer else "-left-shared-join"
    if sj.this_store_supplier is not None:
        name = sj.this_store_supplier.name + tail
    elif sj.store_name is not None:
        name = sj.store_name + tail
    else:
        name = OUTERSHARED + n.this_generated[len(OUTERTHIS if right_outer else JOINTHIS) :]
    return OuterJoinStoreFactory(
        name=name + "-store",
        key_serde=serdes[0],
        left_serde=serdes[1],
        right_serde=serdes[2],
        persistent=getattr(sj.this_store_supplier, "persistent", None),
        logging_enabled=sj.logging_enabled,
        logging_config=sj.logging_config,
    )


def _side(
    name: str, is_left: bool, outer: bool, stores: tuple[str, str | None], windows: JoinWindows
) -> SideSpec:
    before, after = windows.before_ms, windows.after_ms
    return SideSpec(
        name=name,
        is_left=is_left,
        outer=outer,
        other_store=stores[0],
        outer_store=stores[1],
        join_before_ms=before if is_left else after,
        join_after_ms=after if is_left else before,
        windows_before_ms=before,
        windows_after_ms=after,
        grace_ms=windows.grace_ms,
    )


def stream_stream_join(
    this: KStream[Any, Any],
    other: KStream[Any, Any],
    joiner: Callable[..., Any],
    windows: JoinWindows,
    joined: StreamJoined | None,
    *,
    left_outer: bool,
    right_outer: bool,
    with_key: bool,
) -> KStream[Any, Any]:
    """Record a windowed stream-stream join; return the joined stream (the merge node)."""
    if not isinstance(windows, JoinWindows):
        raise TopologyError(f"a stream-stream join needs JoinWindows, got {windows!r}")
    sj = joined or StreamJoined()
    builder, graph, name = this.builder, this.builder.graph, sj.name
    left_prefix, right_prefix = (
        suffixed(name, "-left", lambda: this.node),
        suffixed(name, "-right", lambda: other.node),
    )
    this = _repartitioned(this, left_prefix, sj.value_serde, sj.key_serde, name is not None)
    other = _repartitioned(
        other, right_prefix, sj.other_value_serde, sj.key_serde, name is not None
    )
    n = _StreamJoinNames.make(builder.names, name, left_outer, right_outer)
    key_serde = sj.key_serde or this.key_serde
    serdes = (
        key_serde,
        sj.value_serde or this.value_serde,
        sj.other_value_serde or other.value_serde,
    )
    this_store, other_store = _window_stores(sj, n, windows, serdes)
    outer = _outer_store(sj, n, right_outer, serdes) if left_outer else None
    outer_name = None if outer is None else outer.name
    this_spec = _side(n.this_join, True, left_outer, (other_store.name, outer_name), windows)
    other_spec = _side(n.other_join, False, right_outer, (this_store.name, outer_name), windows)
    user, trackers = keyed_joiner(joiner, with_key), TimeTrackers()
    for windowed, parent, store in (
        (n.this_windowed, this.node, this_store.name),
        (n.other_windowed, other.node, other_store.name),
    ):
        graph.add_processor(
            ProcessorSpec(
                name=windowed,
                supplier=partial(JoinWindowProcessor, store),
                parents=(parent,),
            )
        )
    for join, windowed, spec in (
        (n.this_join, n.this_windowed, this_spec),
        (n.other_join, n.other_windowed, other_spec),
    ):
        graph.add_processor(
            ProcessorSpec(
                name=join,
                supplier=partial(StreamStreamJoinProcessor, spec, user, joiner, trackers),
                parents=(windowed,),
            )
        )
    graph.add_processor(
        ProcessorSpec(
            name=n.merge, supplier=PassThroughProcessor, parents=(n.this_join, n.other_join)
        )
    )
    graph.add_store(this_store, n.this_windowed, n.other_join)
    graph.add_store(other_store, n.other_windowed, n.this_join)
    if outer is not None:
        graph.add_store(outer, n.this_join, n.other_join)
    if sj.store_name is None and this_store.supplier is None:
        graph.note_generated(n.this_join, this_store.name)
    copartition(n.this_join, this, other)
    return builder.handles.stream(n.merge, key_serde, None, repartition_required=False)


def _check_grace(stores: Any, names: tuple[str, ...], grace: int) -> None:
    """Refuse a grace period over a table that is not versioned, or longer than its
    history retention (Kafka's checks, at join time here)."""
    versioned = [stores[s] for s in names if getattr(stores.get(s), "kind", "") == "versioned"]
    if not versioned:
        raise TopologyError(
            "KTable must be versioned to use a grace period in a stream table join."
        )
    if any(f.supplier.history_retention_ms < grace for f in versioned):
        raise TopologyError("History retention must be at least grace period.")


def stream_table_join(
    this: KStream[Any, Any],
    table: KTable[Any, Any],
    joiner: Callable[..., Any],
    joined: Joined | None,
    *,
    left: bool,
    with_key: bool,
) -> KStream[Any, Any]:
    """Record a stream-table join; return the joined stream."""
    jd = joined or Joined()
    this = _repartitioned(
        this, jd.name or this.node, jd.value_serde, jd.key_serde, jd.name is not None
    )
    builder = this.builder
    getter = table.value_getter()
    name = builder.names.name_or_generate(jd.name, LEFTJOIN if left else JOIN)
    grace, buffer = jd.grace_ms, None
    if grace is not None:  # KIP-923: stream records wait for the versioned table
        _check_grace(builder.graph.stores, getter.store_names, grace)
        buffer = KeyValueStoreFactory(
            name=name + "-Buffer",
            key_serde=BufferKeySerde(jd.key_serde or this.key_serde),
            value_serde=BufferValueSerde(jd.value_serde or this.value_serde),
            caching_enabled=False,
            timestamped=False,
        )
    user = keyed_joiner(joiner, with_key)
    builder.graph.add_processor(
        ProcessorSpec(
            name=name,
            parents=(this.node,),
            stores=getter.store_names,
            supplier=lambda: StreamTableJoinProcessor(
                name,
                getter,
                None,
                user,
                joiner,
                left,
                grace,
                None if buffer is None else buffer.name,
            ),
        )
    )
    if buffer is not None:
        builder.graph.add_store(buffer, name)
    copartition(name, this, table)
    key_serde = jd.key_serde or this.key_serde
    return builder.handles.stream(name, key_serde, None, repartition_required=False)


def stream_global_join(
    this: KStream[Any, Any],
    table: GlobalKTable,
    key_selector: Callable[[Any, Any], Any],
    joiner: Callable[..., Any],
    *,
    left: bool,
    with_key: bool,
    named: str | None,
) -> KStream[Any, Any]:
    """Record a stream-global-table join (no co-partitioning, no repartition: the table
    is complete on every instance); return the joined stream."""
    builder = this.builder
    store = table.store_name
    getter = GetterSupplier((), lambda: StoreGetter(store))
    name = builder.names.name_or_generate(named, LEFTJOIN)  # Kafka's prefix for inner joins too
    user = keyed_joiner(joiner, with_key)
    builder.graph.add_processor(
        ProcessorSpec(
            name=name,
            parents=(this.node,),
            supplier=lambda: StreamTableJoinProcessor(
                name, getter, key_selector, user, joiner, left
            ),
        )
    )
    return builder.handles.stream(
        name, this.key_serde, None, repartition_required=this.repartition_required
    )
