"""``KTable.suppress``: what it holds back (``Suppressed``), the buffer's bound
(``BufferConfig``), and the recording of the suppress node, whose processor is
:class:`~topology.processors.proc_suppress.SuppressProcessor`.

* ``Suppressed.until_window_closes(config)``: emit each window's final result once stream
  time passes its end plus the grace of the windowed aggregation upstream (sessions: gap +
  grace).
* ``Suppressed.until_time_limit(limit, config)``: emit a key's latest update ``limit`` after
  its first buffered update.

The buffer is mirrored into an in-memory key-value store (changelogged unless the
``BufferConfig`` disables logging) named ``<name>-store``, or a generated name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Self

from common.errors import TopologyError
from statestores.stores import Stores
from topology.api.windows import Duration, to_ms
from topology.graph.graph import ProcessorSpec
from topology.graph.stores import KeyValueStoreFactory
from topology.processors.joins import GetterSupplier
from topology.processors.proc_suppress import (
    BufferValueSerde,
    SuppressedGetter,
    SuppressProcessor,
)
from topology.processors.proc_table import TableParams

if TYPE_CHECKING:
    from topology.dsl.ktable import KTable

KTABLE_SUPPRESS = "KTABLE-SUPPRESS-"
_UNBOUNDED = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class BufferConfig:
    """The bound of a suppression buffer and what happens when it is exceeded.

    Example:
        >>> BufferConfig.max_records(100).shut_down_when_full().emit_early
        False
    """

    record_limit: int = _UNBOUNDED
    byte_limit: int = _UNBOUNDED
    emit_early: bool = False
    logging_enabled: bool = True
    logging_config: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def unbounded(cls) -> BufferConfig:
        """No bound (the buffer grows with the open windows); never emits early."""
        return cls()

    @classmethod
    def max_records(cls, n: int) -> BufferConfig:
        """At most ``n`` keys; emits the oldest early when full (change with
        :meth:`shut_down_when_full`)."""
        return cls(record_limit=_check(n, "max records"), emit_early=True)

    @classmethod
    def max_bytes(cls, n: int) -> BufferConfig:
        """At most about ``n`` bytes of keys and values; emits the oldest early when full."""
        return cls(byte_limit=_check(n, "max bytes"), emit_early=True)

    def with_max_records(self, n: int) -> Self:
        """Return a copy bounded to ``n`` keys."""
        return replace(self, record_limit=_check(n, "max records"))

    def with_max_bytes(self, n: int) -> Self:
        """Return a copy bounded to about ``n`` bytes."""
        return replace(self, byte_limit=_check(n, "max bytes"))

    def with_no_bound(self) -> Self:
        """Return an unbounded copy that never emits early."""
        return replace(self, record_limit=_UNBOUNDED, byte_limit=_UNBOUNDED, emit_early=False)

    def shut_down_when_full(self) -> Self:
        """Return a copy that stops the application when the buffer is full."""
        return replace(self, emit_early=False)

    shutdown_when_full = shut_down_when_full

    def emit_early_when_full(self) -> Self:
        """Return a copy that emits the oldest entries early when the buffer is full."""
        return replace(self, emit_early=True)

    def with_logging_disabled(self) -> Self:
        """Return a copy whose buffer has no changelog (lost on failure)."""
        return replace(self, logging_enabled=False, logging_config={})

    def with_logging_enabled(self, config: Mapping[str, str] | None = None) -> Self:
        """Return a copy whose buffer is changelogged (``config``: topic settings)."""
        return replace(self, logging_enabled=True, logging_config=dict(config or {}))


def _check(n: int, what: str) -> int:
    if n < 0:
        raise ValueError(f"{what} must not be negative, got {n}")
    return n


@dataclass(frozen=True, slots=True)
class Suppressed:
    """What ``KTable.suppress`` holds back and for how long.

    Example:
        >>> Suppressed.until_time_limit(1000, BufferConfig.max_records(10)).time_limit_ms
        1000
    """

    final_results: bool
    time_limit_ms: int
    buffer_config: BufferConfig
    name: str | None = None

    @classmethod
    def until_window_closes(cls, buffer_config: BufferConfig) -> Suppressed:
        """Emit only the final result of each window, when it closes (windowed tables).

        Raises:
            TopologyError: ``buffer_config`` emits early (final results need a buffer that
                shuts down when full, e.g. ``BufferConfig.unbounded()``).
        """
        if buffer_config.emit_early:
            raise TopologyError(
                "Suppressed.until_window_closes needs a strict buffer: use "
                "BufferConfig.unbounded() or .shut_down_when_full(), not emit-early"
            )
        return cls(True, 0, buffer_config)

    @classmethod
    def until_time_limit(cls, time_to_wait: Duration, buffer_config: BufferConfig) -> Suppressed:
        """Emit a key's latest update ``time_to_wait`` after its first buffered update."""
        wait = to_ms(time_to_wait, "time to wait for more events")
        if wait < 0:
            raise ValueError(f"time to wait for more events must not be negative, got {wait}")
        return cls(False, wait, buffer_config)

    def with_name(self, name: str) -> Self:
        """Return a copy naming the suppress node (its store is ``<name>-store``)."""
        return replace(self, name=name)


def suppress_table(
    table: KTable[Any, Any], suppressed: Suppressed, versioned_store: str | None = None
) -> KTable[Any, Any]:
    """Record a suppress node under ``table`` (see :meth:`topology.dsl.ktable.KTable.suppress`)
    and return its table. ``versioned_store``: the versioned store that makes ``table``
    versioned, if any (:meth:`~topology.dsl.ktable.KTable.versioned_store`).

    Raises:
        TopologyError: ``until_window_closes`` under a table that is not windowed; a table
            materialized in a versioned store (Kafka refuses to suppress one; a table that
            inherits versioning from upstream is refused by ``build()``, as Kafka's).
    """
    builder = table.builder
    names, graph = builder.names, builder.graph
    name = suppressed.name or names.new_processor_name(KTABLE_SUPPRESS)
    if versioned_store is not None:
        reason = f"Processor {name}: suppress() is only supported for non-versioned KTables"
        if table.params.store_name == versioned_store:
            raise TopologyError(
                f"{reason}; {table.node} is materialized in the versioned store {versioned_store}"
            )
        graph.defer_error(
            f"{reason} (note that version semantics might be inherited from upstream): "
            f"{table.node} is versioned through the upstream store {versioned_store}"
        )
    final, wait = suppressed.final_results, suppressed.time_limit_ms
    if final:  # a window's final result waits for the window to close
        if table.window_grace_ms is None:
            raise TopologyError(
                f"Processor {name}: suppress(until_window_closes) needs a windowed table; "
                f"window close time is only defined for windowed computations, got "
                f"{table.node}"
            )
        wait = table.window_grace_ms
    store = f"{suppressed.name}-store" if suppressed.name else names.new_store_name(KTABLE_SUPPRESS)
    config = suppressed.buffer_config
    graph.add_processor(
        ProcessorSpec(
            name=name,
            supplier=lambda: SuppressProcessor(
                name, store, final_results=final, wait_ms=wait, limits=config
            ),
            parents=(table.node,),
        )
    )
    factory = KeyValueStoreFactory(
        name=store,
        key_serde=table.key_serde,
        value_serde=BufferValueSerde(table.value_serde),
        supplier=Stores.in_memory_key_value_store(store),
        caching_enabled=False,
        logging_enabled=config.logging_enabled,
        logging_config=config.logging_config,
        timestamped=False,
    )
    graph.add_store(factory, name)
    if suppressed.name is None:
        graph.note_generated(name, store)
    params = TableParams()
    result = builder.handles.table(name, table.key_serde, table.value_serde, params)
    result.window_grace_ms = table.window_grace_ms

    def enable() -> None:
        params.send_old_values = True
        table.enable_send_old_values()

    result._enable_old = enable
    # the buffer keeps each key's prior value (its old value when first buffered): the
    # parent sends old values, as Kafka's KTableSuppressProcessorSupplier asks of it
    table.enable_send_old_values()
    result._view = lambda: _suppressed_view(table, store)
    return result


def _suppressed_view(table: KTable[Any, Any], store: str) -> GetterSupplier:
    """How a join reads the suppressed table (Kafka's ``KTableSuppressProcessorSupplier``
    ``view()``): the buffer first, then ``table``; connected to the buffer's store and to
    those the parent's getter reads."""
    parent = table.value_getter()
    return GetterSupplier(
        (store, *parent.store_names), lambda: SuppressedGetter(store, parent.make())
    )
