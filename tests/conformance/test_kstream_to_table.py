"""``KStream.to_table`` (KIP-523), from Kafka's ``KStreamImplTest``: a stream read as a
changelog, stored when named, repartitioned when its key was changed."""

from __future__ import annotations

from typing import Any

from statestores.stores import Stores
from tests.conformance.conftest import I, S
from topology import Consumed, Materialized, StreamsBuilder

MATERIALIZED = """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [input])
      --> KSTREAM-TOTABLE-0000000001
    Processor: KSTREAM-TOTABLE-0000000001 (stores: [store])
      --> none
      <-- KSTREAM-SOURCE-0000000000

"""

KEY_CHANGE = """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [input])
      --> KSTREAM-MAP-0000000001
    Processor: KSTREAM-MAP-0000000001 (stores: [])
      --> KSTREAM-FILTER-0000000005
      <-- KSTREAM-SOURCE-0000000000
    Processor: KSTREAM-FILTER-0000000005 (stores: [])
      --> KSTREAM-SINK-0000000004
      <-- KSTREAM-MAP-0000000001
    Sink: KSTREAM-SINK-0000000004 (topic: KSTREAM-TOTABLE-0000000002-repartition)
      <-- KSTREAM-FILTER-0000000005

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000006 (topics: [KSTREAM-TOTABLE-0000000002-repartition])
      --> KSTREAM-TOTABLE-0000000002
    Processor: KSTREAM-TOTABLE-0000000002 (stores: [])
      --> KTABLE-TOSTREAM-0000000007
      <-- KSTREAM-SOURCE-0000000006
    Processor: KTABLE-TOSTREAM-0000000007 (stores: [])
      --> KSTREAM-SINK-0000000008
      <-- KSTREAM-TOTABLE-0000000002
    Sink: KSTREAM-SINK-0000000008 (topic: output)
      <-- KTABLE-TOSTREAM-0000000007

"""


def test_should_materialize_ktable_from_kstream(drive: Any) -> None:
    """KStreamImplTest.shouldMaterializeKTableFromKStream"""
    b = StreamsBuilder()
    b.stream("input", Consumed.with_(S, S)).to_table(
        materialized=Materialized.as_(Stores.in_memory_key_value_store("store"))
    )
    topology = b.build()
    assert str(topology.describe()) == MATERIALIZED
    d = drive(topology)
    topic = d.create_input_topic("input", S, S)
    for key, value in (("A", "01"), ("B", "02"), ("A", "03")):
        topic.pipe_input(key, value)
    assert dict(d.get_key_value_store("store").all()) == {"A": "03", "B": "02"}


def test_should_support_key_change_ktable_from_kstream(drive: Any) -> None:
    """KStreamImplTest.shouldSupportKeyChangeKTableFromKStream"""
    b = StreamsBuilder()
    (
        b.stream("input", Consumed.with_(S, S))
        .map(lambda k, v: (ord(k[0]) - ord("A"), v))
        .to_table(materialized=Materialized.with_(I, None))
        .to_stream()
        .to("output")
    )
    topology = b.build()
    assert str(topology.describe()) == KEY_CHANGE
    d = drive(topology)
    topic = d.create_input_topic("input", S, S)
    piped = [("A", "01", 5), ("B", "02", 100), ("C", "03", 0), ("D", "04", 0)]
    piped += [("A", "05", 10), ("A", "06", 8)]
    for key, value, ts in piped:
        topic.pipe_input(key, value, ts)
    out = d.create_output_topic("output", I, S).read_records_to_list()
    assert [(r.key, r.value, r.timestamp) for r in out] == [
        (0, "01", 5),
        (1, "02", 100),
        (2, "03", 0),
        (3, "04", 0),
        (0, "05", 10),
        (0, "06", 8),
    ]
