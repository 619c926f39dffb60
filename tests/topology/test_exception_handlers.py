"""Kafka's exception handlers through the TopologyTestDriver: deserialization, processing
(KIP-1033) and production handlers, each response, the dead-letter queue (KIP-1034) and
its headers, the dropped-records count, user handlers by import path, config errors."""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import pytest

from common.config import StreamsConfig, StreamsDeprecationWarning
from common.errors import (
    ConfigError,
    SerializationError,
    StreamsError,
    StreamsProcessingError,
    TopologyError,
)
from common.handlers import (
    ErrorHandlerContext,
    ProducerRecord,
    RawRecord,
    Response,
    Result,
)
from common.serdes import Serdes
from streams.testing import TestRecord, TopologyTestDriver
from tests.topology.conftest import CONFIG, L, S
from topology import Consumed, Processor, Produced, PunctuationType, StreamsBuilder, Topology
from topology.engine.task import StreamTask
from topology.engine.task_input import TaskInput

B = Serdes.Bytes()
HERE = __name__
POISON = b"not-a-number"


def long_bytes(n: int) -> bytes:
    data = L.serialize("in", n)
    assert data is not None
    return data


def numbers_topology() -> Topology:
    """in (string keys, long values) -> +1 -> out."""
    b = StreamsBuilder()
    b.stream("in", Consumed.with_(S, L)).map_values(lambda v: v + 1).to("out", Produced.with_(S, L))
    return b.build()


def pipe(driver: TopologyTestDriver, *values: bytes, headers: Any = ()) -> None:
    for i, value in enumerate(values):
        driver.pipe_raw("in", f"k{i}".encode(), value, 100 + i, headers)


def headers_of(record: TestRecord[Any, Any]) -> dict[str, str]:
    return {k: (v or b"").decode() for k, v in record.headers if k.startswith("__streams.")}


# -- deserialization ---------------------------------------------------------------------


def test_log_and_fail_is_the_default_and_names_topic_partition_offset(drive: Any) -> None:
    d = drive(numbers_topology())
    pipe(d, long_bytes(1))
    with pytest.raises(SerializationError) as info:
        pipe(d, long_bytes(1), POISON)
    assert "topic=in partition=0 offset=2" in str(info.value)
    assert "log-and-continue would skip it" in str(info.value)
    assert d.metrics().total("dropped-records-total") == 0


def test_log_and_continue_skips_the_poison_record_and_counts_it(
    drive: Any, caplog: pytest.LogCaptureFixture
) -> None:
    d = drive(numbers_topology(), **{"deserialization.exception.handler": "log-and-continue"})
    with caplog.at_level(logging.WARNING, "common.handlers"):
        pipe(d, long_bytes(1), POISON, long_bytes(3))
    assert d.create_output_topic("out", S, L).read_values_to_list() == [2, 4]
    assert d.metrics().total("dropped-records-total") == 1
    assert d.metrics().value("dropped-records-total", task_id="0_0") == 1
    assert "[task 0_0] node=KSTREAM-SOURCE-0000000000 topic=in partition=0 offset=1" in caplog.text


def test_dead_letter_holds_the_raw_record_with_its_origin_in_headers(drive: Any) -> None:
    d = drive(
        numbers_topology(),
        **{
            "deserialization.exception.handler": "log-and-continue",
            "errors.dead.letter.queue.topic.name": "dlq",
        },
    )
    pipe(d, long_bytes(1), POISON, headers=[("trace", b"t-1")])
    assert d.create_output_topic("out", S, L).read_values_to_list() == [2]
    [letter] = d.create_output_topic("dlq", B, B).read_records_to_list()
    assert (letter.key, letter.value, letter.timestamp) == (b"k1", POISON, 101)
    assert letter.headers[0] == ("trace", b"t-1")  # the input's headers come first
    errors = headers_of(letter)
    assert list(errors) == [
        "__streams.errors.exception",
        "__streams.errors.message",
        "__streams.errors.stacktrace",
        "__streams.errors.topic",
        "__streams.errors.partition",
        "__streams.errors.offset",
    ]
    assert errors["__streams.errors.exception"] == "common.errors.SerializationError"
    assert "LongDeserializer is not 8" in errors["__streams.errors.message"]
    assert errors["__streams.errors.stacktrace"].startswith("Traceback")
    assert (errors["__streams.errors.topic"], errors["__streams.errors.partition"]) == ("in", "0")
    assert errors["__streams.errors.offset"] == "1"
    assert d.metrics().total("dropped-records-total") == 1


def test_log_and_fail_with_a_dead_letter_topic_aborts_the_dead_letter_too(drive: Any) -> None:
    d = drive(numbers_topology(), **{"errors.dead.letter.queue.topic.name": "dlq"})
    with pytest.raises(SerializationError, match="offset=0"):
        pipe(d, POISON)
    pipe(d, long_bytes(5))  # what the failed record sent was discarded with it
    assert d.create_output_topic("dlq", B, B).is_empty()
    assert d.create_output_topic("out", S, L).read_values_to_list() == [6]


def test_columns_skip_bad_records_and_consume_past_them() -> None:
    config = StreamsConfig.from_dict(
        {
            **CONFIG,
            "topics.root": "/tmp/x",
            "deserialization.exception.handler": "log-and-continue",
            "errors.dead.letter.queue.topic.name": "dlq",
        }
    )
    sent: list[tuple[str, Any, Any]] = []

    class Collector:
        def send(self, topic: str, key: Any, value: Any, *rest: Any) -> None:
            sent.append((topic, key, value))

        def partitions_for(self, topic: str) -> int:
            return 1

    task = StreamTask(numbers_topology(), 0, 0, config, Collector())
    task.initialize()
    values = [long_bytes(1), POISON, long_bytes(3)]
    n = task.process_columns("in", 0, [b"a", b"b", b"c"], values, [1, 2, 3], [10, 11, 12])
    assert n == 3
    assert task.consumed_offsets == {("in", 0): 13}
    assert task.dropped_records == 1
    assert [(t, k) for t, k, _ in sent] == [("out", b"a"), ("dlq", b"b"), ("out", b"c")]


def test_deprecated_key_and_kafka_class_names_are_accepted(drive: Any) -> None:
    with pytest.warns(StreamsDeprecationWarning, match="default.deserialization.exception"):
        d = drive(
            numbers_topology(),
            **{
                "default.deserialization.exception.handler": (
                    "org.apache.kafka.streams.errors.LogAndContinueExceptionHandler"
                )
            },
        )
    assert d.config.deserialization_exception_handler == "log-and-continue"
    assert d.config.get("default.deserialization.exception.handler") == "log-and-continue"
    pipe(d, POISON)
    assert d.metrics().total("dropped-records-total") == 1


def test_the_new_key_wins_over_the_deprecated_one() -> None:
    with pytest.warns(StreamsDeprecationWarning, match="ignored, production.exception.handler"):
        config = StreamsConfig.from_dict(
            {
                **CONFIG,
                "topics.root": "/x",
                "default.production.exception.handler": "log-and-continue",
                "production.exception.handler": "DefaultProductionExceptionHandler",
            }
        )
    assert config.production_exception_handler == "log-and-fail"


def test_a_dead_letter_topic_read_by_the_topology_is_refused() -> None:
    with pytest.raises(TopologyError, match="'in' is a source topic of the topology"):
        TopologyTestDriver(numbers_topology(), {"errors.dead.letter.queue.topic.name": "in"})


# -- processing ---------------------------------------------------------------------------


def parse(value: str) -> int:
    return int(value)


def branching_topology() -> Topology:
    """in -> parse -> numbers, and in -> all: siblings of the failing node."""
    b = StreamsBuilder()
    s = b.stream("in")
    s.map_values(parse, named="parse").map_values(str).to("numbers")
    s.to("all")
    return b.build()


def test_processing_log_and_continue_drops_at_the_failing_node_only(drive: Any) -> None:
    d = drive(branching_topology(), **{"processing.exception.handler": "log-and-continue"})
    topic = d.create_input_topic("in", S, S)
    for value in ("1", "x", "3"):
        topic.pipe_input("k", value)
    assert d.create_output_topic("numbers", S, S).read_values_to_list() == ["1", "3"]
    assert d.create_output_topic("all", S, S).read_values_to_list() == ["1", "x", "3"]
    assert d.metrics().total("dropped-records-total") == 1


def test_processing_default_fails_with_the_node_and_function(drive: Any) -> None:
    d = drive(branching_topology())
    with pytest.raises(StreamsProcessingError, match=r"processor parse: user function 'parse'"):
        d.create_input_topic("in", S, S).pipe_input("k", "x")


def test_processing_dead_letter_holds_the_source_record(drive: Any) -> None:
    d = drive(
        branching_topology(),
        **{
            "processing.exception.handler": "log-and-continue",
            "errors.dead.letter.queue.topic.name": "dlq",
        },
    )
    d.create_input_topic("in", S, S).pipe_input("k", "x", 7)
    [letter] = d.create_output_topic("dlq", S, S).read_records_to_list()
    assert (letter.key, letter.value, letter.timestamp) == ("k", "x", 7)
    errors = headers_of(letter)
    assert errors["__streams.errors.exception"] == "builtins.ValueError"
    assert errors["__streams.errors.message"].startswith("invalid literal for int()")
    assert errors["__streams.errors.offset"] == "0"


def test_processing_failure_with_a_dead_letter_topic_still_fails(drive: Any) -> None:
    d = drive(branching_topology(), **{"errors.dead.letter.queue.topic.name": "dlq"})
    with pytest.raises(StreamsProcessingError, match="processor parse"):
        d.create_input_topic("in", S, S).pipe_input("k", "x")
    assert d.create_output_topic("dlq", S, S).is_empty()


def test_processing_dead_letters_from_columns_carry_each_record_s_bytes() -> None:
    config = {
        **CONFIG,
        "topics.root": "/x",
        "processing.exception.handler": "log-and-continue",
        "errors.dead.letter.queue.topic.name": "dlq",
    }
    sent: list[tuple[str, Any, Any]] = []

    class Collector:
        def send(self, topic: str, key: Any, value: Any, *rest: Any) -> None:
            sent.append((topic, key, value))

        def partitions_for(self, topic: str) -> int:
            return 1

    task = StreamTask(branching_topology(), 0, 0, StreamsConfig.from_dict(config), Collector())
    task.initialize()
    task.process_columns("in", 0, [b"a", b"b", b"c"], [b"1", b"x", b"3"], [1, 2, 3], [7, 8, 9])
    assert ("dlq", b"b", b"x") in sent
    assert [v for t, _, v in sent if t == "numbers"] == [b"1", b"3"]
    assert task.dropped_records == 1


def test_processor_api_and_punctuator_errors_go_to_the_handler(drive: Any) -> None:
    class Flaky(Processor[Any, Any, Any, Any]):
        def init(self, context: Any) -> None:
            self.context = context
            context.schedule(10, PunctuationType.WALL_CLOCK_TIME, self.tick)

        def tick(self, now: int) -> None:
            raise RuntimeError("tick")

        def process(self, record: Any) -> None:
            if record.value == "bad":
                raise KeyError("bad")
            self.context.forward(record)

    b = StreamsBuilder()
    b.stream("in").process(Flaky, named="flaky").to("out")
    d = drive(
        b.build(),
        initial_wall_clock_time_ms=0,
        **{"processing.exception.handler": "log-and-continue"},
    )
    topic = d.create_input_topic("in", S, S)
    topic.pipe_input("k", "bad")
    topic.pipe_input("k", "good")
    d.advance_wall_clock_time(10)
    d.advance_wall_clock_time(10)  # the punctuator stays scheduled
    assert d.create_output_topic("out", S, S).read_values_to_list() == ["good"]
    assert d.metrics().total("dropped-records-total") == 3


class RecordingHandler:
    """A user handler: resumes on ValueError and records what it was given."""

    calls: ClassVar[list[tuple[ErrorHandlerContext, Any, Exception]]] = []
    configs: ClassVar[list[dict[str, Any]]] = []

    def configure(self, configs: Any) -> None:
        RecordingHandler.configs.append(dict(configs))

    def handle_error(self, context: ErrorHandlerContext, record: Any, exception: Exception) -> Any:
        RecordingHandler.calls.append((context, record, exception))
        return Result.CONTINUE if isinstance(exception, ValueError) else Response.fail()


def test_user_handler_by_import_path_gets_context_record_and_user_exception(
    drive: Any,
) -> None:
    RecordingHandler.calls.clear()
    d = drive(branching_topology(), **{"processing.exception.handler": f"{HERE}:RecordingHandler"})
    assert d.config.processing_exception_handler == f"{HERE}:RecordingHandler"
    d.create_input_topic("in", S, S).pipe_input("k", "x", 5, [("h", b"1")])
    [(context, record, exception)] = RecordingHandler.calls
    assert (context.topic, context.partition, context.offset) == ("in", 0, 0)
    assert (context.processor_node_id, context.task_id, context.timestamp) == ("parse", "0_0", 5)
    assert (context.source_raw_key, context.source_raw_value) == (b"k", b"x")
    assert context.headers == (("h", b"1"),)
    assert (record.key, record.value) == ("k", "x")
    assert type(exception) is ValueError
    assert RecordingHandler.configs[-1]["application.id"] == "app"
    assert d.metrics().total("dropped-records-total") == 1


class BrokenHandler:
    def handle_error(self, context: Any, record: Any, exception: Exception) -> Any:
        return "yes"


class RaisingHandler:
    def handle_error(self, context: Any, record: Any, exception: Exception) -> Any:
        raise RuntimeError("handler bug")


@pytest.mark.parametrize(
    ("handler", "message"),
    [
        ("BrokenHandler", r"returned 'yes'; return a common.handlers.Response"),
        ("RaisingHandler", r"raised RuntimeError: handler bug \(fatal user code error"),
    ],
)
def test_a_misbehaving_handler_stops_the_task(drive: Any, handler: str, message: str) -> None:
    d = drive(branching_topology(), **{"processing.exception.handler": f"{HERE}.{handler}"})
    with pytest.raises(StreamsError, match=message):
        d.create_input_topic("in", S, S).pipe_input("k", "x")


# -- production ---------------------------------------------------------------------------


def mismatched_sink() -> Topology:
    """Values pass through as strings, except "n" which becomes an int: the sink's string
    serde cannot serialize it."""
    b = StreamsBuilder()
    b.stream("in").map_values(lambda v: 1 if v == "n" else v).to("out", Produced.with_(S, S))
    return b.build()


def test_production_default_fails_naming_the_sink_and_origin(drive: Any) -> None:
    d = drive(mismatched_sink())
    with pytest.raises(SerializationError, match=r"sink .*: cannot serialize the record's value"):
        d.create_input_topic("in", S, S).pipe_input("k", "n")


def test_production_log_and_continue_drops_the_output_record(drive: Any) -> None:
    d = drive(
        mismatched_sink(),
        **{
            "production.exception.handler": "log-and-continue",
            "errors.dead.letter.queue.topic.name": "dlq",
        },
    )
    topic = d.create_input_topic("in", S, S)
    for value in ("a", "n", "b"):
        topic.pipe_input("k", value)
    assert d.create_output_topic("out", S, S).read_values_to_list() == ["a", "b"]
    [letter] = d.create_output_topic("dlq", S, S).read_records_to_list()
    assert letter.value == "n"  # the raw input record
    assert headers_of(letter)["__streams.errors.offset"] == "1"
    assert d.metrics().total("dropped-records-total") == 1


class ProductionHandler:
    seen: ClassVar[list[tuple[ProducerRecord, str]]] = []

    def handle_serialization_error(
        self, context: Any, record: ProducerRecord, exception: Exception, origin: str
    ) -> Response:
        ProductionHandler.seen.append((record, origin))
        return Response.retry()


def test_production_retry_is_fail_and_the_handler_sees_the_unserialized_record(
    drive: Any,
) -> None:
    ProductionHandler.seen.clear()
    d = drive(mismatched_sink(), **{"production.exception.handler": f"{HERE}.ProductionHandler"})
    with pytest.raises(SerializationError, match="cannot serialize the record's value"):
        d.create_input_topic("in", S, S).pipe_input("k", "n", 3)
    [(record, origin)] = ProductionHandler.seen
    assert (record.topic, record.key, record.value, record.timestamp) == ("out", "k", 1, 3)
    assert origin == "value"


def test_a_send_failure_goes_to_the_production_handler(engine: str) -> None:
    b = StreamsBuilder()
    b.stream("in", Consumed.with_(S, S)).to(lambda k, v, ctx: v, Produced.with_(S, S))
    sent: list[str] = []

    class Collector:
        def send(self, topic: str, *rest: Any) -> None:
            if topic == "unknown":
                raise KeyError(topic)
            sent.append(topic)

        def partitions_for(self, topic: str) -> int:
            return 1

    def task(handler: str) -> StreamTask:
        config = {
            **CONFIG,
            "topics.root": "/x",
            "production.exception.handler": handler,
            "processing.engine": engine,
        }
        t = StreamTask(b.build(), 0, 0, StreamsConfig.from_dict(config), Collector())
        t.initialize()
        return t

    resuming = task("log-and-continue")
    resuming.process("in", b"k", b"unknown", 1, (), 0)
    resuming.process("in", b"k", b"ok", 1, (), 1)
    assert sent == ["ok"] and resuming.dropped_records == 1
    with pytest.raises(KeyError, match="unknown"):
        task("log-and-fail").process("in", b"k", b"unknown", 1)


# -- configuration ------------------------------------------------------------------------


class NoMethod:
    pass


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("deserialization.exception.handler", "log-and-skip", "not a built-in name"),
        ("processing.exception.handler", "nosuch.module.Handler", "cannot import nosuch.module"),
        ("production.exception.handler", f"{HERE}.NoMethod", "has no handle_error or handle_"),
        ("production.exception.handler", f"{HERE}.Missing", f"{HERE} has no attribute Missing"),
        ("errors.dead.letter.queue.topic.name", "bad topic", "not a valid topic name"),
    ],
)
def test_bad_handler_values_name_the_key_the_value_and_what_is_allowed(
    key: str, value: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as info:
        StreamsConfig.from_dict({**CONFIG, "topics.root": "/x", key: value})
    message = str(info.value)
    assert message.startswith(f"{key}: ")
    assert reason in message and repr(value) in message
    assert "allowed: " in message
    if "handler" in key:
        assert "log-and-fail, log-and-continue" in message


def test_nothing_wraps_the_hot_path_with_the_defaults() -> None:
    config = StreamsConfig.from_dict({**CONFIG, "topics.root": "/x"})
    task = StreamTask(numbers_topology(), 0, 0, config, None)  # type: ignore[arg-type]
    assert not task.errors.handlers.resumes_processing
    assert not task.errors.handlers.needs_raw_input
    assert type(task.input) is TaskInput  # process() keeps no raw input, counts no weights


class RawRecordingHandler:
    seen: ClassVar[list[tuple[RawRecord, Exception]]] = []

    def handle_error(self, context: Any, record: RawRecord, exception: Exception) -> Any:
        RawRecordingHandler.seen.append((record, exception))
        return Response.resume()


def test_deserialization_handler_sees_the_raw_record(drive: Any) -> None:
    RawRecordingHandler.seen.clear()
    handler = f"{HERE}.RawRecordingHandler"
    d = drive(numbers_topology(), **{"deserialization.exception.handler": handler})
    pipe(d, POISON, headers=[("h", None)])
    [(record, exception)] = RawRecordingHandler.seen
    assert record == RawRecord("in", 0, 0, 100, b"k0", POISON, (("h", None),))
    assert isinstance(exception, SerializationError)
