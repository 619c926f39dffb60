"""The join methods of ``KStream`` (mixed into the handle), dispatching on what is joined:
a stream (windowed), a table or a global table; :mod:`topology.dsl.join_build` records
them.

Joiners follow ``map_values``: ``joiner(value, other)``, or ``joiner(key, value, other)``
with ``with_key=True`` (Kafka's ``ValueJoinerWithKey``); in left and outer joins the
missing side is ``None``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, overload

from common.errors import TopologyError
from topology.api.options import Joined, Named, StreamJoined, name_of
from topology.dsl.cogroup_windowed import require_function
from topology.dsl.join_build import stream_global_join, stream_stream_join, stream_table_join
from topology.dsl.ktable import GlobalKTable, KTable

if TYPE_CHECKING:
    from topology.dsl.builder import StreamsBuilder
    from topology.dsl.kstream import KStream
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
        this: Any = self
        is_stream = isinstance(other, StreamJoins)  # a KStream: the handle these are mixed into
        if isinstance(other, GlobalKTable):
            require_function(arg1, "key_selector", "KStream.join")
            require_function(arg2, "joiner", "KStream.join")
        else:
            require_function(arg1, "joiner", "KStream.join")
        if outer[1] and not is_stream:
            raise TopologyError(f"Processor {self.node}: an outer join needs a KStream")
        if is_stream:
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
