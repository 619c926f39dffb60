"""Stream threads' group membership: one application.id, one topology."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from common.config import StreamsConfig
from runtime.group.errors import TopologyMismatchError
from runtime.storage.topics import TopicAdmin
from runtime.thread.membership import ThreadMembership, topology_fingerprint

TASKS = {"0_0": (("lines", 0),), "0_1": (("lines", 1),)}


def membership(
    admin: TopicAdmin, tmp_path: Path, process: str, description: str, tasks: object = None
) -> ThreadMembership:
    config = StreamsConfig(
        **{
            "application.id": "app",
            "topics.root": admin.root.uri,
            "state.dir": str(tmp_path / process),
            "group.initial.rebalance.delay.ms": "0",
        }
    )
    return ThreadMembership(
        admin,
        config,
        instance_id=f"{process}-1",
        client_id=f"app-{process}-StreamThread-1",
        tasks=tasks or TASKS,  # type: ignore[arg-type]
        process_id=process,
        description=description,
    )


def test_the_fingerprint_covers_the_description_and_the_tasks() -> None:
    assert topology_fingerprint("A", TASKS) == topology_fingerprint("A", dict(TASKS))
    assert topology_fingerprint("A", TASKS) != topology_fingerprint("B", TASKS)
    assert topology_fingerprint("A", TASKS) != topology_fingerprint("A", {"0_0": TASKS["0_0"]})


def test_an_instance_of_another_topology_cannot_join(admin: TopicAdmin, tmp_path: Path) -> None:
    admin.create("lines", 2)
    first = membership(admin, tmp_path, "p1", "Topologies: one")
    try:
        assert first.join() == {"0_0", "0_1"}
        changed = membership(admin, tmp_path, "p2", "Topologies: two")
        with pytest.raises(TopologyMismatchError, match=rf"{first.fingerprint}") as refused:
            changed.join()
        assert "must run the same topology" in str(refused.value)
        assert "application-reset" in str(refused.value)
        # The same topology in another process is welcome: the two share the tasks. Each
        # member rejoins between its batches; here a thread per member polls instead.
        same = membership(admin, tmp_path, "p3", "Topologies: one")
        stop = threading.Event()

        def run(member: ThreadMembership, join: bool) -> None:
            if join:
                member.join()
            while not stop.is_set():
                member.poll()
                time.sleep(0.02)

        threads = [
            threading.Thread(target=run, args=(m, j), daemon=True)
            for m, j in ((first, False), (same, True))
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 60
        while not (len(first.owned) == len(same.owned) == 1) and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        assert first.owned | same.owned == {"0_0", "0_1"}, (first.owned, same.owned)
        assert len(first.owned) == len(same.owned) == 1
        same.close()
    finally:
        first.close()
