"""The Processor API: context, stores, punctuation, headers, timestamps, fixed keys."""

from __future__ import annotations

from typing import Any

from statestores.stores import Stores
from tests.topology.conftest import L, S
from topology import (
    FixedKeyProcessor,
    Processor,
    Produced,
    PunctuationType,
    Record,
    StreamsBuilder,
)


class Counter(Processor[str, str, str, int]):
    """Counts per key in a store; emits all counts on each stream-time punctuation."""

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store("counts")
        self.punctuations: list[int] = []
        context.schedule(10, PunctuationType.STREAM_TIME, self.punctuate)

    def process(self, record: Record[str, str]) -> None:
        self.store.put(record.key, (self.store.get(record.key) or 0) + 1)

    def punctuate(self, timestamp: int) -> None:
        self.punctuations.append(timestamp)
        for key, count in self.store.all():
            self.context.forward(Record(key, count, timestamp))


def counter_topology() -> Any:
    b = StreamsBuilder()
    b.add_state_store(
        Stores.key_value_store_builder(Stores.in_memory_key_value_store("counts"), S, L)
    )
    b.stream("in").process(Counter, "counts").to("out", Produced.with_(S, L))
    return b.build()


def test_stream_time_punctuation_fires_on_the_interval_grid(drive: Any) -> None:
    d = drive(counter_topology())
    i = d.create_input_topic("in", S, S)
    out = d.create_output_topic("out", S, L)
    i.pipe_input("a", "x", 3)  # stream time 3: the first schedule (0) is due
    assert out.read_records_to_list()[0].timestamp == 3
    i.pipe_input("b", "x", 9)  # next due at 10
    assert out.is_empty()
    i.pipe_input("a", "x", 25)  # due at 10, then next 30 (20 was missed)
    assert [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()] == [
        ("a", 2, 25),
        ("b", 1, 25),
    ]
    i.pipe_input("a", "x", 29)
    assert out.is_empty()
    i.pipe_input("c", "x", 30)
    assert out.get_queue_size() == 3


class Ticker(Processor[str, str, str, str]):
    def init(self, context: Any) -> None:
        super().init(context)
        self.handle = context.schedule(100, PunctuationType.WALL_CLOCK_TIME, self.tick)

    def process(self, record: Record[str, str]) -> None:
        if record.value == "stop":
            self.handle.cancel()

    def tick(self, now: int) -> None:
        self.context.forward(Record("tick", str(now), now))


def test_wall_clock_punctuation_on_advance_and_cancel(drive: Any) -> None:
    b = StreamsBuilder()
    b.stream("in").process(Ticker).to("out")
    d = drive(b.build(), initial_wall_clock_time_ms=1000)
    out = d.create_output_topic("out", S, S)
    d.advance_wall_clock_time(99)
    assert out.is_empty()
    d.advance_wall_clock_time(1)
    assert out.read_value() == "1100"
    d.advance_wall_clock_time(250)  # 1200 and 1300 were due: one run, next at 1400
    assert out.read_values_to_list() == ["1350"]
    d.create_input_topic("in", S, S).pipe_input("k", "stop")
    d.advance_wall_clock_time(1000)
    assert out.is_empty()


class Inspect(Processor[str, str, str, str]):
    def process(self, record: Record[str, str]) -> None:
        ctx = self.context
        info = (
            f"{ctx.task_id}|{ctx.application_id}|{ctx.topic}|{ctx.partition}|{ctx.offset}|"
            f"{ctx.processor_name}|{ctx.current_stream_time_ms()}|{ctx.app_config['application.id']}"
        )
        headers = (*record.headers, ("seen", b"1"))
        self.context.forward(record.with_value(info).with_headers(headers).with_timestamp(7))


def test_context_exposes_record_metadata_headers_and_timestamps(drive: Any) -> None:
    b = StreamsBuilder()
    b.stream("in").process(Inspect, named="inspect").to("out")
    d = drive(b.build())
    i = d.create_input_topic("in", S, S)
    i.pipe_input("k", "v", 50, (("h", b"x"),))
    i.pipe_input("k", "v", 40)
    records = d.create_output_topic("out", S, S).read_records_to_list()
    assert [r.value for r in records] == [
        "0_0|app|in|0|0|inspect|50|app",
        "0_0|app|in|0|1|inspect|50|app",
    ]
    assert records[0].headers == (("h", b"x"), ("seen", b"1"))
    assert records[0].timestamp == 7


class Upper(FixedKeyProcessor[str, str, str]):
    def process(self, record: Record[str, str]) -> None:
        # a fixed-key processor cannot change the key: the input key is kept
        self.context.forward(record.with_key("changed").with_value(record.value.upper()))


def test_process_values_keeps_keys_and_needs_no_repartition(drive: Any) -> None:
    b = StreamsBuilder()
    b.stream("in").process_values(Upper).group_by_key().count().to_stream().to(
        "out", Produced.with_(S, L)
    )
    topology = b.build()
    assert len(topology.subtopologies) == 1
    d = drive(topology)
    d.create_input_topic("in", S, S).pipe_key_value_list([("a", "x"), ("a", "y")])
    assert d.create_output_topic("out", S, L).read_key_values_to_list() == [("a", 1), ("a", 2)]


class Router(Processor[str, str, str, str]):
    def process(self, record: Record[str, str]) -> None:
        self.context.forward(record, child="KSTREAM-MAPVALUES-0000000002")


def test_forward_to_a_named_child(drive: Any) -> None:
    b = StreamsBuilder()
    s = b.stream("in").process(Router)
    s.map_values(str.upper).to("upper")
    s.to("all")
    d = drive(b.build())
    d.create_input_topic("in", S, S).pipe_input("k", "v")
    assert d.create_output_topic("upper", S, S).read_value() == "V"
    assert d.create_output_topic("all", S, S).is_empty()
