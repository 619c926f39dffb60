"""spark-streams-eos: Kafka Streams on PySpark Structured Streaming, exactly once.

The public facade: ``from streams import StreamsBuilder, StreamsApp, Materialized``. The
names are resolved lazily, so that importing ``streams`` (for a serde, or the test driver)
does not start pulling in Spark; the project's own layers import from ``common``,
``statestores``, ``topology`` and ``runtime`` directly, never from this facade.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "StreamsApp": "runtime.app.app",
    "delta_table_stream": "runtime.spark.delta_table_source",
    "read_store": "runtime.app.read_store",
    "StateUpgrade": "runtime.app.upgrades",
    "InitialState": "runtime.app.initial_state",
    "StreamThreadExceptionResponse": "runtime.app.app_state",
    "StreamsConfig": "common.config",
    "Stores": "statestores.stores",
    "Serde": "common.serdes",
    "Serdes": "common.serdes",
    "serde_from_name": "common.serdes",
    "StreamsError": "common.errors",
    "ConfigError": "common.errors",
    "SerializationError": "common.errors",
    "InvalidRecordError": "common.errors",
    "TopicAdmin": "runtime.storage.topics",
    "Producer": "runtime.storage.producer",
    "TopicReader": "runtime.storage.reader",
    "TransactionalProducer": "runtime.txn.producer",
    "ProducerFencedError": "common.errors",
    "ConsumerRecord": "runtime.storage.records",
    "StreamsBuilder": "topology.dsl.builder",
    "KStream": "topology.dsl.kstream",
    "KTable": "topology.dsl.ktable",
    "GlobalKTable": "topology.dsl.ktable",
    "KGroupedStream": "topology.dsl.grouped",
    "KGroupedTable": "topology.dsl.grouped",
    "CogroupedKStream": "topology.dsl.cogroup",
    "BranchedKStream": "topology.dsl.branch",
    "Branched": "topology.dsl.branch",
    "Topology": "topology.graph.topology",
    "Consumed": "topology.api.options",
    "Produced": "topology.api.options",
    "Printed": "topology.api.options",
    "ForeignKeyExtractor": "topology.api.options",
    "Grouped": "topology.api.options",
    "Materialized": "topology.api.options",
    "Named": "topology.api.options",
    "Joined": "topology.api.options",
    "StreamJoined": "topology.api.options",
    "JoinWindows": "topology.processors.joins",
    "EmitStrategy": "topology.api.emit",
    "Repartitioned": "topology.api.options",
    "TimeWindows": "topology.api.windows",
    "SlidingWindows": "topology.api.windows",
    "SessionWindows": "topology.api.windows",
    "UnlimitedWindows": "topology.api.windows",
    "Suppressed": "topology.dsl.suppress",
    "BufferConfig": "topology.dsl.suppress",
    "WindowedSerdes": "topology.api.windowed_serdes",
    "Record": "topology.api.record",
    "Change": "topology.api.record",
    "ValueAndTimestamp": "topology.api.record",
    "Processor": "topology.api.processor",
    "FixedKeyProcessor": "topology.api.processor",
    "ProcessorContext": "topology.api.processor",
    "PunctuationType": "topology.api.processor",
    "Cancellable": "topology.api.processor",
    "TimestampExtractor": "topology.api.timestamps",
    "WallclockTimestampExtractor": "topology.api.timestamps",
    "FailOnInvalidTimestamp": "topology.api.timestamps",
    "LogAndSkipOnInvalidTimestamp": "topology.api.timestamps",
    "UsePartitionTimeOnInvalidTimestamp": "topology.api.timestamps",
    "TopologyTestDriver": "streams.testkit.driver",
    "TestInputTopic": "streams.testkit.driver",
    "TestOutputTopic": "streams.testkit.driver",
    "TestRecord": "streams.testkit.driver",
    "Windowed": "statestores.api",
    "Window": "statestores.api",
    "VersionedRecord": "statestores.api",
    "TopologyError": "common.errors",
    "StreamsProcessingError": "common.errors",
    "InvalidTimestampError": "common.errors",
}

__all__ = [
    "Branched",
    "BranchedKStream",
    "BufferConfig",
    "Cancellable",
    "Change",
    "CogroupedKStream",
    "ConfigError",
    "Consumed",
    "ConsumerRecord",
    "EmitStrategy",
    "FailOnInvalidTimestamp",
    "FixedKeyProcessor",
    "ForeignKeyExtractor",
    "GlobalKTable",
    "Grouped",
    "InvalidRecordError",
    "InvalidTimestampError",
    "JoinWindows",
    "Joined",
    "KGroupedStream",
    "KGroupedTable",
    "KStream",
    "KTable",
    "LogAndSkipOnInvalidTimestamp",
    "Materialized",
    "Named",
    "Printed",
    "Processor",
    "ProcessorContext",
    "Produced",
    "Producer",
    "ProducerFencedError",
    "PunctuationType",
    "Record",
    "Repartitioned",
    "Serde",
    "Serdes",
    "SerializationError",
    "SessionWindows",
    "SlidingWindows",
    "Stores",
    "StreamJoined",
    "StreamThreadExceptionResponse",
    "StreamsApp",
    "StreamsBuilder",
    "StreamsConfig",
    "StreamsError",
    "StreamsProcessingError",
    "Suppressed",
    "TestInputTopic",
    "TestOutputTopic",
    "TestRecord",
    "TimeWindows",
    "TimestampExtractor",
    "TopicAdmin",
    "TopicReader",
    "Topology",
    "TopologyError",
    "TopologyTestDriver",
    "TransactionalProducer",
    "UnlimitedWindows",
    "UsePartitionTimeOnInvalidTimestamp",
    "ValueAndTimestamp",
    "VersionedRecord",
    "WallclockTimestampExtractor",
    "Window",
    "Windowed",
    "WindowedSerdes",
    "delta_table_stream",
    "read_store",
    "serde_from_name",
]

if TYPE_CHECKING:
    from common.config import StreamsConfig
    from common.errors import (
        ConfigError,
        InvalidRecordError,
        InvalidTimestampError,
        ProducerFencedError,
        SerializationError,
        StreamsError,
        StreamsProcessingError,
        TopologyError,
    )
    from common.serdes import Serde, Serdes, serde_from_name
    from runtime.app.app import StreamsApp
    from runtime.app.app_state import StreamThreadExceptionResponse
    from runtime.app.read_store import read_store
    from runtime.spark.delta_table_source import delta_table_stream
    from runtime.storage.producer import Producer
    from runtime.storage.reader import TopicReader
    from runtime.storage.records import ConsumerRecord
    from runtime.storage.topics import TopicAdmin
    from runtime.txn.producer import TransactionalProducer
    from statestores.api import VersionedRecord, Window, Windowed
    from statestores.stores import Stores
    from streams.testkit.driver import TopologyTestDriver
    from streams.testkit.topics import TestInputTopic, TestOutputTopic, TestRecord
    from topology.api.emit import EmitStrategy
    from topology.api.options import (
        Consumed,
        ForeignKeyExtractor,
        Grouped,
        Joined,
        Materialized,
        Named,
        Printed,
        Produced,
        Repartitioned,
        StreamJoined,
    )
    from topology.api.processor import (
        Cancellable,
        FixedKeyProcessor,
        Processor,
        ProcessorContext,
        PunctuationType,
    )
    from topology.api.record import Change, Record, ValueAndTimestamp
    from topology.api.timestamps import (
        FailOnInvalidTimestamp,
        LogAndSkipOnInvalidTimestamp,
        TimestampExtractor,
        UsePartitionTimeOnInvalidTimestamp,
        WallclockTimestampExtractor,
    )
    from topology.api.windowed_serdes import WindowedSerdes
    from topology.api.windows import SessionWindows, SlidingWindows, TimeWindows, UnlimitedWindows
    from topology.dsl.branch import Branched, BranchedKStream
    from topology.dsl.builder import StreamsBuilder
    from topology.dsl.cogroup import CogroupedKStream
    from topology.dsl.grouped import KGroupedStream, KGroupedTable
    from topology.dsl.kstream import KStream
    from topology.dsl.ktable import GlobalKTable, KTable
    from topology.dsl.suppress import BufferConfig, Suppressed
    from topology.graph.topology import Topology
    from topology.processors.joins import JoinWindows


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'streams' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
