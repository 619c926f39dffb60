"""The join methods of ``KStream`` and ``KTable`` (mixed into both handles), dispatching
on what is joined: a stream (windowed), a table, a global table, or, for tables, another
table by key or by a foreign key.

Joiners follow ``map_values``: ``joiner(value, other)``, or ``joiner(key, value, other)``
with ``with_key=True`` (Kafka's ``ValueJoinerWithKey``); in left and outer joins the
missing side is ``None``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, overload

from common.errors import TopologyError
from topology.api.options import Joined, Materialized, Named, StreamJoined, name_of

if TYPE_CHECKING:
    from topology.dsl.builder import StreamsBuilder
    from topology.dsl.kstream import KStream
    from topology.dsl.ktable import GlobalKTable, KTable
    from topology.processors.joins import JoinWindows


class StreamJoins:
    """``join`` / ``left_join`` / ``outer_join`` of :class:`~topology.dsl.kstream.KStream`."""

    builder: StreamsBuilder
    node: str

    @overload
    def join(
        self,
        other: KStream[Any, Any],
        joiner: Callable[..., Any],
        windows: JoinWindows,
        stream_joined: StreamJoined | None = None,
        /,
        *,
        with_key: bool = False,
    ) -> KStream[Any, Any]: ...

    @overload
    def join(
        self,
        other: KTable[Any, Any],
        joiner: Callable[..., Any],
        joined: Joined | None = None,
        /,
        *,
        with_key: bool = False,
    ) -> KStream[Any, Any]: ...

    @overload
    def join(
        self,
        other: GlobalKTable,
        key_selector: Callable[[Any, Any], Any],
        joiner: Callable[..., Any],
        /,
        *,
        with_key: bool = False,
        named: Named | str | None = None,
    ) -> KStream[Any, Any]: ...

    def join(
        self,
        other: Any,
        arg1: Any,
        arg2: Any = None,
        arg3: Any = None,
        /,
        *,
        with_key: bool = False,
        named: Named | str | None = None,
    ) -> KStream[Any, Any]:
        """Inner-join with a stream (records within ``JoinWindows`` of each other), a table
        (each stream record with the table's current value), or a global table (at the key
        ``key_selector(key, value)``). A key changed upstream is repartitioned first.

        Example:
            >>> w = JoinWindows.of_time_difference_without_grace(timedelta(minutes=5))
            >>> clicks.join(views, lambda c, v: (c, v), w)  # doctest: +SKIP
            >>> orders.join(customers, lambda o, c: {**o, "name": c})  # doctest: +SKIP
        """
        return self._join(other, arg1, arg2, arg3, (False, False), with_key, named)

    @overload
    def left_join(
        self,
        other: KStream[Any, Any],
        joiner: Callable[..., Any],
        windows: JoinWindows,
        stream_joined: StreamJoined | None = None,
        /,
        *,
        with_key: bool = False,
    ) -> KStream[Any, Any]: ...

    @overload
    def left_join(
        self,
        other: KTable[Any, Any],
        joiner: Callable[..., Any],
        joined: Joined | None = None,
        /,
        *,
        with_key: bool = False,
    ) -> KStream[Any, Any]: ...

    @overload
    def left_join(
        self,
        other: GlobalKTable,
        key_selector: Callable[[Any, Any], Any],
        joiner: Callable[..., Any],
        /,
        *,
        with_key: bool = False,
        named: Named | str | None = None,
    ) -> KStream[Any, Any]: ...

    def left_join(
        self,
        other: Any,
        arg1: Any,
        arg2: Any = None,
        arg3: Any = None,
        /,
        *,
        with_key: bool = False,
        named: Named | str | None = None,
    ) -> KStream[Any, Any]:
        """Like :meth:`join`, but every record of this stream produces output: with
        ``None`` as the other value when nothing matched (for a stream-stream join only
        once the window has closed, never early).

        Example:
            >>> w = JoinWindows.of_time_difference_and_grace(1000, 500)
            >>> clicks.left_join(views, lambda c, v: (c, v), w)  # doctest: +SKIP
        """
        return self._join(other, arg1, arg2, arg3, (True, False), with_key, named)

    def outer_join(
        self,
        other: KStream[Any, Any],
        joiner: Callable[..., Any],
        windows: JoinWindows,
        stream_joined: StreamJoined | None = None,
        /,
        *,
        with_key: bool = False,
    ) -> KStream[Any, Any]:
        """Join with a stream, emitting unmatched records of either side (with ``None``
        for the other) once their window has closed.

        Example:
            >>> w = JoinWindows.of_time_difference_without_grace(1000)
            >>> left.outer_join(right, lambda l, r: (l, r), w)  # doctest: +SKIP
        """
        return self._join(other, joiner, windows, stream_joined, (True, True), with_key, None)

    def _join(  # noqa: PLR0917 - the dispatch of the three overloads
        self,
        other: Any,
        arg1: Any,
        arg2: Any,
        arg3: Any,
        outer: tuple[bool, bool],
        with_key: bool,
        named: Named | str | None,
    ) -> KStream[Any, Any]:
        from topology.dsl.join_build import (
            stream_global_join,
            stream_stream_join,
            stream_table_join,
        )
        from topology.dsl.kstream import KStream
        from topology.dsl.ktable import GlobalKTable, KTable

        this: Any = self
        if outer[1] and not isinstance(other, KStream):
            raise TopologyError(f"Processor {self.node}: an outer join needs a KStream")
        if isinstance(other, KStream):
            return stream_stream_join(
                this,
                other,
                arg1,
                arg2,
                arg3,
                left_outer=outer[0],
                right_outer=outer[1],
                with_key=with_key,
            )
        if isinstance(other, KTable):
            return stream_table_join(this, other, arg1, arg2, left=outer[0], with_key=with_key)
        if isinstance(other, GlobalKTable):
            return stream_global_join(
                this, other, arg1, arg2, left=outer[0], with_key=with_key, named=name_of(named)
            )
        raise TopologyError(f"Processor {self.node}: cannot join with {other!r}")


class TableJoins:
    """``join`` / ``left_join`` / ``outer_join`` of :class:`~topology.dsl.ktable.KTable`."""

    builder: StreamsBuilder
    node: str

    @overload
    def join(
        self,
        other: KTable[Any, Any],
        joiner: Callable[[Any, Any], Any],
        materialized: Materialized | None = None,
        /,
        *,
        named: Named | str | None = None,
    ) -> KTable[Any, Any]: ...

    @overload
    def join(
        self,
        other: KTable[Any, Any],
        foreign_key_extractor: Callable[[Any], Any],
        joiner: Callable[[Any, Any], Any],
        materialized: Materialized | None = None,
        /,
        *,
        named: Named | str | None = None,
    ) -> KTable[Any, Any]: ...

    def join(
        self,
        other: KTable[Any, Any],
        arg1: Callable[..., Any],
        arg2: Any = None,
        arg3: Any = None,
        /,
        *,
        named: Named | str | None = None,
    ) -> KTable[Any, Any]:
        """Inner-join with a table on the key, or, given a ``foreign_key_extractor``, on
        ``foreign_key_extractor(value)`` = the other table's key (KIP-213). Updates of
        either side produce updates of the result; ``None`` results are deletions.

        Example:
            >>> users.join(regions, lambda u, r: (u, r), Materialized.as_("j"))  # doctest: +SKIP
            >>> orders.join(products, lambda o: o["product"], merge)  # doctest: +SKIP
        """
        return self._table_join(other, arg1, arg2, arg3, (False, False), named)

    @overload
    def left_join(
        self,
        other: KTable[Any, Any],
        joiner: Callable[[Any, Any], Any],
        materialized: Materialized | None = None,
        /,
        *,
        named: Named | str | None = None,
    ) -> KTable[Any, Any]: ...

    @overload
    def left_join(
        self,
        other: KTable[Any, Any],
        foreign_key_extractor: Callable[[Any], Any],
        joiner: Callable[[Any, Any], Any],
        materialized: Materialized | None = None,
        /,
        *,
        named: Named | str | None = None,
    ) -> KTable[Any, Any]: ...

    def left_join(
        self,
        other: KTable[Any, Any],
        arg1: Callable[..., Any],
        arg2: Any = None,
        arg3: Any = None,
        /,
        *,
        named: Named | str | None = None,
    ) -> KTable[Any, Any]:
        """Like :meth:`join`, keeping every row of this table (``None`` as the other
        value when the other side has no row).

        Example:
            >>> users.left_join(regions, lambda u, r: (u, r))  # doctest: +SKIP
        """
        return self._table_join(other, arg1, arg2, arg3, (True, False), named)

    def outer_join(
        self,
        other: KTable[Any, Any],
        joiner: Callable[[Any, Any], Any],
        materialized: Materialized | None = None,
        /,
        *,
        named: Named | str | None = None,
    ) -> KTable[Any, Any]:
        """Join on the key keeping the rows of both tables (``None`` for a missing side).

        Example:
            >>> left.outer_join(right, lambda l, r: (l, r))  # doctest: +SKIP
        """
        return self._table_join(other, joiner, materialized, None, (True, True), named)

    def _table_join(  # noqa: PLR0917 - the dispatch of the two overloads
        self,
        other: KTable[Any, Any],
        arg1: Callable[..., Any],
        arg2: Any,
        arg3: Any,
        outer: tuple[bool, bool],
        named: Named | str | None,
    ) -> KTable[Any, Any]:
        from topology.dsl.join_table import table_table_join
        from topology.dsl.ktable import KTable

        this: Any = self
        if not isinstance(other, KTable):
            raise TopologyError(f"Processor {self.node}: a table joins a KTable, got {other!r}")
        if callable(arg2):
            from topology.dsl.join_fk_build import foreign_key_join

            return foreign_key_join(this, other, arg1, arg2, arg3, name_of(named), left=outer[0])
        return table_table_join(
            this, other, arg1, arg2, name_of(named), left_outer=outer[0], right_outer=outer[1]
        )
