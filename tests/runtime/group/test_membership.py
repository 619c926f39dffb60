"""Stream threads' group membership: one application.id, one topology."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest

from common.config import StreamsConfig
from common.errors import GenerationFencedError
from runtime.group.coordinator import GroupState
from runtime.group.errors import (
    FencedInstanceIdError,
    GroupJoinTimeoutError,
    TopologyMismatchError,
)
from runtime.storage.topics import TopicAdmin
from runtime.thread.membership import ThreadMembership, topology_fingerprint

TASKS = {"0_0": (("lines", 0),), "0_1": (("lines", 1),)}


def membership(  # noqa: PLR0917 - the member's parts
    admin: TopicAdmin,
    tmp_path: Path,
    process: str,
    description: str,
    tasks: object = None,
    extra: dict[str, str] | None = None,
) -> ThreadMembership:
    config = StreamsConfig(
        **{
            "application.id": "app",
            "topics.root": admin.root.uri,
            "state.dir": str(tmp_path / process),
            "group.initial.rebalance.delay.ms": "0",
            **(extra or {}),
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
        # The same topology in another process is welcome: the two share the tasks.
        same = membership(admin, tmp_path, "p3", "Topologies: one")
        share(first, same)
        assert first.owned | same.owned == {"0_0", "0_1"}, (first.owned, same.owned)
        assert len(first.owned) == len(same.owned) == 1
        same.close()
    finally:
        first.close()


#: A member whose batches may run 1.5 s (its rebalances too), heartbeating every 100 ms.
SHORT_POLL = {
    "max.poll.interval.ms": "1500",
    "heartbeat.interval.ms": "100",
    "session.timeout.ms": "3000",
}


def share(first: ThreadMembership, second: ThreadMembership, *, join: bool = True) -> None:
    """Let two members (``second`` joining first when ``join``) poll until each runs one
    of the two tasks: each member rejoins between its batches; a thread per member polls
    here instead."""
    stop = threading.Event()

    def run(member: ThreadMembership, joins: bool) -> None:
        if joins:
            member.join()
        while not stop.is_set():
            try:
                member.poll()
            except GroupJoinTimeoutError:  # a slow rebalance on a busy machine: poll again
                member._rejoin.set()
            time.sleep(0.02)

    threads = [
        threading.Thread(target=run, args=(m, j), daemon=True)
        for m, j in ((first, False), (second, join))
    ]
    for thread in threads:
        thread.start()

    def shared() -> bool:
        group = first.coordinator.describe("app")
        current = all(m.member.generation == group.generation for m in (first, second))
        return (
            group.state is GroupState.STABLE
            and current
            and len(group.members) == 2
            and (len(first.owned) == len(second.owned) == 1)
        )

    deadline = time.monotonic() + 60
    while not shared() and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    for thread in threads:
        thread.join(timeout=30)


def test_the_only_member_is_never_fenced_by_its_own_slow_batch(
    admin: TopicAdmin, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Past max.poll.interval.ms the group's only member keeps its tasks and says so in
    one line naming the setting (nobody else could take them); a member with company
    leaves so that its tasks move (Kafka's poll timeout)."""
    admin.create("lines", 2)
    alone = membership(admin, tmp_path, "p1", "T", extra=SHORT_POLL)
    try:
        assert alone.join() == {"0_0", "0_1"}
        with caplog.at_level(logging.WARNING, logger="runtime.thread.membership"):
            alone.batch_started()
            time.sleep(3.0)  # twice the limit, 30 heartbeats
            alone.batch_finished()
        warned = [
            r.getMessage() for r in caplog.records if "max.poll.interval.ms" in r.getMessage()
        ]
        assert len(warned) == 1, warned  # one line for the batch, not one per heartbeat
        assert "only member it keeps its tasks" in warned[0] and "(1500 ms)" in warned[0]
        assert not alone.rejoin_pending
        alone.validate()  # still the group's current member: it may commit
        members = alone.coordinator.describe("app").members
        assert [m.member_id for m in members] == [alone.member.member_id]

        # With a second member, the slow one leaves.
        other = membership(admin, tmp_path, "p2", "T", extra=SHORT_POLL)
        share(alone, other)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="runtime.thread.membership"):
            alone.batch_started()
            deadline = time.monotonic() + 10
            while not alone.rejoin_pending and time.monotonic() < deadline:
                time.sleep(0.05)
            alone.batch_finished()
        assert alone.rejoin_pending  # it left: its next poll rejoins
        assert any("leaving the group so its tasks move" in r.getMessage() for r in caplog.records)
        # Its next batch rejoins, and its heartbeats go on: past a session timeout it is
        # still the group's member (its heartbeat thread used to end when it left).
        share(alone, other, join=False)
        time.sleep(1.5 * int(SHORT_POLL["session.timeout.ms"]) / 1000)
        alone.validate()
        other.close()
    finally:
        alone.close(leave=False)


def test_a_task_that_comes_back_is_a_new_incarnation(admin: TopicAdmin, tmp_path: Path) -> None:
    """A task keeps its incarnation while its member keeps it; one that leaves and comes
    back, or that the member lost with all its tasks (it left the group), gets a new one:
    another member may have committed it meanwhile, so its host rebuilds it."""
    admin.create("lines", 2)
    first = membership(admin, tmp_path, "p1", "T", extra=SHORT_POLL)
    try:
        assert first.join() == {"0_0", "0_1"}
        alone = dict(first.incarnations)
        assert set(alone) == {"0_0", "0_1"}
        other = membership(admin, tmp_path, "p2", "T", extra=SHORT_POLL)
        share(first, other)
        (kept,) = first.owned
        assert first.incarnations == {kept: alone[kept]}  # kept all along
        other.close()
        deadline = time.monotonic() + 30
        while first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        (back,) = {"0_0", "0_1"} - {kept}
        assert first.owned == {"0_0", "0_1"}
        assert first.incarnations[kept] == alone[kept]
        assert first.incarnations[back] > alone[back]  # left and came back

        # Losing its tasks (it left the group after a batch overran max.poll.interval.ms)
        # makes every task new, though the member gets the same tasks back.
        other = membership(admin, tmp_path, "p3", "T", extra=SHORT_POLL)
        share(first, other)
        before = dict(first.incarnations)
        first.batch_started()
        while not first.rejoin_pending and time.monotonic() < deadline + 30:
            time.sleep(0.05)
        first.batch_finished()
        other.close()
        assert first.poll() is not None  # rejoined: its tasks are new, even if the same
        assert all(first.incarnations[t] > before.get(t, 0) for t in first.owned)
    finally:
        first.close(leave=False)


def test_a_member_tells_a_lost_session_from_another_process_in_its_place(
    admin: TopicAdmin, tmp_path: Path
) -> None:
    """A member whose session expired (paused) rejoins; one whose ``group.instance.id``
    another process now holds (the same process id, from a copied state.dir) is the zombie
    and stops (:func:`runtime.app.thread_errors.respond_to`)."""
    admin.create("lines", 2)
    first = membership(admin, tmp_path, "p1", "T", extra=SHORT_POLL)
    first.join()
    assert not first.replaced()
    first.close(leave=False)  # no heartbeat from here on: a paused process
    deadline = time.monotonic() + 30
    while first.coordinator.describe("app").members and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not first.coordinator.describe("app").members  # its session expired
    assert not first.replaced()  # it lost its tasks: it may rejoin
    twin = membership(admin, tmp_path / "copy", "p1", "T", extra=SHORT_POLL)
    try:
        assert twin.join() == {"0_0", "0_1"}
        assert first.replaced()
        assert not twin.replaced()
    finally:
        twin.close()


def test_a_member_out_of_the_group_cancels_its_batch_in_flight(
    admin: TopicAdmin, tmp_path: Path
) -> None:
    """A batch whose member is out of the group can never commit: once a heartbeat says
    so, the batch is cancelled (its Spark job may otherwise wait half a minute for an
    executor a pause lost); between batches nothing is cancelled."""
    admin.create("lines", 2)
    first = membership(admin, tmp_path, "p1", "T", extra=SHORT_POLL)
    cancels: list[str] = []
    first.on_lost = lambda: cancels.append("batch")
    first.join()
    twin = membership(admin, tmp_path / "copy", "p1", "T", extra=SHORT_POLL)
    try:
        first.batch_started()
        twin.join()  # takes first's group.instance.id: first is out of the group
        deadline = time.monotonic() + 20
        while not cancels and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cancels == ["batch"]
        assert first.cancelled is not None and "p1-1" in str(first.cancelled)
        first.batch_finished()
        with pytest.raises(FencedInstanceIdError):  # no later batch starts out of the group
            first.batch_started()
        assert first.cancelled is None  # a later batch's failure is its own, not a cancel's
    finally:
        first.batch_finished()
        first.close(leave=False)
        twin.close()
    idle = membership(admin, tmp_path / "idle", "p2", "T", extra=SHORT_POLL)
    idle.on_lost = lambda: cancels.append("idle")
    idle.join()
    try:
        twin_of_idle = membership(admin, tmp_path / "idle2", "p2", "T", extra=SHORT_POLL)
        twin_of_idle.join()
        time.sleep(2)  # several heartbeats out of the group, no batch in flight
        assert cancels == ["batch"] and idle.cancelled is None
        twin_of_idle.close()
    finally:
        idle.close(leave=False)


def test_a_batch_of_a_member_found_out_of_the_group_before_it_started_does_not_run(
    admin: TopicAdmin, tmp_path: Path
) -> None:
    """A pause past the session timeout: the heartbeat after it finds the member gone
    while the thread plans its next batch (nothing in flight to cancel). That batch could
    never commit: it does not start (it ran to its commit before, 22 s in a campaign)."""
    admin.create("lines", 2)
    first = membership(admin, tmp_path, "p1", "T", extra=SHORT_POLL)
    first.join()
    try:
        member = first.member
        first.coordinator.leave_group("app", member.member_id or "", instance_id=member.instance_id)
        deadline = time.monotonic() + 20
        while not first.rejoin_pending and time.monotonic() < deadline:
            time.sleep(0.05)
        assert first.rejoin_pending  # a heartbeat found it out of the group
        with pytest.raises(GenerationFencedError, match="out of the group"):
            first.batch_started()
        assert first.poll() is not None  # the thread rejoins, its tasks new
        first.batch_started()  # and runs its batches again
        first.batch_finished()
    finally:
        first.close(leave=False)
