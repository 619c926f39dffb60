"""The topology DSL: StreamsBuilder, KStream, KTable and their compilation into
sub-topologies, the Processor API, and the per-task engine (:mod:`topology.engine.task`) that the
test driver and the Spark runtime both run. Imports no pyspark.

Module map: ``builder`` (StreamsBuilder), ``kstream``, ``branch``, ``ktable``, ``grouped``
(DSL handles); ``options`` (Consumed, Produced, ...); ``graph`` (node specs, GraphBuilder);
``topology`` (frozen Topology, sub-topologies); ``describe`` (Kafka's description text);
``naming``; ``stores`` (store factories, internal serdes); ``repartition``; ``proc_stream``,
``proc_table``, ``proc_aggregate`` (DSL processors); ``processor``, ``record``,
``timestamps`` (Processor API); ``task``, ``context``, ``nodes``, ``collector`` (engine);
``windows``, ``windowed``, ``windowed_serdes``, ``proc_window``, ``proc_sliding``,
``proc_session`` (windowed aggregations); ``suppress``; ``joins`` and ``join_*`` (joins).
"""

from __future__ import annotations

from statestores.api import VersionedRecord, Window, Windowed
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
from topology.dsl.windowed import SessionWindowedKStream, TimeWindowedKStream
from topology.graph.topology import Topology
from topology.processors.joins import JoinWindows

__all__ = [
    "Branched",
    "BranchedKStream",
    "BufferConfig",
    "Cancellable",
    "Change",
    "CogroupedKStream",
    "Consumed",
    "EmitStrategy",
    "FailOnInvalidTimestamp",
    "FixedKeyProcessor",
    "ForeignKeyExtractor",
    "GlobalKTable",
    "Grouped",
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
    "PunctuationType",
    "Record",
    "Repartitioned",
    "SessionWindowedKStream",
    "SessionWindows",
    "SlidingWindows",
    "StreamJoined",
    "StreamsBuilder",
    "Suppressed",
    "TimeWindowedKStream",
    "TimeWindows",
    "TimestampExtractor",
    "Topology",
    "UnlimitedWindows",
    "UsePartitionTimeOnInvalidTimestamp",
    "ValueAndTimestamp",
    "VersionedRecord",
    "WallclockTimestampExtractor",
    "Window",
    "Windowed",
    "WindowedSerdes",
]
