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
}

__all__ = [
    "ConfigError",
    "ConsumerRecord",
    "Producer",
    "ProducerFencedError",
    "Serde",
    "Serdes",
    "SerializationError",
    "StreamsConfig",
    "StreamsError",
    "TopicAdmin",
    "TopicReader",
    "TransactionalProducer",
    "serde_from_name",
]

if TYPE_CHECKING:
    from runtime.storage.producer import Producer
    from runtime.storage.reader import TopicReader
    from runtime.storage.records import ConsumerRecord
    from runtime.storage.topics import TopicAdmin
    from runtime.txn.producer import TransactionalProducer
    from streams.config import StreamsConfig
    from streams.errors import ConfigError, ProducerFencedError, SerializationError, StreamsError
    from streams.serdes import Serde, Serdes, serde_from_name


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'streams' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
