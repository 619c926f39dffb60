"""Processors of cogrouped aggregations (KIP-150): Kafka's ``KStreamAggregate`` and
``KStreamWindowAggregate`` once per grouped stream, every one writing the same store.

A cogroup's aggregate processors share one store, so they share its cache's flush
listener too: the last processor to open the store registers it (as Kafka's, where the
listener forwards from the node that set it). Every one of them forwards to the same merge
node, so it does not matter which. What does matter is a batch folded under a cache that
hands on each write at once (size 0): the folding node mutes *its own* forwarder while it
writes and forwards the updates itself, but the listener the store calls belongs to
another node and is not muted. Such a batch goes record by record instead, as the record
engine runs it; with a buffering cache (or none) folding is as before.

Sliding and session windows use their processors as they are (each with its own batch
path where it has one).
"""

from __future__ import annotations

from topology.api.record import Record
from topology.engine.columnar import Batch
from topology.processors.proc_stream_aggregate import StreamAggregateProcessor
from topology.processors.proc_window import TimeWindowAggregateProcessor


class CogroupAggregateProcessor(StreamAggregateProcessor):
    """One grouped stream's ``aggregator`` folded into the cogroup's key-value store."""

    def process_batch(self, batch: Batch) -> None:
        """Fold the batch per key, or record by record under a cache of size 0."""
        forwarder = self.forwarder
        if forwarder.cached and not forwarder.buffered:
            self.one_by_one(batch)
            return
        self.fold(batch)


class CogroupTimeWindowAggregateProcessor(TimeWindowAggregateProcessor):
    """One grouped stream's ``aggregator`` folded into the cogroup's window store."""

    def process_batch(self, batch: Batch) -> None:
        """Fold the batch per key and window, or record by record under a cache of
        size 0."""
        forwarder = self.forwarder
        if forwarder.cached and not forwarder.buffered:
            ks, vs, ts = batch.keys, batch.values, batch.timestamps
            for i in range(len(ks)):
                self.context.set_timestamp(ts[i])
                self.process(Record(ks[i], vs[i], ts[i], batch.header(i)))
            return
        super().process_batch(batch)
