"""Immutable option objects of the DSL: Consumed, Produced, Grouped, Materialized, Named,
Joined, StreamJoined, Repartitioned.

Each is a frozen dataclass built with Kafka's static constructors in snake_case
(``Materialized.as_("counts")``, ``Consumed.with_(Serdes.String(), Serdes.Long())``); every
``with_*`` method returns a new object.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, Self

from common.errors import TopologyError
from common.serdes import Serde
from topology.api.timestamps import TimestampExtractor

#: ``(topic, key, value, num_partitions) -> partition`` (``None``: the default partitioner).
StreamPartitioner = Callable[[str, Any, Any, int], "int | None"]
OffsetReset = Literal["earliest", "latest"]


class StoreSupplier(Protocol):
    """A store supplier from :class:`statestores.stores.Stores` (only its name is read)."""

    @property
    def name(self) -> str: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Named:
    """A processor name: ``Named.as_("parse")``."""

    name: str | None = None

    @classmethod
    def as_(cls, name: str) -> Named:
        """Name the processor ``name``."""
        return cls(name=name)


def name_of(named: Named | str | None) -> str | None:
    """Return the name a ``Named`` (or plain string) gives, or None."""
    return named.name if isinstance(named, Named) else named


@dataclass(frozen=True, slots=True, kw_only=True)
class Consumed:
    """How a source reads: serdes, timestamp extractor, offset reset, source node name."""

    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    timestamp_extractor: TimestampExtractor | None = None
    offset_reset: OffsetReset | None = None
    name: str | None = None

    @classmethod
    def with_(cls, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> Consumed:
        """Read with these serdes: ``Consumed.with_(Serdes.String(), Serdes.Long())``."""
        return cls(key_serde=key_serde, value_serde=value_serde)

    @classmethod
    def as_(cls, name: str) -> Consumed:
        """Name the source node ``name``."""
        return cls(name=name)

    def with_key_serde(self, serde: Serde[Any]) -> Self:
        """Return a copy with the key serde."""
        return replace(self, key_serde=serde)

    def with_value_serde(self, serde: Serde[Any]) -> Self:
        """Return a copy with the value serde."""
        return replace(self, value_serde=serde)

    def with_timestamp_extractor(self, extractor: TimestampExtractor) -> Self:
        """Return a copy reading event time with ``extractor``."""
        return replace(self, timestamp_extractor=extractor)

    def with_offset_reset_policy(self, policy: OffsetReset) -> Self:
        """Return a copy with the offset reset policy of this source."""
        return replace(self, offset_reset=policy)

    def with_name(self, name: str) -> Self:
        """Return a copy naming the source node."""
        return replace(self, name=name)


@dataclass(frozen=True, slots=True, kw_only=True)
class Produced:
    """How a sink writes: serdes, partitioner, sink node name."""

    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    partitioner: StreamPartitioner | None = None
    name: str | None = None

    @classmethod
    def with_(cls, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> Produced:
        """Write with these serdes."""
        return cls(key_serde=key_serde, value_serde=value_serde)

    @classmethod
    def as_(cls, name: str) -> Produced:
        """Name the sink node ``name``."""
        return cls(name=name)

    def with_key_serde(self, serde: Serde[Any]) -> Self:
        """Return a copy with the key serde."""
        return replace(self, key_serde=serde)

    def with_value_serde(self, serde: Serde[Any]) -> Self:
        """Return a copy with the value serde."""
        return replace(self, value_serde=serde)

    def with_stream_partitioner(self, partitioner: StreamPartitioner) -> Self:
        """Return a copy choosing partitions with ``partitioner(topic, key, value, n)``."""
        return replace(self, partitioner=partitioner)

    def with_name(self, name: str) -> Self:
        """Return a copy naming the sink node."""
        return replace(self, name=name)


@dataclass(frozen=True, slots=True, kw_only=True)
class Grouped:
    """How a grouping repartitions: name (of the key selector and repartition topic) and
    serdes."""

    name: str | None = None
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None

    @classmethod
    def as_(cls, name: str) -> Grouped:
        """Name the repartition topic ``<name>-repartition``."""
        return cls(name=name)

    @classmethod
    def with_(cls, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> Grouped:
        """Repartition with these serdes."""
        return cls(key_serde=key_serde, value_serde=value_serde)

    def with_key_serde(self, serde: Serde[Any]) -> Self:
        """Return a copy with the key serde."""
        return replace(self, key_serde=serde)

    def with_value_serde(self, serde: Serde[Any]) -> Self:
        """Return a copy with the value serde."""
        return replace(self, value_serde=serde)

    def with_name(self, name: str) -> Self:
        """Return a copy with the name."""
        return replace(self, name=name)


@dataclass(frozen=True, slots=True, kw_only=True)
class Materialized:
    """How a table or aggregate is stored: store name or supplier, serdes, caching,
    logging (changelog topic config), retention (window stores)."""

    store_name: str | None = None
    supplier: StoreSupplier | None = None
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    caching_enabled: bool = True
    logging_enabled: bool = True
    logging_config: Mapping[str, str] = field(default_factory=dict)
    retention_ms: int | None = None

    @classmethod
    def as_(cls, name_or_supplier: str | StoreSupplier) -> Materialized:
        """Store in ``name`` (queryable by that name) or in the supplier's store.

        Example:
            >>> Materialized.as_("counts").with_caching_disabled().store_name
            'counts'
        """
        if isinstance(name_or_supplier, str):
            return cls(store_name=name_or_supplier)
        return cls(store_name=name_or_supplier.name, supplier=name_or_supplier)

    @classmethod
    def with_(cls, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> Materialized:
        """Store with these serdes under a generated name."""
        return cls(key_serde=key_serde, value_serde=value_serde)

    def with_key_serde(self, serde: Serde[Any]) -> Self:
        """Return a copy with the key serde."""
        return replace(self, key_serde=serde)

    def with_value_serde(self, serde: Serde[Any]) -> Self:
        """Return a copy with the value serde."""
        return replace(self, value_serde=serde)

    def with_caching_enabled(self) -> Self:
        """Return a copy with the record cache on (the default)."""
        return replace(self, caching_enabled=True)

    def with_caching_disabled(self) -> Self:
        """Return a copy with the record cache off: every update is forwarded."""
        return replace(self, caching_enabled=False)

    def with_logging_enabled(self, config: Mapping[str, str] | None = None) -> Self:
        """Return a copy with a changelog topic (``config``: its topic settings)."""
        return replace(self, logging_enabled=True, logging_config=dict(config or {}))

    def with_logging_disabled(self) -> Self:
        """Return a copy without a changelog topic (the store is not restored)."""
        return replace(self, logging_enabled=False, logging_config={})

    def with_retention(self, retention_ms: int) -> Self:
        """Return a copy keeping window data ``retention_ms`` (window stores only)."""
        return replace(self, retention_ms=retention_ms)


@dataclass(frozen=True, slots=True, kw_only=True)
class Repartitioned:
    """An explicit repartition: name, serdes, partition count, partitioner."""

    name: str | None = None
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    num_partitions: int | None = None
    partitioner: StreamPartitioner | None = None

    @classmethod
    def as_(cls, name: str) -> Repartitioned:
        """Name the repartition topic ``<name>-repartition``."""
        return cls(name=name)

    @classmethod
    def with_(cls, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> Repartitioned:
        """Repartition with these serdes."""
        return cls(key_serde=key_serde, value_serde=value_serde)

    def with_number_of_partitions(self, n: int) -> Self:
        """Return a copy creating the topic with ``n`` partitions."""
        return replace(self, num_partitions=n)

    def with_stream_partitioner(self, partitioner: StreamPartitioner) -> Self:
        """Return a copy choosing partitions with ``partitioner``."""
        return replace(self, partitioner=partitioner)

    def with_key_serde(self, serde: Serde[Any]) -> Self:
        """Return a copy with the key serde."""
        return replace(self, key_serde=serde)

    def with_value_serde(self, serde: Serde[Any]) -> Self:
        """Return a copy with the value serde."""
        return replace(self, value_serde=serde)

    def with_name(self, name: str) -> Self:
        """Return a copy with the name."""
        return replace(self, name=name)


@dataclass(frozen=True, slots=True, kw_only=True)
class Joined:
    """Serdes and name of a stream-table join (used by the joins phase)."""

    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    other_value_serde: Serde[Any] | None = None
    name: str | None = None
    grace_ms: int | None = None

    @classmethod
    def with_(
        cls,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        other_value_serde: Serde[Any] | None,
        name: str | None = None,
        grace_ms: int | None = None,
    ) -> Joined:
        """Join with these serdes (and, as Kafka's ``Joined.with``, optionally a name and
        a grace period for a versioned table)."""
        return cls(
            key_serde=key_serde,
            value_serde=value_serde,
            other_value_serde=other_value_serde,
            name=name,
            grace_ms=grace_ms,
        )

    @classmethod
    def as_(cls, name: str) -> Joined:
        """Name the join (its processor and repartition topics)."""
        return cls(name=name)

    def with_grace_period(self, grace_ms: int) -> Self:
        """Return a copy with a grace period for a versioned table side."""
        return replace(self, grace_ms=grace_ms)

    def with_name(self, name: str) -> Self:
        """Return a copy with the name."""
        return replace(self, name=name)


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamJoined:
    """Serdes, names and stores of a stream-stream join (used by the joins phase)."""

    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    other_value_serde: Serde[Any] | None = None
    name: str | None = None
    store_name: str | None = None
    this_store_supplier: StoreSupplier | None = None
    other_store_supplier: StoreSupplier | None = None
    logging_enabled: bool = True
    logging_config: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def with_(
        cls,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        other_value_serde: Serde[Any] | None,
    ) -> StreamJoined:
        """Join with these serdes."""
        return cls(
            key_serde=key_serde, value_serde=value_serde, other_value_serde=other_value_serde
        )

    @classmethod
    def as_(cls, store_name: str) -> StreamJoined:
        """Name the join stores ``<store_name>-this-join-store`` / ``-other-join-store``."""
        return cls(store_name=store_name)

    def with_name(self, name: str) -> Self:
        """Return a copy naming the join processors."""
        return replace(self, name=name)

    def with_store_name(self, store_name: str) -> Self:
        """Return a copy naming the join stores."""
        return replace(self, store_name=store_name)

    def with_this_store_supplier(self, supplier: StoreSupplier) -> Self:
        """Return a copy storing this side in ``supplier``'s store."""
        return replace(self, this_store_supplier=supplier)

    def with_other_store_supplier(self, supplier: StoreSupplier) -> Self:
        """Return a copy storing the other side in ``supplier``'s store."""
        return replace(self, other_store_supplier=supplier)

    def with_logging_enabled(self, config: Mapping[str, str] | None = None) -> Self:
        """Return a copy with changelogs for the join stores."""
        return replace(self, logging_enabled=True, logging_config=dict(config or {}))

    def with_logging_disabled(self) -> Self:
        """Return a copy without changelogs for the join stores."""
        return replace(self, logging_enabled=False, logging_config={})


def _kafka_string(item: Any) -> str:
    """``item`` as Java's ``String.format("%s")`` shows it (``null`` for None)."""
    return "null" if item is None else str(item)


def _key_comma_value(key: Any, value: Any) -> str:
    """Kafka's default line of a printed record: ``key, value``."""
    return f"{_kafka_string(key)}, {_kafka_string(value)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Printed:
    """Where and how ``KStream.print`` writes each record: ``[label]: <mapper(key, value)>``
    per line (Kafka's ``Printed``), to standard output or to a file. The label defaults to
    the printed stream's node name, the mapper to ``key, value``.

    Example:
        >>> stream.print(Printed.to_sys_out().with_label("orders"))  # doctest: +SKIP
    """

    path: str | None = None
    label: str | None = None
    mapper: Callable[[Any, Any], str] = _key_comma_value
    name: str | None = None

    @classmethod
    def to_sys_out(cls) -> Printed:
        """Print to standard output (of each process running the stream's tasks)."""
        return cls()

    @classmethod
    def to_file(cls, path: str) -> Printed:
        """Print to the file ``path`` (emptied now; each task appends to it).

        Raises:
            TopologyError: ``path`` is blank or cannot be written.
        """
        if not path or not path.strip():
            raise TopologyError("Printed.to_file: the file path can't be an empty string")
        try:
            with open(path, "w", encoding="utf-8"):
                pass
        except OSError as exc:
            raise TopologyError(f"Unable to write stream to file at [{path}] {exc}") from exc
        return cls(path=path)

    def with_label(self, label: str) -> Self:
        """Return a copy printing ``[label]`` before each record."""
        return replace(self, label=label)

    def with_key_value_mapper(self, mapper: Callable[[Any, Any], str]) -> Self:
        """Return a copy printing ``mapper(key, value)`` for each record."""
        return replace(self, mapper=mapper)

    def with_name(self, name: str) -> Self:
        """Return a copy naming the printing processor."""
        return replace(self, name=name)


@dataclass(frozen=True, slots=True)
class ForeignKeyExtractor:
    """How a foreign-key join finds the other table's key in a row of this one (Kafka's
    ``ForeignKeyExtractor``, KIP-1104): from the value alone, or from the key and the value.
    A plain function given to ``KTable.join`` is :meth:`from_function`.

    Example:
        >>> orders.join(  # doctest: +SKIP
        ...     customers, ForeignKeyExtractor.from_bi_function(lambda k, v: k.split("-")[0]), merge
        ... )
    """

    fn: Callable[..., Any]
    with_key: bool = False

    @classmethod
    def from_function(cls, fn: Callable[[Any], Any]) -> ForeignKeyExtractor:
        """Extract the foreign key from the value: ``fn(value)``."""
        return cls(fn, False)

    @classmethod
    def from_bi_function(cls, fn: Callable[[Any, Any], Any]) -> ForeignKeyExtractor:
        """Extract the foreign key from the key and the value: ``fn(key, value)``."""
        return cls(fn, True)

    def extract(self, key: Any, value: Any) -> Any:
        """The foreign key of the row ``(key, value)``."""
        return self.fn(key, value) if self.with_key else self.fn(value)
