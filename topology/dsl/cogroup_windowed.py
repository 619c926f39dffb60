"""Windowed cogroups: ``CogroupedKStream.windowed_by(...)`` and their aggregations.

``windowed_by(TimeWindows | SlidingWindows | UnlimitedWindows)`` returns a
:class:`TimeWindowedCogroupedKStream`, ``windowed_by(SessionWindows)`` a
:class:`SessionWindowedCogroupedKStream`. Their ``aggregate`` records the cogroup through
:meth:`topology.dsl.cogroup.CogroupedKStream.build` with a window or session store and, per
grouped stream, the windowed aggregate processor of its windows (Kafka's
``KStreamWindowAggregate``, ``KStreamSlidingWindowAggregate``,
``KStreamSessionWindowAggregate``, emitting on every window update). Each aggregate
processor keeps its own observed stream time, as Kafka's: a window closes for one grouped
stream by the records *it* has seen. The result is a ``KTable[Windowed[K], V]``.

Also here: the argument checks the cogroup handles share (Kafka's ``requireNonNull``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from common.errors import TopologyError
from statestores.api import Windowed
from topology.api.options import Materialized, Named
from topology.api.windowed_serdes import SessionWindowedSerde, TimeWindowedSerde
from topology.api.windows import SessionWindows, SlidingWindows, TimeWindows, UnlimitedWindows
from topology.dsl.windowed import window_store_maker
from topology.processors.proc_cogroup import CogroupTimeWindowAggregateProcessor
from topology.processors.proc_session import SessionWindowAggregateProcessor
from topology.processors.proc_sliding import SlidingWindowAggregateProcessor
from topology.processors.proc_table import TableParams

if TYPE_CHECKING:
    from topology.dsl.cogroup import CogroupedKStream
    from topology.dsl.ktable import KTable

K = TypeVar("K")
V = TypeVar("V")

#: ``aggregator(key, value, aggregate) -> aggregate``: one grouped stream's fold.
Aggregator = Callable[[Any, Any, Any], Any]


def require(value: object, name: str, where: str) -> None:
    """Raise TopologyError if ``value`` is None (Kafka's ``requireNonNull``)."""
    if value is None:
        raise TopologyError(f"{where}: {name} can't be None")


def require_function(value: object, name: str, where: str) -> None:
    """Raise TopologyError if ``value`` is None or not callable."""
    require(value, name, where)
    if not callable(value):
        raise TopologyError(f"{where}: {name} must be a function, got {type(value).__name__}")


def check_options(materialized: object, named: object, where: str) -> None:
    """Raise TopologyError if ``materialized`` is not a Materialized or ``named`` not a
    Named or a name (None: not given)."""
    if materialized is not None and not isinstance(materialized, Materialized):
        raise TopologyError(
            f"{where}: materialized must be a Materialized, got {type(materialized).__name__}"
        )
    if named is not None and not isinstance(named, Named | str):
        raise TopologyError(f"{where}: named must be a Named, got {type(named).__name__}")


class TimeWindowedCogroupedKStream(Generic[K, V]):
    """A cogroup over time, sliding or unlimited windows."""

    def __init__(
        self,
        cogrouped: CogroupedKStream[K, V],
        windows: TimeWindows | SlidingWindows | UnlimitedWindows,
    ) -> None:
        self.cogrouped = cogrouped
        self.windows = windows

    def aggregate(
        self,
        initializer: Callable[[], V],
        materialized: Materialized | None = None,
        named: Named | str | None = None,
    ) -> KTable[Windowed[K], V]:
        """Fold every grouped stream's records into one aggregate per key and window, from
        ``initializer()``. Give the aggregate's serde with ``Materialized.with_value_serde``.

        Raises:
            TopologyError: ``initializer`` is missing, an option has the wrong type, or the
                store's retention is below what the windows need (fatal).

        Example:
            >>> cogrouped.windowed_by(TimeWindows.of_size_with_no_grace(500)).aggregate(
            ...     lambda: "", Materialized.with_(S, S)
            ... )  # doctest: +SKIP
        """
        where = f"{type(self).__name__}.aggregate"
        require_function(initializer, "initializer", where)
        check_options(materialized, named, where)
        windows = self.windows

        def make(name: str, params: TableParams, aggregator: Aggregator) -> Any:
            if isinstance(windows, SlidingWindows):
                return SlidingWindowAggregateProcessor(
                    name, params, windows, initializer, aggregator
                )
            return CogroupTimeWindowAggregateProcessor(
                name, params, windows, initializer, aggregator
            )

        table = self.cogrouped.build(
            materialized=materialized,
            named=named,
            make_processor=make,
            make_store=window_store_maker(windows, self.cogrouped.key_serde),
        )
        table.key_serde = TimeWindowedSerde(table.key_serde, windows.size())
        table.window_grace_ms = windows.close_grace_ms()
        return table


class SessionWindowedCogroupedKStream(Generic[K, V]):
    """A cogroup over sessions."""

    def __init__(self, cogrouped: CogroupedKStream[K, V], windows: SessionWindows) -> None:
        self.cogrouped = cogrouped
        self.windows = windows

    def aggregate(
        self,
        initializer: Callable[[], V],
        session_merger: Callable[[K, V, V], V],
        materialized: Materialized | None = None,
        named: Named | str | None = None,
    ) -> KTable[Windowed[K], V]:
        """Fold every grouped stream's records into one aggregate per key and session, from
        ``initializer()``; sessions a record bridges are combined with
        ``session_merger(key, agg1, agg2)``.

        Raises:
            TopologyError: ``initializer`` or ``session_merger`` is missing, an option has
                the wrong type, or the store's retention is below what the sessions need
                (fatal).

        Example:
            >>> cogrouped.windowed_by(
            ...     SessionWindows.of_inactivity_gap_with_no_grace(100)
            ... ).aggregate(lambda: "", lambda k, a, b: a + b)  # doctest: +SKIP
        """
        where = "SessionWindowedCogroupedKStream.aggregate"
        require_function(initializer, "initializer", where)
        require_function(session_merger, "session_merger", where)
        check_options(materialized, named, where)
        windows = self.windows
        gap, grace = windows.gap_ms, windows.grace_ms

        def make(name: str, params: TableParams, aggregator: Aggregator) -> Any:
            return SessionWindowAggregateProcessor(
                name, params, gap, grace, initializer, aggregator, session_merger
            )

        table = self.cogrouped.build(
            materialized=materialized,
            named=named,
            make_processor=make,
            make_store=window_store_maker(windows, self.cogrouped.key_serde),
        )
        table.key_serde = SessionWindowedSerde(table.key_serde)
        table.window_grace_ms = windows.close_grace_ms()
        return table
