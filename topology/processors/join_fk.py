"""Foreign-key table-table joins (KIP-213): ``left.join(right, fk_extractor, joiner)``
joins each left row with the right row whose key is ``fk_extractor(left value)``.

The graph, as Kafka's ``doJoinOnForeignKey``::

    left  -> SUBSCRIPTION-REGISTRATION (send) -> sink -> <app>-...-SUBSCRIPTION-REGISTRATION-N-topic
          -> source -> SUBSCRIPTION-PROCESSOR (receive: subscription store)
          -> SUBSCRIPTION-PROCESSOR (join the right value) ---------\\
    right -> SUBSCRIPTION-PROCESSOR (scan the subscriptions of a FK) -> sink
          -> <app>-...-SUBSCRIPTION-RESPONSE-M-topic -> source
          -> SUBSCRIPTION-RESPONSE-RESOLVER (join with the *current* left value) -> OUTPUT

A left update registers a subscription (partitioned by foreign key) carrying the Murmur3
hash of the left value; every response carries that hash back, and the resolver drops a
response whose hash no longer matches the current left value (a stale answer to an older
version of the row). The internal topics flow like repartition topics.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from topology.api.options import ForeignKeyExtractor
from topology.api.processor import Processor
from topology.api.record import Change, Record, ValueAndTimestamp
from topology.engine.context import NodeContext
from topology.engine.nodes import user_error
from topology.processors.join_fk_wire import (
    CombinedKeySerde,
    FkSerdes,
    Instruction,
    PrefixSerializer,
    Response,
    Subscription,
)
from topology.processors.joins import GetterSupplier, ValueGetter

if TYPE_CHECKING:
    pass

FK_JOIN = "KTABLE-FK-JOIN-"
SUBSCRIPTION_REGISTRATION = FK_JOIN + "SUBSCRIPTION-REGISTRATION-"
SUBSCRIPTION_RESPONSE = FK_JOIN + "SUBSCRIPTION-RESPONSE-"
SUBSCRIPTION_PROCESSOR = FK_JOIN + "SUBSCRIPTION-PROCESSOR-"
SUBSCRIPTION_STATE_STORE = FK_JOIN + "SUBSCRIPTION-STATE-STORE-"
RESPONSE_RESOLVER = FK_JOIN + "SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR-"
FK_JOIN_OUTPUT = FK_JOIN + "OUTPUT-"

_LOG = logging.getLogger(__name__)
_new = tuple.__new__
_I = Instruction


class _FkProcessor(Processor[Any, Any, Any, Any]):
    """Binds the join's serdes to the task's configuration on init."""

    context: NodeContext

    def __init__(self, name: str, serdes: FkSerdes) -> None:
        self.name = name
        self.serdes = serdes

    def init(self, context: Any) -> None:
        """Bind the serdes."""
        self.context = context
        self.serdes.bind(context.app_config, context.application_id)

    def _emit(self, record: Record[Any, Any], key: Any, value: Any, ts: int | None = None) -> None:
        stamp = record[2] if ts is None else ts
        self.context.forward(_new(Record, (key, value, stamp, record[3])))

    def _out_of_order(self, change: Change[Any]) -> bool:
        """Whether ``change`` is an out-of-order update of a versioned table (KIP-914):
        dropped, counted in ``dropped-records``, as Kafka's foreign-key join processors
        drop it (an update of a table that is not versioned always is the latest)."""
        if change.is_latest:
            return False
        self.context.record_dropped()
        _LOG.info(
            "Skipping out-of-order record from versioned table while performing table-table join."
        )
        return True


class SubscriptionSendProcessor(_FkProcessor):
    """Turn a left update into subscriptions keyed by foreign key (the old one removed
    when the foreign key changed), as Kafka's ``SubscriptionSendProcessorSupplier``.

    The instructions follow the developer guide's semantics table, which differs from
    Kafka 3.7's code in two corners: an inner-join row whose foreign key becomes null is
    deleted from the result (Kafka skips the update, leaving a stale row), and a left-join
    row whose foreign key changes is emitted once (Kafka's ``DELETE_KEY_AND_PROPAGATE`` of
    the old key emits it a second time).
    """

    def __init__(
        self,
        name: str,
        serdes: FkSerdes,
        extractor: Callable[[Any], Any] | ForeignKeyExtractor,
        left: bool,
    ) -> None:
        super().__init__(name, serdes)
        self.extractor = (
            extractor
            if isinstance(extractor, ForeignKeyExtractor)
            else ForeignKeyExtractor.from_function(extractor)
        )
        self.left = left

    def _fk(self, key: Any, value: Any) -> Any:
        try:
            return self.extractor.extract(key, value)
        except Exception as exc:
            fn = self.extractor.fn
            raise user_error(self.name, fn, exc, "foreign key extractor") from exc

    def process(self, record: Record[Any, Any]) -> None:
        """Send the subscriptions of this change (see the class docstring); an update
        that is not its key's latest version sends none."""
        if self._out_of_order(record[1]):
            return
        key, (new, old) = record[0], record[1]
        value_hash = self.serdes.value_hash(new)

        def send(fk: Any, instruction: Instruction) -> None:
            self._emit(record, fk, Subscription(value_hash, instruction, key))

        old_fk = None if old is None else self._fk(key, old)
        if new is None:  # the left row is deleted
            if old_fk is not None:
                send(old_fk, _I.DELETE_KEY_AND_PROPAGATE)
            elif self.left and old is not None:
                send(None, _I.PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE)
            return
        new_fk = self._fk(key, new)
        fk_bytes = self.serdes.fk_bytes
        if old_fk is not None and fk_bytes(new_fk) != fk_bytes(old_fk):
            if new_fk is None and not self.left:  # the row leaves an inner join's result
                send(old_fk, _I.DELETE_KEY_AND_PROPAGATE)
                return
            send(old_fk, _I.DELETE_KEY_NO_PROPAGATE)
        if new_fk is None and not self.left:
            return  # a null foreign key joins nothing
        if old is None and not self.left:
            send(new_fk, _I.PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE)
        else:
            send(new_fk, _I.PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE)


class SubscriptionReceiveProcessor(_FkProcessor):
    """Store (or delete) each subscription under ``(foreign key, primary key)`` and pass it
    on as a change keyed by that combined key."""

    def __init__(self, name: str, serdes: FkSerdes, store_name: str) -> None:
        super().__init__(name, serdes)
        self.store_name = store_name

    def init(self, context: Any) -> None:
        """Open the subscription store."""
        super().init(context)
        self.store = context.get_state_store(self.store_name)

    def process(self, record: Record[Any, Any]) -> None:
        """Update the store and forward."""
        fk, sub, ts = record[0], record[1], record[2]
        new = ValueAndTimestamp(sub, ts)
        if fk is None:
            if sub.instruction is _I.PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE:
                self._emit(record, (None, sub.primary_key), Change(new, None))
            return
        combined = (fk, sub.primary_key)
        old = self.store.get(combined)
        deleting = sub.instruction in (_I.DELETE_KEY_AND_PROPAGATE, _I.DELETE_KEY_NO_PROPAGATE)
        self.store.put(combined, None if deleting else new)
        self._emit(record, combined, Change(new, old))


class SubscriptionJoinProcessor(_FkProcessor):
    """Answer a subscription with the right table's current value of its foreign key."""

    def __init__(self, name: str, serdes: FkSerdes, getter: GetterSupplier) -> None:
        super().__init__(name, serdes)
        self.getter: ValueGetter = getter.make()

    def init(self, context: Any) -> None:
        """Open the right table's stores."""
        super().init(context)
        self.getter.init(context)

    def process(self, record: Record[Any, Any]) -> None:
        """Forward a response keyed by the primary key, per the instruction."""
        (fk, pk), sub_at = record[0], record[1][0]
        sub, ts = sub_at[0], sub_at[1]
        found = None if fk is None else self.getter.get(fk)
        if found is not None:
            ts = max(ts, found[1])
        foreign = None if found is None else found[0]
        instruction = sub.instruction
        if instruction is _I.DELETE_KEY_AND_PROPAGATE:
            self._emit(record, pk, Response(sub.value_hash, None), ts)
        elif instruction is _I.PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE or (
            instruction is _I.PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE and found is not None
        ):
            self._emit(record, pk, Response(sub.value_hash, foreign), ts)


class ForeignTableJoinProcessor(_FkProcessor):
    """Send a right-table update to every left row subscribed to its key."""

    def __init__(
        self, name: str, serdes: FkSerdes, store_name: str, keys: CombinedKeySerde
    ) -> None:
        super().__init__(name, serdes)
        self.store_name = store_name
        self.prefix = PrefixSerializer(keys)

    def init(self, context: Any) -> None:
        """Open the subscription store."""
        super().init(context)
        self.store = context.get_state_store(self.store_name)

    def process(self, record: Record[Any, Any]) -> None:
        """Scan the foreign key's subscriptions and respond to each (not for an update
        that is not its key's latest version)."""
        fk, change = record[0], record[1]
        if fk is None or self._out_of_order(change):
            return
        for (_, pk), sub_at in list(self.store.prefix_scan(fk, self.prefix)):
            self._emit(record, pk, Response(sub_at[0].value_hash, change[0]))


class ResponseJoinProcessor(_FkProcessor):
    """Join a response with the current left row, dropping stale responses (hash
    mismatch); forward the joined value (None: a deletion)."""

    def __init__(
        self,
        name: str,
        serdes: FkSerdes,
        getter: GetterSupplier,
        joiner: Callable[[Any, Any], Any],
        left: bool,
    ) -> None:
        super().__init__(name, serdes)
        self.getter: ValueGetter = getter.make()
        self.joiner = joiner
        self.left = left
        self.stale = 0

    def init(self, context: Any) -> None:
        """Open the left table's stores."""
        super().init(context)
        self.getter.init(context)

    def process(self, record: Record[Any, Any]) -> None:
        """Resolve the response."""
        key, response = record[0], record[1]
        current = self.getter.get(key)
        value = None if current is None else current[0]
        if response.value_hash != self.serdes.value_hash(value):
            self.stale += 1
            return
        result = None
        if response.foreign_value is not None or (self.left and value is not None):
            try:
                result = self.joiner(value, response.foreign_value)
            except Exception as exc:
                raise user_error(self.name, self.joiner, exc, "value joiner") from exc
        self._emit(record, key, result)
