"""spark-streams-eos: Kafka Streams on PySpark Structured Streaming, exactly once.

The public names are resolved lazily, so that ``streams.errors``, ``streams.serdes`` and
``streams.config`` (leaf modules that import nothing else of the project) can be used by
every layer without pulling in the whole stack or creating import cycles.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "StreamsConfig": "streams.config",
    "Serde": "streams.serdes",
    "Serdes": "streams.serdes",
    "serde_from_name": "streams.serdes",
    "StreamsError": "streams.errors",
    "ConfigError": "streams.errors",
    "SerializationError": "streams.errors",
    "TopicAdmin": "runtime.storage.topics",
    "Producer": "runtime.storage.producer",
    "TopicReader": "runtime.storage.reader",
    "TransactionalProducer": "runtime.txn.producer",
    "ProducerFencedError": "streams.errors",
    "ConsumerRecord": "runtime.storage.records",
    "StreamsBuilder": "topology.builder",
    "KStream": "topology.kstream",
    "KTable": "topology.ktable",
    "GlobalKTable": "topology.ktable",
    "KGroupedStream": "topology.grouped",
    "KGroupedTable": "topology.grouped",
    "BranchedKStream": "topology.branch",
    "Branched": "topology.branch",
    "Topology": "topology.topology",
    "Consumed": "topology.options",
    "Produced": "topology.options",
    "Grouped": "topology.options",
    "Materialized": "topology.options",
    "Named": "topology.options",
    "Joined": "topology.options",
    "StreamJoined": "topology.options",
    "JoinWindows": "topology.joins",
    "Repartitioned": "topology.options",
    "TimeWindows": "topology.windows",
    "SlidingWindows": "topology.windows",
    "SessionWindows": "topology.windows",
    "UnlimitedWindows": "topology.windows",
    "Suppressed": "topology.suppress",
    "BufferConfig": "topology.suppress",
    "WindowedSerdes": "topology.windowed_serdes",
    "Record": "topology.record",
    "Change": "topology.record",
    "ValueAndTimestamp": "topology.record",
    "Processor": "topology.processor",
    "FixedKeyProcessor": "topology.processor",
    "ProcessorContext": "topology.processor",
    "PunctuationType": "topology.processor",
    "Cancellable": "topology.processor",
    "TimestampExtractor": "topology.timestamps",
    "WallclockTimestampExtractor": "topology.timestamps",
    "FailOnInvalidTimestamp": "topology.timestamps",
    "LogAndSkipOnInvalidTimestamp": "topology.timestamps",
    "UsePartitionTimeOnInvalidTimestamp": "topology.timestamps",
    "TopologyTestDriver": "streams.testing",
    "TestInputTopic": "streams.testing",
    "TestOutputTopic": "streams.testing",
    "TestRecord": "streams.testing",
    "Windowed": "statestores.api",
    "Window": "statestores.api",
    "TopologyError": "streams.errors",
    "StreamsProcessingError": "streams.errors",
    "InvalidTimestampError": "streams.errors",
}

__all__ = [
    "Branched",
    "BranchedKStream",
    "BufferConfig",
    "Cancellable",
    "Change",
    "ConfigError",
    "Consumed",
    "ConsumerRecord",
    "FailOnInvalidTimestamp",
    "FixedKeyProcessor",
    "GlobalKTable",
    "Grouped",
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
    "StreamJoined",
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
    "WallclockTimestampExtractor",
    "Window",
    "Windowed",
    "WindowedSerdes",
    "serde_from_name",
]

if TYPE_CHECKING:
    from runtime.storage.producer import Producer
    from runtime.storage.reader import TopicReader
    from runtime.storage.records import ConsumerRecord
    from runtime.storage.topics import TopicAdmin
    from runtime.txn.producer import TransactionalProducer
    from statestores.api import Window, Windowed
    from streams.config import StreamsConfig
    from streams.errors import (
        ConfigError,
        InvalidTimestampError,
        ProducerFencedError,
        SerializationError,
        StreamsError,
        StreamsProcessingError,
        TopologyError,
    )
    from streams.serdes import Serde, Serdes, serde_from_name
    from streams.testing import TestInputTopic, TestOutputTopic, TestRecord, TopologyTestDriver
    from topology.branch import Branched, BranchedKStream
    from topology.builder import StreamsBuilder
    from topology.grouped import KGroupedStream, KGroupedTable
    from topology.joins import JoinWindows
    from topology.kstream import KStream
    from topology.ktable import GlobalKTable, KTable
    from topology.options import (
        Consumed,
        Grouped,
        Joined,
        Materialized,
        Named,
        Produced,
        Repartitioned,
        StreamJoined,
    )
    from topology.processor import (
        Cancellable,
        FixedKeyProcessor,
        Processor,
        ProcessorContext,
        PunctuationType,
    )
    from topology.record import Change, Record, ValueAndTimestamp
    from topology.suppress import BufferConfig, Suppressed
    from topology.timestamps import (
        FailOnInvalidTimestamp,
        LogAndSkipOnInvalidTimestamp,
        TimestampExtractor,
        UsePartitionTimeOnInvalidTimestamp,
        WallclockTimestampExtractor,
    )
    from topology.topology import Topology
    from topology.windowed_serdes import WindowedSerdes
    from topology.windows import SessionWindows, SlidingWindows, TimeWindows, UnlimitedWindows


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'streams' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
