"""Stable node names: ``PREFIX-000000000N`` from one counter per builder, as Kafka's.

Each DSL operator takes its name from :meth:`NameProvider.new_processor_name` (or the name
the user gave); the counter advances either way where Kafka's does, so generated store and
changelog names stay the same when a named operator is added or renamed elsewhere.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from common.errors import TopologyError

SOURCE: Final = "KSTREAM-SOURCE-"
SINK: Final = "KSTREAM-SINK-"
FILTER: Final = "KSTREAM-FILTER-"
MAP: Final = "KSTREAM-MAP-"
MAPVALUES: Final = "KSTREAM-MAPVALUES-"
FLATMAP: Final = "KSTREAM-FLATMAP-"
FLATMAPVALUES: Final = "KSTREAM-FLATMAPVALUES-"
KEY_SELECT: Final = "KSTREAM-KEY-SELECT-"
PEEK: Final = "KSTREAM-PEEK-"
FOREACH: Final = "KSTREAM-FOREACH-"
PRINTER: Final = "KSTREAM-PRINTER-"
BRANCH: Final = "KSTREAM-BRANCH-"
MERGE: Final = "KSTREAM-MERGE-"
REPARTITION: Final = "KSTREAM-REPARTITION-"
PROCESSOR: Final = "KSTREAM-PROCESSOR-"
PROCESSVALUES: Final = "KSTREAM-PROCESSVALUES-"
AGGREGATE: Final = "KSTREAM-AGGREGATE-"
REDUCE: Final = "KSTREAM-REDUCE-"
TOTABLE: Final = "KSTREAM-TOTABLE-"
KTABLE_SOURCE: Final = "KTABLE-SOURCE-"
KTABLE_FILTER: Final = "KTABLE-FILTER-"
KTABLE_MAPVALUES: Final = "KTABLE-MAPVALUES-"
KTABLE_TRANSFORMVALUES: Final = "KTABLE-TRANSFORMVALUES-"
KTABLE_TOSTREAM: Final = "KTABLE-TOSTREAM-"
KTABLE_SELECT: Final = "KTABLE-SELECT-"
KTABLE_AGGREGATE: Final = "KTABLE-AGGREGATE-"
KTABLE_REDUCE: Final = "KTABLE-REDUCE-"
COGROUP_AGGREGATE: Final = "COGROUPKSTREAM-AGGREGATE-"
COGROUP_MERGE: Final = "COGROUPKSTREAM-MERGE-"
STATE_STORE: Final = "STATE-STORE-"
REPARTITION_TOPIC_SUFFIX: Final = "-repartition"
CHANGELOG_TOPIC_SUFFIX: Final = "-changelog"

_GENERATED: Final = re.compile(r"KSTREAM.*-[0-9]{10}")


class NameProvider:
    """Hand out ``PREFIX`` + a zero-padded 10-digit index from one counter.

    Every name handed out is kept in :attr:`generated`, so that the names of internal
    resources derived from one (``<generated>-repartition``, ``<generated>-store``) can be
    told from the user's (``ensure.explicit.internal.resource.naming``).
    """

    __slots__ = ("_index", "generated")

    def __init__(self) -> None:
        self._index = 0
        self.generated: set[str] = set()

    def new_processor_name(self, prefix: str) -> str:
        """Return ``prefix`` followed by the next index, e.g. ``KSTREAM-MAP-0000000003``."""
        name = f"{prefix}{self._index:010d}"
        self._index += 1
        self.generated.add(name)
        return name

    def new_store_name(self, prefix: str) -> str:
        """Return ``prefix`` + ``STATE-STORE-`` + the next index."""
        return self.new_processor_name(prefix + STATE_STORE)

    def suffixed_or_generate(self, name: str | None, suffix: str, prefix: str) -> str:
        """Return ``name + suffix`` for a named operator, else a generated name; the
        counter advances either way (Kafka's ``NamedInternal.suffixWithOrElseGet`` with a
        name provider)."""
        generated = self.new_processor_name(prefix)
        return name + suffix if name is not None else generated

    def name_or_generate(self, name: str | None, prefix: str) -> str:
        """Return ``name`` if given, else a generated one. The counter advances either
        way, as Kafka's ``NamedInternal.orElseGenerateWithPrefix`` burns an index for a
        named operation too (so naming one operation keeps the others' generated names)."""
        generated = self.new_processor_name(prefix)
        return name if name is not None else generated


def is_generated(name: str) -> bool:
    """Return whether ``name`` looks like a generated Kafka name (``KSTREAM...-NNNNNNNNNN``)."""
    return _GENERATED.fullmatch(name) is not None


def check_name(name: str, what: str) -> str:
    """Return ``name`` if it is a valid node or store name; raise TopologyError otherwise."""
    if not name or len(name) > 249 or re.fullmatch(r"[a-zA-Z0-9._-]+", name) is None:
        raise TopologyError(
            f"{what} name {name!r} is invalid: use 1 to 249 characters from [a-zA-Z0-9._-]"
        )
    return name


def suffixed(name: str | None, suffix: str, generate: Callable[[], str]) -> str:
    """Return ``name + suffix`` for a named operator, else ``generate()`` (Kafka's
    ``NamedInternal.suffixWithOrElseGet`` with a value for the unnamed case: nothing is
    generated for a named one; with a name provider see
    :meth:`NameProvider.suffixed_or_generate`)."""
    return name + suffix if name is not None else generate()
