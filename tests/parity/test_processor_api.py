"""Parity of the Processor API: user processors with user ``StoreBuilder`` stores
(RocksDB and in-memory), stream-time punctuation, a wall-clock schedule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statestores.stores import Stores
from tests.parity.harness import LONG, STR, Case, Snapshot, check_parity, rec
from topology import Processor, Produced, PunctuationType, Record, StreamsBuilder, Topology


class Counter(Processor[str, str, str, int]):
    """Counts per key in a store; every 10 ms of stream time emits every count."""

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store("counts")
        context.schedule(10, PunctuationType.STREAM_TIME, self.punctuate)

    def process(self, record: Record[str, str]) -> None:
        self.store.put(record.key, (self.store.get(record.key) or 0) + 1)

    def punctuate(self, timestamp: int) -> None:
        for key, count in self.store.all():
            self.context.forward(Record(key, count, timestamp))


def _punctuator() -> Topology:
    b = StreamsBuilder()
    b.add_state_store(
        Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), STR, LONG)
    )
    b.stream("in").process(Counter, "counts").to("out", Produced.with_(STR, LONG))
    return b.build()


def _check_punctuator(s: Snapshot) -> None:
    stamps = {ts for records in s.outputs["out"].values() for _, ts, _ in records}
    assert len(stamps) >= 3  # several punctuations, each at the stream time that fired it


STREAM_TIME_PUNCTUATOR = Case(
    name="processor-api-stream-time-punctuator",
    build=_punctuator,
    inputs=[
        rec("in", "abc"[i % 3], "x", ts)
        for i, ts in enumerate([1, 2, 4, 6, 7, 3, 12, 13, 14, 15, 16, 17, 21, 23, 24])
    ],
    outputs=("out",),
    max_poll_records=3,
    check=_check_punctuator,
)


class Changes(Processor[str, str, str, str]):
    """Forwards a record only when its key's value changed (last values in an in-memory
    store), with the previous value in a header; schedules an hourly wall-clock tick that
    neither run reaches (wall-clock time is not deterministic)."""

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store("last")
        context.schedule(3_600_000, PunctuationType.WALL_CLOCK_TIME, self.tick)

    def process(self, record: Record[str, str]) -> None:
        previous = self.store.get(record.key)
        if previous == record.value:
            return
        self.store.put(record.key, record.value)
        before = b"" if previous is None else previous.encode()
        self.context.forward(record.with_headers((*record.headers, ("before", before))))

    def tick(self, now: int) -> None:
        self.context.forward(Record("tick", str(now), now))


def _in_memory_store() -> Topology:
    b = StreamsBuilder()
    b.add_state_store(
        Stores.key_value_store_builder(Stores.in_memory_key_value_store("last"), STR, STR)
    )
    b.stream("in").process(Changes, "last").to("out")
    return b.build()


def _check_changes(s: Snapshot) -> None:
    assert s.count("out") < 12 and b"tick" not in s.outputs["out"]  # repeats dropped


IN_MEMORY_STORE = Case(
    name="processor-api-in-memory-store",
    build=_in_memory_store,
    inputs=[
        rec("in", "ab"[i % 2], v, i)
        for i, v in enumerate(["1", "1", "2", "1", "2", "2", "3", "1", "3", "3", "4", "4"])
    ],
    outputs=("out",),
    max_poll_records=3,
    check=_check_changes,
)

CASES = [STREAM_TIME_PUNCTUATOR, IN_MEMORY_STORE]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_parity(case: Case, spark: Any, tmp_path: Path) -> None:
    check_parity(case, spark, str(tmp_path))
