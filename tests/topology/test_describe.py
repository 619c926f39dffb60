"""describe() prints Kafka's TopologyDescription text exactly (acceptance 3); and
describe_processing() says which parts of a topology take batches."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from common.serdes import Serdes
from topology import (
    Branched,
    Materialized,
    Processor,
    Produced,
    StreamsBuilder,
    TimeWindows,
    Topology,
)
from topology.engine.processing import describe_processing

GOLDEN = Path(__file__).parent / "golden"
STORE = "KSTREAM-AGGREGATE-STATE-STORE-0000000002"


def word_count() -> Topology:
    """Kafka's WordCountDemo, as in the Kafka Streams tutorial."""
    b = StreamsBuilder()
    (
        b.stream("streams-plaintext-input")
        .flat_map_values(lambda v: re.split(r"\W+", v.lower()))
        .group_by(lambda k, v: v)
        .count(Materialized.as_("counts-store"))
        .to_stream()
        .to("streams-wordcount-output", Produced.with_(Serdes.String(), Serdes.Long()))
    )
    return b.build()


def test_word_count_description_matches_kafka_golden_file() -> None:
    # The golden text is the output Kafka's tutorial prints for this topology.
    assert str(word_count().describe()) == (GOLDEN / "wordcount.txt").read_text()


def test_unnamed_count_uses_generated_store_and_repartition_names() -> None:
    b = StreamsBuilder()
    b.stream("in").group_by(lambda k, v: v).count().to_stream().to("out")
    text = str(b.build().describe())
    assert "Processor: KSTREAM-AGGREGATE-0000000003 (stores: [" + STORE + "])" in text
    assert "Sink: KSTREAM-SINK-0000000004 (topic: " + STORE + "-repartition)" in text
    assert "Processor: KSTREAM-FILTER-0000000005 (stores: [])" in text
    assert "Source: KSTREAM-SOURCE-0000000006 (topics: [" + STORE + "-repartition])" in text
    assert "Processor: KTABLE-TOSTREAM-0000000007" in text and "KSTREAM-SINK-0000000008" in text


def test_nodes_are_ordered_by_subtree_size_then_name() -> None:
    b = StreamsBuilder()
    s = b.stream("in")
    s.filter(lambda k, v: True).map_values(str.upper).to("a")
    s.to("b")
    expected = (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: KSTREAM-SOURCE-0000000000 (topics: [in])\n"
        "      --> KSTREAM-FILTER-0000000001, KSTREAM-SINK-0000000004\n"
        "    Processor: KSTREAM-FILTER-0000000001 (stores: [])\n"
        "      --> KSTREAM-MAPVALUES-0000000002\n"
        "      <-- KSTREAM-SOURCE-0000000000\n"
        "    Processor: KSTREAM-MAPVALUES-0000000002 (stores: [])\n"
        "      --> KSTREAM-SINK-0000000003\n"
        "      <-- KSTREAM-FILTER-0000000001\n"
        "    Sink: KSTREAM-SINK-0000000003 (topic: a)\n"
        "      <-- KSTREAM-MAPVALUES-0000000002\n"
        "    Sink: KSTREAM-SINK-0000000004 (topic: b)\n"
        "      <-- KSTREAM-SOURCE-0000000000\n"
        "\n"
    )
    assert str(b.build().describe()) == expected


def test_global_store_split_and_pattern_are_described_as_kafka_does() -> None:
    b = StreamsBuilder()
    b.global_table("rates", materialized=Materialized.as_("rates-store"))
    branches = (
        b.stream(re.compile("orders-.*"))
        .split(named="route-")
        .branch(lambda k, v: v == "x", Branched.as_("x"))
        .default_branch()
    )
    assert sorted(branches) == ["route-0", "route-x"]
    text = str(b.build().describe())
    assert text.startswith(
        "Topologies:\n"
        "   Sub-topology: 0 for global store (will not generate tasks)\n"
        "    Source: KSTREAM-SOURCE-0000000000 (topics: [rates])\n"
        "      --> KTABLE-SOURCE-0000000001\n"
        "    Processor: KTABLE-SOURCE-0000000001 (stores: [rates-store])\n"
        "      --> none\n"
        "      <-- KSTREAM-SOURCE-0000000000\n"
        "  Sub-topology: 1\n"
        "    Source: KSTREAM-SOURCE-0000000002 (topics: orders-.*)\n"
        "      --> route-\n"
        "    Processor: route- (stores: [])\n"
        "      --> route-0, route-x\n"
    )


def test_subtopologies_internal_topics_and_changelogs() -> None:
    t = word_count()
    assert [s.id for s in t.subtopologies] == [0, 1]
    assert t.source_topics(1, "wc") == ("wc-counts-store-repartition",)
    assert list(t.repartition_topic_names("wc")) == ["wc-counts-store-repartition"]
    assert t.changelog_topics("wc") == {"counts-store": "wc-counts-store-changelog"}
    b = StreamsBuilder()
    b.stream("in").group_by_key().count(Materialized.as_("c").with_logging_disabled())
    assert b.build().changelog_topics("wc") == {}


# -- how the records run (describe_processing) -----------------------------------------


CONFIG = {"application.id": "app", "default.key.serde": "string", "default.value.serde": "string"}


def test_the_word_count_runs_columnar_its_count_on_raw_columns() -> None:
    text = str(describe_processing(word_count(), CONFIG))
    assert text.startswith("Processing (processing.engine=columnar):\n  Sub-topology: 0\n")
    assert "    Source: KSTREAM-SOURCE-0000000000: columnar\n" in text
    assert "      KSTREAM-FLATMAPVALUES-0000000001: batch\n" in text
    assert "      KSTREAM-SINK-0000000004: batch, combined per key on Spark\n" not in text
    assert "counts-store-repartition-sink: batch, combined per key on Spark\n" in text
    assert "      KSTREAM-AGGREGATE-0000000003: raw Arrow columns\n" in text
    uncached = {**CONFIG, "statestore.cache.max.bytes": 0}
    assert "combined" not in str(describe_processing(word_count(), uncached))


class Upper(Processor):  # type: ignore[type-arg]
    def init(self, context: Any) -> None:
        self.context = context

    def process(self, record: Any) -> None:
        self.context.forward(record.with_value(record.value.upper()))


def test_processor_api_nodes_merges_and_windowed_counts_as_they_run() -> None:
    b = StreamsBuilder()
    s = b.stream("in")
    s.process(Upper).to("upper")
    s.filter(lambda k, v: v).merge(s.map_values(len)).to("merged")  # two paths to one node
    (
        b.stream("words")
        .group_by(lambda k, v: v)
        .windowed_by(TimeWindows.of_size_and_grace(10, 5))
        .count()
        .to_stream()
        .to("windowed")
    )
    got = describe_processing(b.build(), {**CONFIG, "processing.guarantee": "exactly_once_v2"})
    assert "window set" not in str(describe_processing(b.build(), CONFIG))  # at_least_once
    merged, windowed, counting = got.sources
    assert not merged.columnar  # a node reached by two paths: one record at a time
    assert "record by record (below it a node is reached by two paths" in str(got)
    assert windowed.columnar and windowed.nodes[-1][1].endswith("window set inside a Spark batch")
    assert counting.columnar and counting.nodes[0][1] == "raw Arrow columns"
    assert "KSTREAM-AGGREGATE-0000000010" in got.columnar_nodes()
    b = StreamsBuilder()
    b.stream("in").map_values(str.lower).process(Upper).to("out")
    (alone,) = describe_processing(b.build(), CONFIG).sources
    assert [how for _, how in alone.nodes] == ["batch", "record by record", "batch"]


def test_the_record_engine_and_resuming_handlers_run_every_record_alone() -> None:
    for extra in (
        {"processing.engine": "record"},
        {"processing.exception.handler": "log-and-continue"},
    ):
        text = str(describe_processing(word_count(), {**CONFIG, **extra}))
        assert text.endswith("every record one at a time\n"), extra
