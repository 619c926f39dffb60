"""The topology DSL: StreamsBuilder, KStream, KTable and their compilation into
sub-topologies, the Processor API, and the per-task engine (:mod:`topology.task`) that the
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

from statestores.api import Window, Windowed
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
from topology.windowed import SessionWindowedKStream, TimeWindowedKStream
from topology.windowed_serdes import WindowedSerdes
from topology.windows import SessionWindows, SlidingWindows, TimeWindows, UnlimitedWindows

__all__ = [
    "Branched",
    "BranchedKStream",
    "BufferConfig",
    "Cancellable",
    "Change",
    "Consumed",
    "FailOnInvalidTimestamp",
    "FixedKeyProcessor",
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
    "WallclockTimestampExtractor",
    "Window",
    "Windowed",
    "WindowedSerdes",
]
