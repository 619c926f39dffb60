"""The instances of an application share its topics' cleaning: each cleans the topics that
hash to its place among the group's processes, so two instances do the work once (and do
not undo each other's merges); an instance alone cleans every topic."""

from __future__ import annotations

from pathlib import Path

from common.config import StreamsConfig
from runtime.app.log_manager import LogManager
from runtime.storage.topics import TopicAdmin
from tests.runtime.group.test_membership import membership, share

TOPICS = [f"topic-{i}" for i in range(40)]


def manager(admin: TopicAdmin, process_id: str | None) -> LogManager:
    config = StreamsConfig(**{"application.id": "app", "topics.root": admin.root.uri})
    cleaner = LogManager(admin, config, lambda: TOPICS)
    cleaner.process_id = process_id
    return cleaner


def test_two_instances_clean_each_topic_once(admin: TopicAdmin, tmp_path: Path) -> None:
    admin.create("lines", 2)
    first = membership(admin, tmp_path, "p1", "T")
    first.join()
    try:
        alone = manager(admin, "p1").mine(TOPICS)
        assert alone == TOPICS  # the group's only process
        second = membership(admin, tmp_path, "p2", "T")
        share(first, second)
        try:
            one, two = manager(admin, "p1").mine(TOPICS), manager(admin, "p2").mine(TOPICS)
            assert sorted(one + two) == sorted(TOPICS) and not set(one) & set(two)
            assert 10 < len(one) < 30  # a share each
            assert manager(admin, "p3").mine(TOPICS) == TOPICS  # not in the group (yet)
            assert manager(admin, None).mine(TOPICS) == TOPICS
        finally:
            second.close()
    finally:
        first.close()
