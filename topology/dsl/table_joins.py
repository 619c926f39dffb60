"""The join methods of ``KTable`` (mixed into the handle): with another table by key
(:mod:`topology.dsl.join_table_build` records it) or by a foreign key (KIP-213,
:mod:`topology.dsl.join_fk_build`). Updates of either side produce updates of the result;
in left and outer joins the missing side is ``None``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, overload

from common.errors import TopologyError
from topology.api.options import ForeignKeyExtractor, Materialized, Named, name_of
from topology.dsl.join_fk_build import foreign_key_join
from topology.dsl.join_table_build import table_table_join

if TYPE_CHECKING:
    from topology.dsl.builder import StreamsBuilder
    from topology.dsl.ktable import KTable


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
        foreign_key_extractor: Callable[[Any], Any] | ForeignKeyExtractor,
        joiner: Callable[[Any, Any], Any],
        materialized: Materialized | None = None,
        /,
        *,
        named: Named | str | None = None,
    ) -> KTable[Any, Any]: ...

    def join(
        self,
        other: KTable[Any, Any],
        arg1: Callable[..., Any] | ForeignKeyExtractor,
        arg2: Any = None,
        arg3: Any = None,
        /,
        *,
        named: Named | str | None = None,
    ) -> KTable[Any, Any]:
        """Inner-join with a table on the key, or, given a ``foreign_key_extractor``, on
        ``foreign_key_extractor(value)`` = the other table's key (KIP-213; a
        :class:`~topology.api.options.ForeignKeyExtractor` may read the key too,
        KIP-1104). Updates of either side produce updates of the result; ``None``
        results are deletions.

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
        foreign_key_extractor: Callable[[Any], Any] | ForeignKeyExtractor,
        joiner: Callable[[Any, Any], Any],
        materialized: Materialized | None = None,
        /,
        *,
        named: Named | str | None = None,
    ) -> KTable[Any, Any]: ...

    def left_join(
        self,
        other: KTable[Any, Any],
        arg1: Callable[..., Any] | ForeignKeyExtractor,
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
        arg1: Callable[..., Any] | ForeignKeyExtractor,
        arg2: Any,
        arg3: Any,
        outer: tuple[bool, bool],
        named: Named | str | None,
    ) -> KTable[Any, Any]:
        this: Any = self
        if not isinstance(other, TableJoins):  # a KTable: the handle these are mixed into
            raise TopologyError(f"Processor {self.node}: a table joins a KTable, got {other!r}")
        if callable(arg2):
            return foreign_key_join(this, other, arg1, arg2, arg3, name_of(named), left=outer[0])
        if isinstance(arg1, ForeignKeyExtractor):
            raise TopologyError(
                f"Processor {self.node}: a foreign-key join takes a joiner after its "
                f"ForeignKeyExtractor, got {arg2!r}"
            )
        return table_table_join(
            this, other, arg1, arg2, name_of(named), left_outer=outer[0], right_outer=outer[1]
        )
