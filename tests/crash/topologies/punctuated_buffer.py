"""A delay line on stream time: the Processor API with a store and a punctuator.

Every order on ``orders`` is held in the store ``pending`` and released to
``released-orders`` by a stream-time punctuator (every 10 s of stream time) once stream
time has passed its timestamp by 20 s; released orders leave the store in the same
transaction. An extra punctuation (a restart schedules the punctuator again) releases
nothing early: release depends on stream time only. The generator ends with a record far
ahead, so every order is released.
"""

from __future__ import annotations

import json
from typing import Any

from common.serdes import Serdes
from statestores.stores import Stores
from topology import Processor, Produced, PunctuationType, Record, StreamsBuilder, Topology

INPUT = "orders"
OUTPUT = "released-orders"
TOPICS = {INPUT: 2, OUTPUT: 2}
CONFIG = {
    "application.id": "punctuated-buffer",
    "processing.guarantee": "exactly_once_v2",
    "default.key.serde": "string",
    "default.value.serde": "string",
}
DELAY_MS = 20_000
START_MS = 1_735_722_000_000


class DelayLine(Processor[str, str, str, str]):
    """Holds each record until stream time is ``DELAY_MS`` past it."""

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store("pending")
        context.schedule(10_000, PunctuationType.STREAM_TIME, self.release)

    def process(self, record: Record[str, str]) -> None:
        key = f"{record.timestamp:015d}|{record.key}"
        self.store.put(key, json.dumps([record.key, record.value, record.timestamp]))

    def release(self, stream_time: int) -> None:
        due = [(k, v) for k, v in self.store.range(None, f"{stream_time - DELAY_MS:015d}|~")]
        for k, v in due:
            key, value, ts = json.loads(v)
            self.context.forward(Record(key, value, ts))
            self.store.delete(k)


def build_topology() -> Topology:
    """Release every order 20 s of stream time after it arrived."""
    b = StreamsBuilder()
    b.add_state_store(
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store("pending"), Serdes.String(), Serdes.String()
        )
    )
    b.stream(INPUT).process(DelayLine, "pending").to(
        OUTPUT, Produced.with_(Serdes.String(), Serdes.String())
    )
    return b.build()


def generate(n: int) -> list[tuple[str, str, int]]:
    """``12 n`` orders a second apart (a buffer is quick: enough to run through five kills),
    then one far ahead per partition's keys."""
    count = 12 * n
    out = [(f"customer-{i % 5}", f"order-{i}", START_MS + i * 1_000) for i in range(count)]
    end = START_MS + count * 1_000 + 10 * DELAY_MS
    out.extend((f"customer-{c}", "flush", end) for c in range(5))
    return out
