"""What every join shares: :class:`JoinWindows`, Kafka's join node name prefixes, joiner
adaptation (``with_key``) and *value getters*, the way a join reads a table by key.

A value getter is Kafka's ``KTableValueGetter``: a join does not keep its own copy of a
table, it looks the key up through the table's view. A materialized table (a source table
read by a join is materialized, as Kafka's ``KTableSource.materialize``) is read from its
store; a table derived without a store (``filter``, ``map_values``, a join result) computes
its value from its parent's getter on the fly (``KTable.value_getter`` picks the way). The
join node is connected to every store the getter reads, which keeps it in the sub-topology
that owns them. A windowed aggregation's table (keys ``Windowed[K]``) is read from its
window or session store by key and window (the ``view()`` of Kafka's
``KStreamWindowAggregate``, ``KStreamSlidingWindowAggregate`` and
``KStreamSessionWindowAggregate``): :class:`StoreGetter` picks the read by the store's kind
once, when it opens the store.

Module map of the joins. Processors (``topology.processors``): ``joins`` (this),
``join_stream`` (stream-stream windowed joins and their stores), ``join_table``
(stream-table, stream-global-table and table-table joins), ``join_fk`` and ``join_fk_wire``
(foreign-key table joins and their internal records). Recording (``topology.dsl``):
``stream_joins`` and ``table_joins`` (the ``join`` methods mixed into KStream and KTable),
``join_build`` (stream joins), ``join_table_build`` (table-table joins) and
``join_fk_build`` (foreign-key joins).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, Protocol

from statestores.api import Windowed
from statestores.session import MeteredSessionStore
from statestores.window import MeteredWindowStore
from topology.api.record import ValueAndTimestamp
from topology.engine.nodes import user_error

JOINTHIS: Final = "KSTREAM-JOINTHIS-"
JOINOTHER: Final = "KSTREAM-JOINOTHER-"
OUTERTHIS: Final = "KSTREAM-OUTERTHIS-"
OUTEROTHER: Final = "KSTREAM-OUTEROTHER-"
WINDOWED: Final = "KSTREAM-WINDOWED-"
OUTERSHARED: Final = "KSTREAM-OUTERSHARED-"
JOIN: Final = "KSTREAM-JOIN-"
LEFTJOIN: Final = "KSTREAM-LEFTJOIN-"
KTABLE_JOINTHIS: Final = "KTABLE-JOINTHIS-"
KTABLE_JOINOTHER: Final = "KTABLE-JOINOTHER-"
KTABLE_MERGE: Final = "KTABLE-MERGE-"

Duration = int | timedelta


def duration_ms(duration: Duration, what: str) -> int:
    """Return ``duration`` (int ms or timedelta) in ms; raise ValueError if negative or not
    a duration."""
    if isinstance(duration, timedelta):
        ms = duration // timedelta(milliseconds=1)
    elif isinstance(duration, bool) or not isinstance(duration, int):
        raise ValueError(f"{what} must be an int of milliseconds or a timedelta, got {duration!r}")
    else:
        ms = duration
    if ms < 0:
        raise ValueError(f"{what} must not be negative, got {ms} ms")
    return ms


@dataclass(frozen=True, slots=True)
class JoinWindows:
    """The time bounds of a stream-stream join: a record at ``t`` joins the other side's
    records in ``[t - before_ms, t + after_ms]``; the window stays open ``grace_ms`` after
    that (out-of-order records still join; left/outer non-joined results wait for it).

    Example:
        >>> w = JoinWindows.of_time_difference_and_grace(timedelta(seconds=10), 500)
        >>> (w.before_ms, w.after_ms, w.grace_ms, w.size_ms)
        (10000, 10000, 500, 20000)
        >>> JoinWindows.of_time_difference_without_grace(5).after(0).size_ms
        5
    """

    before_ms: int
    after_ms: int
    grace_ms: int

    def __post_init__(self) -> None:
        if self.before_ms + self.after_ms < 0:
            raise ValueError("Window interval (before + after) must not be negative")
        if self.grace_ms < 0:
            raise ValueError("Grace period must not be negative")

    @classmethod
    def of_time_difference_without_grace(cls, difference: Duration) -> JoinWindows:
        """Join records at most ``difference`` apart; no grace period."""
        ms = duration_ms(difference, "time difference")
        return cls(ms, ms, 0)

    #: Kafka's spelling (``ofTimeDifferenceWithNoGrace``).
    of_time_difference_with_no_grace = of_time_difference_without_grace

    @classmethod
    def of_time_difference_and_grace(cls, difference: Duration, grace: Duration) -> JoinWindows:
        """Join records at most ``difference`` apart; accept out-of-order records ``grace``
        after the window ends."""
        ms = duration_ms(difference, "time difference")
        return cls(ms, ms, duration_ms(grace, "grace period"))

    def before(self, difference: Duration) -> JoinWindows:
        """Return windows reaching ``difference`` back in time (may be negative ms as an
        int, as Kafka's, as long as ``before + after >= 0``)."""
        ms = (
            difference // timedelta(milliseconds=1)
            if isinstance(difference, timedelta)
            else difference
        )
        return JoinWindows(int(ms), self.after_ms, self.grace_ms)

    def after(self, difference: Duration) -> JoinWindows:
        """Return windows reaching ``difference`` forward in time."""
        ms = (
            difference // timedelta(milliseconds=1)
            if isinstance(difference, timedelta)
            else difference
        )
        return JoinWindows(self.before_ms, int(ms), self.grace_ms)

    @property
    def size_ms(self) -> int:
        """``before + after``: the window store's window size."""
        return self.before_ms + self.after_ms

    @property
    def retention_ms(self) -> int:
        """``size + grace``: how long the join stores keep records."""
        return self.size_ms + self.grace_ms


#: ``(key, this value, other value) -> joined value``: every joiner after adaptation.
KeyedJoiner = Callable[[Any, Any, Any], Any]


def keyed_joiner(joiner: Callable[..., Any], with_key: bool) -> KeyedJoiner:
    """Return ``joiner`` as a 3-argument joiner: ``joiner(v1, v2)`` (or ``joiner(key, v1,
    v2)`` when ``with_key``, Kafka's ``ValueJoinerWithKey``), following ``map_values``."""
    if with_key:
        return joiner
    return lambda key, value, other: joiner(value, other)


def reversed_joiner(joiner: KeyedJoiner) -> KeyedJoiner:
    """Return the joiner the *other* side calls: arguments swapped back into order."""
    return lambda key, other, value: joiner(key, value, other)


def call_joiner(node: str, fn: Callable[..., Any], joiner: KeyedJoiner, *args: Any) -> Any:
    """Call ``joiner(*args)``; wrap an error so it names the node and the user function."""
    try:
        return joiner(*args)
    except Exception as exc:
        raise user_error(node, fn, exc, "value joiner") from exc


class ValueGetter(Protocol):
    """Reads one table by key inside a task (Kafka's ``KTableValueGetter``)."""

    def init(self, context: Any) -> None:
        """Open the stores it reads through ``context``."""
        ...

    def get(self, key: Any) -> ValueAndTimestamp[Any] | None:
        """Return the value and timestamp of ``key``, or None."""
        ...


@dataclass(frozen=True, slots=True)
class GetterSupplier:
    """Makes value getters of a table and names the stores they read."""

    store_names: tuple[str, ...]
    make: Callable[[], ValueGetter]


class StoreGetter:
    """Read a materialized table's store (local or global): a key-value store by key, a
    windowed aggregation's window or session store by ``Windowed`` key."""

    def __init__(self, store_name: str) -> None:
        self.store_name = store_name
        self.store: Any = None
        #: How the store is read, chosen by its kind when it is opened (``init``).
        self.reader: ValueGetter

    def init(self, context: Any) -> None:
        """Look the store up and choose how to read it."""
        self.store = context.get_state_store(self.store_name)
        if isinstance(self.store, MeteredWindowStore):
            self.reader = WindowStoreReader(self.store)
        elif isinstance(self.store, MeteredSessionStore):
            self.reader = SessionStoreReader(self.store)
        else:
            self.reader = KeyValueReader(self.store)

    def get(self, key: Any) -> ValueAndTimestamp[Any] | None:
        """Return the stored value and timestamp."""
        return self.reader.get(key)

    def get_many(self, keys: list[Any]) -> list[ValueAndTimestamp[Any] | None]:
        """Return each key's stored value and timestamp, read at once where the store can."""
        return get_many(self.reader, keys)


class KeyValueReader:
    """Read a key-value store (a table's, or a global table's) by key."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def init(self, context: Any) -> None:
        """Nothing to open: the store is open."""

    def get(self, key: Any) -> ValueAndTimestamp[Any] | None:
        """Return the stored value and timestamp."""
        found: ValueAndTimestamp[Any] | None = self.store.get(key)
        return found

    def get_many(self, keys: list[Any]) -> list[ValueAndTimestamp[Any] | None]:
        """Each key's stored value and timestamp, read at once where the store can."""
        many = getattr(self.store, "get_many", None)
        if many is None:
            return [self.store.get(key) for key in keys]
        found: list[ValueAndTimestamp[Any] | None] = many(keys)
        return found


class WindowStoreReader:
    """Read a time or sliding windowed aggregation's window store by ``Windowed`` key: the
    aggregate and timestamp of the key in the window starting at the key's window start
    (Kafka's ``KStreamWindowAggregateValueGetter``: ``fetch(key, window.start)``)."""

    def __init__(self, store: MeteredWindowStore[Any, Any]) -> None:
        self.store = store

    def init(self, context: Any) -> None:
        """Nothing to open: the store is open."""

    def get(self, key: Windowed[Any]) -> ValueAndTimestamp[Any] | None:
        """Return the aggregate and timestamp of ``key.key`` in ``key.window``, or None."""
        found: ValueAndTimestamp[Any] | None = self.store.fetch_value(key.key, key.window.start)
        return found

    def get_many(self, keys: list[Windowed[Any]]) -> list[ValueAndTimestamp[Any] | None]:
        """:meth:`get` of each key, read from the store at once."""
        found: list[ValueAndTimestamp[Any] | None] = self.store.fetch_values(
            [k.key for k in keys], [k.window.start for k in keys]
        )
        return found


class SessionStoreReader:
    """Read a session aggregation's session store by ``Windowed`` key: the aggregate of
    exactly that session, timestamped with the session's end (Kafka's
    ``KTableSessionWindowValueGetter``: ``fetchSession(key, start, end)``)."""

    def __init__(self, store: MeteredSessionStore[Any, Any]) -> None:
        self.store = store

    def init(self, context: Any) -> None:
        """Nothing to open: the store is open."""

    def get(self, key: Windowed[Any]) -> ValueAndTimestamp[Any] | None:
        """Return the aggregate of the session ``key`` and its end, or None."""
        window = key.window
        value = self.store.fetch_session(key.key, window.start, window.end)
        return None if value is None else ValueAndTimestamp(value, window.end)


class DerivedGetter:
    """Compute a derived table's value (``filter``/``map_values`` without a store) from its
    parent's getter with the operator's ``compute(key, value)``."""

    def __init__(self, parent: ValueGetter, operator: Any) -> None:
        self.parent = parent
        self.operator = operator

    def init(self, context: Any) -> None:
        """Open the parent's stores; initialise the operator with ``context`` (a
        ``transform_values`` transformer needs its stores)."""
        self.parent.init(context)
        self.operator.init(context)

    def get(self, key: Any) -> ValueAndTimestamp[Any] | None:
        """Return ``compute`` of the parent's value, keeping its timestamp."""
        return self._computed(key, self.parent.get(key))

    def get_many(self, keys: list[Any]) -> list[ValueAndTimestamp[Any] | None]:
        """:meth:`get` of each key, the parent's values read at once."""
        return [
            self._computed(k, f) for k, f in zip(keys, get_many(self.parent, keys), strict=True)
        ]

    def _computed(
        self, key: Any, found: ValueAndTimestamp[Any] | None
    ) -> ValueAndTimestamp[Any] | None:
        if found is None:
            return None
        try:
            value = self.operator.compute(key, found[0])
        except Exception as exc:
            raise user_error(self.operator.name, self.operator.fn, exc) from exc
        return None if value is None else ValueAndTimestamp(value, found[1])


def get_many(getter: ValueGetter, keys: list[Any]) -> list[ValueAndTimestamp[Any] | None]:
    """Each key's value through ``getter``: at once where it can read many, else one by
    one (the order of the calls is the keys' order)."""
    many = getattr(getter, "get_many", None)
    if many is not None:
        found: list[ValueAndTimestamp[Any] | None] = many(keys)
        return found
    return [getter.get(key) for key in keys]
