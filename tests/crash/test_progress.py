"""What a campaign reads of its instances' progress: an instance is caught up when the
group is stable and its committed positions are at the end of every partition it owns
(a storage fault's recovery then needs no commit of it: nothing waits for it)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from runtime.storage.producer import Producer
from runtime.storage.topics import TopicAdmin
from runtime.txn.offsets import OffsetsStore
from streams.crash.progress import InstanceProgress
from tests.runtime.group.test_membership import membership


def test_an_instance_is_caught_up_when_nothing_of_its_partitions_waits(
    admin: TopicAdmin, tmp_path: Path
) -> None:
    admin.create("lines", 2)
    member = membership(admin, tmp_path, "p1", "T")
    member.join()
    instance: Any = SimpleNamespace(process_id=lambda: "p1")
    other: Any = SimpleNamespace(process_id=lambda: "p2")  # owns nothing: never caught up
    progress = InstanceProgress(admin, "app")
    try:
        assert progress.caught_up([instance, other]) == {"p1"}  # empty partitions
        with Producer(admin) as producer:
            for i in range(3):
                producer.send("lines", b"k", b"v%d" % i, partition=0)
        assert progress.caught_up([instance]) == set()  # three records wait for it
        OffsetsStore(admin).commit("app", {("lines", 0): 2})
        assert progress.caught_up([instance]) == set()
        OffsetsStore(admin).commit("app", {("lines", 0): 3})
        assert progress.caught_up([instance]) == {"p1"}
    finally:
        member.close()
