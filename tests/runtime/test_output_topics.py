"""The topics a batch may write with a topic-name-extractor sink, and the error a task
gets for one that does not exist (without Spark)."""

from __future__ import annotations

import pytest

from common.errors import UnknownTopicError
from runtime.storage.topics import TopicAdmin
from runtime.tasks.collector import OutputTopic, StagingCollector
from runtime.thread.output_topics import OutputCatalog, has_topic_extractors
from topology import StreamsBuilder


def test_only_extractor_sinks_offer_every_existing_topic(admin: TopicAdmin) -> None:
    b = StreamsBuilder()
    b.stream("in").to("out")
    assert not has_topic_extractors(b.build())
    b.stream("in2").to(lambda k, v, ctx: f"to-{v}")
    assert has_topic_extractors(b.build())
    admin.create("out", 2)
    fixed = {"out": OutputTopic(admin.table_path("out"), 2)}
    assert OutputCatalog(admin, fixed, dynamic=False).for_batch() == fixed
    catalog = OutputCatalog(admin, fixed, dynamic=True)
    assert catalog.for_batch() == fixed
    admin.create("to-x", 3)  # created while running: the next batch may write it
    assert catalog.for_batch()["to-x"] == OutputTopic(admin.table_path("to-x"), 3)


def test_a_missing_topic_is_named_with_what_to_do(root: str) -> None:
    collector = StagingCollector(root, {"out": OutputTopic(f"{root}/topics/out", 1)}, "s")
    collector.send("out", b"k", b"v", 1, (), None)
    with pytest.raises(UnknownTopicError, match=r"topic 'nope' does not exist.*--create"):
        collector.send("nope", b"k", b"v", 1, (), None)
    with pytest.raises(UnknownTopicError, match="nope"):
        collector.partitions_for("nope")
