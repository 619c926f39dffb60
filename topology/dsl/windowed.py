"""Windowed grouped streams: ``KGroupedStream.windowed_by(...)`` and their aggregations.

``windowed_by(TimeWindows | SlidingWindows | UnlimitedWindows)`` returns a
:class:`TimeWindowedKStream`, ``windowed_by(SessionWindows)`` a
:class:`SessionWindowedKStream`. Their ``count``/``reduce``/``aggregate`` record one node
through :meth:`topology.dsl.grouped.KGroupedStream.aggregate_with` (store name, node name and
repartition as Kafka burns them) with a window or session store, and return a
``KTable[Windowed[K], V]`` whose key serde is the windowed serde of the grouping's key
serde.

The store keeps windows for ``Materialized.with_retention`` ms of stream time, by default
the least the windows need (see :mod:`topology.api.windows`); a smaller retention raises
:class:`~common.errors.TopologyError` naming the store. :func:`window_store_maker` makes
that store, here and for the windowed cogroups (:mod:`topology.dsl.cogroup_windowed`).

``emit_strategy(EmitStrategy.on_window_close())`` records that the aggregation forwards
each window once, when it closes (Kafka's KIP-825), instead of every update; a session
store is then not cached (as Kafka's), and a windowed count is not combined before a
shuffle.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from common.errors import TopologyError
from common.serdes import Serde, Serdes
from statestores.api import Windowed
from topology.api.emit import ON_WINDOW_UPDATE, EmitStrategy
from topology.api.options import Materialized, Named
from topology.api.processor import Processor
from topology.api.windowed_serdes import SessionWindowedSerde, TimeWindowedSerde
from topology.api.windows import SessionWindows, SlidingWindows, TimeWindows, UnlimitedWindows
from topology.graph.naming import AGGREGATE, REDUCE
from topology.graph.stores import SessionStoreFactory, StoreFactory, WindowStoreFactory
from topology.processors.proc_aggregate import count_add, count_init
from topology.processors.proc_session import SessionWindowAggregateProcessor
from topology.processors.proc_sliding import SlidingWindowAggregateProcessor
from topology.processors.proc_table import TableParams
from topology.processors.proc_window import (
    TimeWindowAggregateProcessor,
    none_initializer,
    reducer_aggregator,
)

if TYPE_CHECKING:
    from topology.dsl.grouped import KGroupedStream
    from topology.dsl.ktable import KTable

K = TypeVar("K")
V = TypeVar("V")
A = TypeVar("A")

Windows = TimeWindows | SlidingWindows | UnlimitedWindows


def _retention(store: str, mat: Materialized, needed: int, what: str) -> int:
    """Return the store's retention; raise TopologyError if it is below ``needed``."""
    retention = mat.retention_ms
    if retention is None and mat.supplier is not None:
        retention = getattr(mat.supplier, "retention_ms", None)
    if retention is None:
        return needed
    if retention < needed:
        raise TopologyError(
            f"Store {store}: the retention period ({retention} ms) must be no smaller than "
            f"{what} ({needed} ms); raise it with Materialized.with_retention"
        )
    return retention


def window_store_maker(
    windows: Windows | SessionWindows,
    key_serde: Serde[Any] | None,
    value_serde: Serde[Any] | None = None,
    *,
    emit: EmitStrategy = ON_WINDOW_UPDATE,
) -> Callable[[str, Materialized], StoreFactory]:
    """Return the maker of a windowed aggregation's store: a session store over
    SessionWindows, else a window store of the windows' size.

    The maker takes the store's name and its ``Materialized``, whose serdes win over
    ``key_serde`` and ``value_serde``; the store keeps windows for
    ``Materialized.with_retention`` ms, by default the least ``windows`` need.

    Raises:
        TopologyError: from the maker, when the retention is below what ``windows`` need
            (fatal; the message names the store).
    """
    factory: Callable[..., StoreFactory]
    if isinstance(windows, SessionWindows):
        what, factory = "the inactivity gap plus the grace period", SessionStoreFactory
    else:
        what = (
            "2 * time difference plus the grace period"
            if isinstance(windows, SlidingWindows)
            else "its window size plus the grace period"
        )
        # Kafka's DSL stores a closing aggregation's windows in its time-ordered store
        factory = partial(
            WindowStoreFactory, window_size_ms=windows.size(), time_ordered=emit.on_close
        )
    # Kafka never caches the session or sliding-window store of a closing aggregation
    uncached = isinstance(windows, (SessionWindows, SlidingWindows)) and emit.on_close

    def make(name: str, mat: Materialized) -> StoreFactory:
        return factory(
            name=name,
            retention_ms=_retention(name, mat, windows.retention_ms(), what),
            key_serde=mat.key_serde or key_serde,
            value_serde=mat.value_serde or value_serde,
            supplier=mat.supplier,
            caching_enabled=mat.caching_enabled and not uncached,
            logging_enabled=mat.logging_enabled,
            logging_config=mat.logging_config,
        )

    return make


class TimeWindowedKStream(Generic[K, V]):
    """A grouped stream over time, sliding or unlimited windows."""

    def __init__(
        self,
        grouped: KGroupedStream[K, V],
        windows: Windows,
        emit: EmitStrategy = ON_WINDOW_UPDATE,
    ) -> None:
        self.grouped = grouped
        self.windows = windows
        self.emit = emit

    def emit_strategy(self, strategy: EmitStrategy) -> TimeWindowedKStream[K, V]:
        """Return this windowed stream with ``strategy``: forward every update (the
        default) or each window once, when it closes.

        Raises:
            ValueError: ``on_window_close()`` over UnlimitedWindows (they never close).

        Example:
            >>> s.group_by_key().windowed_by(
            ...     TimeWindows.of_size_with_no_grace(60_000)
            ... ).emit_strategy(EmitStrategy.on_window_close()).count()  # doctest: +SKIP
        """
        if isinstance(self.windows, UnlimitedWindows) and strategy.on_close:
            raise ValueError("ON_WINDOW_CLOSE emit strategy cannot be used for UnlimitedWindows")
        return TimeWindowedKStream(self.grouped, self.windows, strategy)

    def _processor(
        self, initializer: Callable[[], Any], aggregator: Callable[[Any, Any, Any], Any]
    ) -> Callable[[str, TableParams], Processor[Any, Any, Any, Any]]:
        windows, emit = self.windows, self.emit
        if isinstance(windows, SlidingWindows):
            return lambda n, p: SlidingWindowAggregateProcessor(
                n, p, windows, initializer, aggregator, emit=emit
            )
        return lambda n, p: TimeWindowAggregateProcessor(
            n, p, windows, initializer, aggregator, emit=emit
        )

    def _aggregate(  # noqa: PLR0917 - the aggregation's functions
        self,
        prefix: str,
        materialized: Materialized | None,
        named: Named | str | None,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        value_serde: Serde[Any] | None,
        combiner: str | None = None,
    ) -> KTable[Windowed[K], Any]:
        table = self.grouped.aggregate_with(
            prefix,
            materialized=materialized,
            named=named,
            make_processor=self._processor(initializer, aggregator),
            make_store=window_store_maker(
                self.windows, self.grouped.key_serde, value_serde, emit=self.emit
            ),
            value_serde=value_serde,
            combiner=combiner,
        )
        table.key_serde = TimeWindowedSerde(table.key_serde, self.windows.size())
        table.window_grace_ms = self.windows.close_grace_ms()
        return table

    def count(
        self, materialized: Materialized | None = None, *, named: Named | str | None = None
    ) -> KTable[Windowed[K], int]:
        """Count the records per key and window (null keys dropped).

        Example:
            >>> s.group_by_key().windowed_by(
            ...     TimeWindows.of_size_with_no_grace(60_000)
            ... ).count()  # doctest: +SKIP
        """
        serde = Serdes.Long()
        # over time windows, a batch's records may be combined per key and window set
        # (closing too: see topology.processors.window_count)
        combiner = None if isinstance(self.windows, SlidingWindows) else "windowed-count"
        return self._aggregate(
            AGGREGATE, materialized, named, count_init, count_add, serde, combiner
        )

    def reduce(
        self,
        reducer: Callable[[V, V], V],
        materialized: Materialized | None = None,
        *,
        named: Named | str | None = None,
    ) -> KTable[Windowed[K], V]:
        """Combine the values per key and window with ``reducer(aggregate, value)``.

        Example:
            >>> s.group_by_key().windowed_by(
            ...     TimeWindows.of_size_with_no_grace(10)
            ... ).reduce(lambda a, b: a + b)  # doctest: +SKIP
        """
        serde = self.grouped.value_serde
        aggregator = reducer_aggregator(reducer)
        return self._aggregate(REDUCE, materialized, named, none_initializer, aggregator, serde)

    def aggregate(
        self,
        initializer: Callable[[], A],
        aggregator: Callable[[K, V, A], A],
        materialized: Materialized | None = None,
        *,
        named: Named | str | None = None,
    ) -> KTable[Windowed[K], A]:
        """Fold the values per key and window: ``aggregator(key, value, agg)`` from
        ``initializer()``. Give the aggregate's serde with ``Materialized.with_value_serde``.

        Example:
            >>> s.group_by_key().windowed_by(
            ...     SlidingWindows.of_time_difference_with_no_grace(10)
            ... ).aggregate(list, lambda k, v, agg: [*agg, v])  # doctest: +SKIP
        """
        return self._aggregate(AGGREGATE, materialized, named, initializer, aggregator, None)


class SessionWindowedKStream(Generic[K, V]):
    """A grouped stream over sessions."""

    def __init__(
        self,
        grouped: KGroupedStream[K, V],
        windows: SessionWindows,
        emit: EmitStrategy = ON_WINDOW_UPDATE,
    ) -> None:
        self.grouped = grouped
        self.windows = windows
        self.emit = emit

    def emit_strategy(self, strategy: EmitStrategy) -> SessionWindowedKStream[K, V]:
        """Return this session-windowed stream with ``strategy``: forward every update
        (the default) or each session once, when it closes.

        Example:
            >>> s.group_by_key().windowed_by(
            ...     SessionWindows.of_inactivity_gap_with_no_grace(300_000)
            ... ).emit_strategy(EmitStrategy.on_window_close()).count()  # doctest: +SKIP
        """
        return SessionWindowedKStream(self.grouped, self.windows, strategy)

    def _aggregate(  # noqa: PLR0917 - the aggregation's functions
        self,
        prefix: str,
        materialized: Materialized | None,
        named: Named | str | None,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Callable[[Any, Any, Any], Any],
        value_serde: Serde[Any] | None,
    ) -> KTable[Windowed[K], Any]:
        windows, emit = self.windows, self.emit
        gap, grace = windows.gap_ms, windows.grace_ms
        table = self.grouped.aggregate_with(
            prefix,
            materialized=materialized,
            named=named,
            make_processor=lambda n, p: SessionWindowAggregateProcessor(
                n, p, gap, grace, initializer, aggregator, merger, emit=emit
            ),
            make_store=window_store_maker(windows, self.grouped.key_serde, value_serde, emit=emit),
            value_serde=value_serde,
        )
        table.key_serde = SessionWindowedSerde(table.key_serde)
        table.window_grace_ms = windows.close_grace_ms()
        return table

    def count(
        self, materialized: Materialized | None = None, *, named: Named | str | None = None
    ) -> KTable[Windowed[K], int]:
        """Count the records per key and session (null keys dropped).

        Example:
            >>> s.group_by_key().windowed_by(
            ...     SessionWindows.of_inactivity_gap_with_no_grace(300_000)
            ... ).count()  # doctest: +SKIP
        """
        return self._aggregate(
            AGGREGATE,
            materialized,
            named,
            count_init,
            count_add,
            lambda k, a, b: a + b,
            Serdes.Long(),
        )

    def reduce(
        self,
        reducer: Callable[[V, V], V],
        materialized: Materialized | None = None,
        *,
        named: Named | str | None = None,
    ) -> KTable[Windowed[K], V]:
        """Combine the values per key and session with ``reducer(aggregate, value)``;
        merged sessions are combined with the same reducer.

        Example:
            >>> s.group_by_key().windowed_by(
            ...     SessionWindows.of_inactivity_gap_with_no_grace(10)
            ... ).reduce(lambda a, b: a + b)  # doctest: +SKIP
        """
        aggregator = reducer_aggregator(reducer)
        return self._aggregate(
            REDUCE,
            materialized,
            named,
            none_initializer,
            aggregator,
            lambda k, a, b: aggregator(k, b, a),
            self.grouped.value_serde,
        )

    def aggregate(
        self,
        initializer: Callable[[], A],
        aggregator: Callable[[K, V, A], A],
        merger: Callable[[K, A, A], A],
        materialized: Materialized | None = None,
        *,
        named: Named | str | None = None,
    ) -> KTable[Windowed[K], A]:
        """Fold the values per key and session: ``aggregator(key, value, agg)`` from
        ``initializer()``; sessions that a record bridges are combined with
        ``merger(key, agg1, agg2)``.

        Example:
            >>> s.group_by_key().windowed_by(
            ...     SessionWindows.of_inactivity_gap_with_no_grace(10)
            ...     # doctest: +SKIP
            ... ).aggregate(lambda: 0, lambda k, v, a: a + v, lambda k, a, b: a + b)
        """
        return self._aggregate(
            AGGREGATE, materialized, named, initializer, aggregator, merger, None
        )


def windowed_by(
    grouped: KGroupedStream[K, V], windows: Windows | SessionWindows
) -> TimeWindowedKStream[K, V] | SessionWindowedKStream[K, V]:
    """Return the windowed stream of ``grouped`` over ``windows``."""
    if isinstance(windows, SessionWindows):
        return SessionWindowedKStream(grouped, windows)
    if isinstance(windows, TimeWindows | SlidingWindows | UnlimitedWindows):
        return TimeWindowedKStream(grouped, windows)
    raise TopologyError(
        f"windowed_by: expected TimeWindows, SlidingWindows, UnlimitedWindows or "
        f"SessionWindows, got {type(windows).__name__}"
    )
