"""Topics as Delta tables: names, create, list, describe, alter, delete."""

from __future__ import annotations

import os

import pytest
from deltalake import DeltaTable

from common.errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    TopicError,
    TopicExistsError,
    UnknownTopicError,
)
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin, validate_topic_config


@pytest.mark.parametrize("name", ["a", "orders.v1", "my_topic-2", "A" * 249, "..."])
def test_legal_names_are_accepted(admin: TopicAdmin, name: str) -> None:
    admin.create(name, 1)
    assert name in admin.list()


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "empty"),
        (".", "reserved"),
        ("..", "reserved"),
        ("A" * 250, "250 characters"),
        ("with space", "illegal characters"),
        ("slash/name", "illegal characters"),
        ("ümlaut", "illegal characters"),
    ],
)
def test_illegal_names_are_refused(admin: TopicAdmin, name: str, reason: str) -> None:
    with pytest.raises(InvalidTopicError, match=reason):
        admin.create(name, 1)


def test_create_is_a_partitioned_delta_table(admin: TopicAdmin, root: str) -> None:
    admin.create("orders", 4, configs={"cleanup.policy": "compact", "retention.ms": "1000"})
    table = DeltaTable(os.path.join(root, "topics", "orders"))
    assert table.metadata().partition_columns == ["partition"]
    assert table.metadata().configuration["streams.partitions"] == "4"
    assert [f.name for f in table.schema().fields] == [
        "partition",
        "key",
        "value",
        "timestamp",
        "headers",
    ]
    desc = admin.describe("orders")
    assert desc.num_partitions == 4
    assert desc.configs == {"cleanup.policy": "compact", "retention.ms": "1000"}
    assert [(p.partition, p.log_start_offset, p.log_end_offset) for p in desc.partitions] == [
        (0, 0, 0),
        (1, 0, 0),
        (2, 0, 0),
        (3, 0, 0),
    ]


def test_create_twice_fails_unless_if_not_exists(admin: TopicAdmin) -> None:
    admin.create("t", 2)
    with pytest.raises(TopicExistsError, match="'t' already exists"):
        admin.create("t", 2)
    admin.create("t", 5, if_not_exists=True)
    assert admin.num_partitions("t") == 2


@pytest.mark.parametrize("count", [0, -1, 10_001])
def test_partition_count_out_of_range(admin: TopicAdmin, count: int) -> None:
    with pytest.raises(InvalidPartitionsError, match="out of range"):
        admin.create("t", count)


def test_list_is_sorted_and_ignores_non_topics(admin: TopicAdmin, root: str) -> None:
    for name in ["zeta", "alpha", "mid"]:
        admin.create(name, 1)
    os.makedirs(os.path.join(root, "topics", "not-a-table"))
    assert admin.list() == ["alpha", "mid", "zeta"]


def test_delete_removes_data_and_metadata(admin: TopicAdmin, root: str) -> None:
    admin.create("gone", 2)
    with Producer(admin) as producer:
        producer.send("gone", b"k", b"v")
    admin.delete("gone")
    assert not os.path.exists(os.path.join(root, "topics", "gone"))
    assert admin.list() == []
    with pytest.raises(UnknownTopicError):
        admin.delete("gone")
    admin.create("gone", 1)  # the name can be used again, from offset 0
    assert TopicReader(root).end_offsets("gone") == {0: 0}


def test_partitions_only_increase(admin: TopicAdmin, root: str) -> None:
    admin.create("grow", 2)
    with Producer(admin) as producer:
        producer.send("grow", b"k", b"before", partition=1)
    admin.alter_partitions("grow", 5)
    assert admin.num_partitions("grow") == 5
    with pytest.raises(InvalidPartitionsError, match="only be increased"):
        admin.alter_partitions("grow", 3)
    with pytest.raises(InvalidPartitionsError, match="only be increased"):
        admin.alter_partitions("grow", 5)
    # Existing data keeps its offsets; a producer in another process sees the new count.
    other = Producer(root)
    other.send("grow", b"k2", b"after", partition=4)
    other.flush()
    reader = TopicReader(root)
    assert reader.end_offsets("grow") == {0: 0, 1: 1, 2: 0, 3: 0, 4: 1}
    assert reader.records("grow", 4, 0)[0].value == b"after"


def test_unknown_topic_errors_say_what_to_do(admin: TopicAdmin) -> None:
    with pytest.raises(UnknownTopicError, match="topics --create"):
        admin.describe("missing")
    with pytest.raises(UnknownTopicError):
        Producer(admin).send("missing", b"k", b"v")


def test_topic_configs_are_validated() -> None:
    assert validate_topic_config({"cleanup.policy": "compact, delete"}) == {
        "cleanup.policy": "compact,delete"
    }
    with pytest.raises(TopicError, match="cleanup.policy='forever'.*allowed"):
        validate_topic_config({"cleanup.policy": "forever"})
    with pytest.raises(TopicError, match="retention.ms='-5'.*>= -1"):
        validate_topic_config({"retention.ms": "-5"})
    with pytest.raises(TopicError, match="unknown topic config 'segment.bytez'"):
        validate_topic_config({"segment.bytez": "1"})


def test_alter_configs(admin: TopicAdmin) -> None:
    admin.create("c", 1)
    admin.alter_configs("c", {"retention.ms": "86400000"})
    assert admin.configs("c") == {"retention.ms": "86400000"}
