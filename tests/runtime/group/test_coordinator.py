"""The group coordinator: Kafka's classic group state machine over real CAS logs."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import runtime.group.coordinator as coordinator_module
from common.errors import ConfigError
from runtime.group.assignors import Assignment, Subscription, TopicPartition, assignor_for
from runtime.group.coordinator import GroupCoordinator
from runtime.group.errors import (
    FencedInstanceIdError,
    GroupError,
    GroupIdNotFoundError,
    GroupJoinTimeoutError,
    GroupNotEmptyError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    RebalanceInProgressError,
    TopologyMismatchError,
    UnknownMemberIdError,
)
from runtime.group.join import JoinGroupRequest
from runtime.group.member import GroupMember
from runtime.group.state import GroupMetadata, GroupState
from runtime.storage.topics import TopicAdmin

G = "app"
T0 = 1_000_000
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def coord(admin: TopicAdmin, clock: Clock) -> GroupCoordinator:
    admin.create("t", 6)
    return GroupCoordinator(admin, clock=clock, initial_rebalance_delay_ms=0)


def request(
    member_id: str | None = None,
    topics: tuple[str, ...] = ("t",),
    **kwargs: object,
) -> JoinGroupRequest:
    options: dict[str, object] = {"protocol": "range", "rebalance_timeout_ms": 10_000}
    options.update(kwargs)
    return JoinGroupRequest(Subscription(topics), member_id=member_id, **options)  # type: ignore[arg-type]


def sync(coord: GroupCoordinator) -> GroupMetadata:
    """Run the leader's SyncGroup of the current generation with the range assignor."""
    meta = coord.load(G).meta
    assert meta.state is COMPLETING and meta.leader is not None
    subs = {k: m.subscription for k, m in meta.members.items()}
    counts = coord.partitions_per_topic(t for s in subs.values() for t in s.topics)
    coord.sync_group(
        G, meta.leader, meta.generation, assignor_for("range").assign(counts, subs), counts
    )
    return coord.load(G).meta


def stable_pair(coord: GroupCoordinator) -> tuple[str, str]:
    """Bring two members to Stable generation 2 (a completes generation 1 alone first)."""
    a = coord.join_group(G, request())
    b = coord.join_group(G, request())
    coord.join_group(G, request(a))
    assert coord.load(G).meta.state is COMPLETING
    assert sync(coord).state is GroupState.STABLE
    return a, b


def documents(coord: GroupCoordinator) -> Iterator[tuple[int, GroupMetadata]]:
    """Yield the group's document of every version still in its log, oldest first."""
    log = coord.cas_log(G)
    for version in log.versions():
        text = Path(log.location, f"{version:020d}.json").read_text()
        yield version, GroupMetadata.from_json(json.loads(text))


def partitions(n: int, topic: str = "t") -> set[TopicPartition]:
    return {(topic, p) for p in range(n)}


# -- the state machine, one arrow at a time --------------------------------------------


def test_first_join_waits_for_the_initial_delay_extended_by_later_joins(
    admin: TopicAdmin, clock: Clock
) -> None:
    admin.create("t", 4)
    coord = GroupCoordinator(admin, clock=clock, initial_rebalance_delay_ms=3000)
    a = coord.join_group(G, request())
    meta = coord.load(G).meta
    assert (meta.state, meta.generation, meta.protocol_type) == (PREPARING, 0, "consumer")
    clock.advance(1000)
    b = coord.join_group(G, request())
    clock.advance(2500)  # 3500 ms after the first join: the delay was extended to 4000
    assert coord.load(G).meta.state is PREPARING
    clock.advance(500)
    meta = coord.load(G).meta
    assert (meta.state, meta.generation, meta.leader) == (COMPLETING, 1, min(a, b))
    assert meta.protocol == "range"
    meta = sync(coord)
    assert meta.state is GroupState.STABLE
    got = [set(m.assignment.partitions) for m in meta.members.values() if m.assignment]
    assert len(got) == 2 and got[0] | got[1] == partitions(4) and not got[0] & got[1]


def test_without_delay_a_lone_member_completes_at_once(coord: GroupCoordinator) -> None:
    a = coord.join_group(G, request())
    meta = coord.load(G).meta
    assert (meta.state, meta.generation, meta.leader) == (COMPLETING, 1, a)
    assert sync(coord).members[a].assignment == Assignment(tuple(sorted(partitions(6))))


def test_rebalance_timeout_removes_a_member_that_did_not_rejoin(
    coord: GroupCoordinator, clock: Clock
) -> None:
    a, b = stable_pair(coord)
    c = coord.join_group(G, request())
    assert coord.load(G).meta.state is PREPARING
    coord.join_group(G, request(a))
    clock.advance(5000)
    with pytest.raises(RebalanceInProgressError):
        coord.heartbeat(G, b, 2)  # alive, but never rejoins
    clock.advance(4999)
    assert coord.load(G).meta.state is PREPARING
    clock.advance(1)  # the rebalance timeout (10 s) is over
    meta = coord.load(G).meta
    assert (meta.state, meta.generation, meta.leader) == (COMPLETING, 3, a)
    assert set(meta.members) == {a, c}
    with pytest.raises(UnknownMemberIdError):
        coord.heartbeat(G, b, 2)


def test_rebalance_timeout_keeps_static_members_that_did_not_rejoin(
    coord: GroupCoordinator, clock: Clock
) -> None:
    s = coord.join_group(G, request(instance_id="s"))
    sync(coord)
    d = coord.join_group(G, request())
    clock.advance(10_000)
    meta = coord.load(G).meta
    assert (meta.state, meta.generation, meta.leader) == (COMPLETING, 2, d)
    assert set(meta.members) == {s, d}  # static: removed only by session timeout or leave
    meta = sync(coord)
    assert meta.members[s].generation == 1 and meta.members[s].assignment
    with pytest.raises(IllegalGenerationError):
        coord.heartbeat(G, s, 1, instance_id="s")
    assert coord.join_group(G, request(s, instance_id="s")) == s  # takes up generation 2
    meta = coord.load(G).meta
    assert (meta.state, meta.generation, meta.members[s].generation) == (GroupState.STABLE, 2, 2)


def test_preparing_rebalance_becomes_empty_when_everyone_leaves(
    admin: TopicAdmin, clock: Clock
) -> None:
    admin.create("t", 2)
    coord = GroupCoordinator(admin, clock=clock, initial_rebalance_delay_ms=3000)
    a = coord.join_group(G, request())
    assert coord.load(G).meta.state is PREPARING
    coord.leave_group(G, a)
    meta = coord.load(G).meta
    assert (meta.state, meta.generation, dict(meta.members)) == (GroupState.EMPTY, 1, {})


def test_stable_becomes_empty_when_the_last_member_leaves(coord: GroupCoordinator) -> None:
    a = coord.join_group(G, request())
    sync(coord)
    coord.leave_group(G, a)
    states = [d.state for _, d in documents(coord)]
    assert states == [COMPLETING, GroupState.STABLE, GroupState.EMPTY]
    assert coord.load(G).meta.generation == 2


def test_completing_rebalance_goes_back_to_preparing_on_join_and_leave(
    coord: GroupCoordinator,
) -> None:
    a = coord.join_group(G, request())
    assert coord.load(G).meta.state is COMPLETING
    b = coord.join_group(G, request())  # a join during CompletingRebalance
    assert coord.load(G).meta.state is PREPARING
    coord.join_group(G, request(a))
    assert coord.load(G).meta.state is COMPLETING
    coord.leave_group(G, b)  # a leave during CompletingRebalance
    meta = coord.load(G).meta
    assert (meta.state, set(meta.members)) == (PREPARING, {a})
    with pytest.raises(RebalanceInProgressError):
        coord.sync_group(G, a, meta.generation, {a: Assignment(())}, {"t": 6})


def test_a_leader_that_never_syncs_is_removed_after_the_rebalance_timeout(
    coord: GroupCoordinator, clock: Clock
) -> None:
    a, b = stable_pair(coord)
    coord.join_group(G, request(b, topics=("t", "u")))  # subscription change: rebalance
    coord.join_group(G, request(a))
    assert coord.load(G).meta.state is COMPLETING
    clock.advance(10_000)
    meta = coord.load(G).meta
    assert a not in meta.members and b in meta.members
    assert (meta.state, set(meta.members)) == (PREPARING, {b})  # b must rejoin


def test_stable_rebalances_on_subscription_change_only(coord: GroupCoordinator) -> None:
    a, b = stable_pair(coord)
    before = coord.cas_log(G).versions()[-1]
    coord.join_group(G, request(b))  # a follower, same metadata: nothing changes
    assert coord.cas_log(G).versions()[-1] == before
    assert coord.load(G).meta.state is GroupState.STABLE
    coord.join_group(G, request(b, topics=("t", "u")))
    meta = coord.load(G).meta
    assert meta.state is PREPARING and meta.members[b].joined and not meta.members[a].joined


def test_the_leader_rejoining_a_stable_group_forces_a_rebalance(coord: GroupCoordinator) -> None:
    a, _ = stable_pair(coord)
    coord.join_group(G, request(a))
    assert coord.load(G).meta.state is PREPARING


def test_delete_group_is_refused_while_members_are_present(coord: GroupCoordinator) -> None:
    a = coord.join_group(G, request())
    sync(coord)
    assert coord.list_groups() == [G]
    with pytest.raises(GroupNotEmptyError, match="Stable with 1 member"):
        coord.delete_group(G)
    coord.leave_group(G, a)
    assert coord.describe(G).state is GroupState.EMPTY
    coord.delete_group(G)
    assert coord.list_groups() == []
    described = coord.describe(G)
    assert (described.state, described.members) == (GroupState.DEAD, ())
    coord.delete_group(G)  # a group without a log (only offsets, or gone): no error
    with pytest.raises(GroupIdNotFoundError):
        coord.heartbeat(G, a, 2)
    coord.join_group(G, request())  # the group can be created again
    assert coord.load(G).meta.generation == 1 and coord.list_groups() == [G]


def test_describe_shows_members_and_applies_due_expiries(
    coord: GroupCoordinator, clock: Clock
) -> None:
    a = coord.join_group(G, request(client_id="c1", host="h1", session_timeout_ms=6000))
    sync(coord)
    clock.advance(4000)
    coord.heartbeat(G, a, 1)
    d = coord.describe(G)
    assert (d.group, d.state, d.generation, d.protocol_type, d.protocol, d.leader) == (
        G,
        GroupState.STABLE,
        1,
        "consumer",
        "range",
        a,
    )
    (m,) = d.members
    assert (m.member_id, m.client_id, m.host, m.last_heartbeat_ms) == (a, "c1", "h1", T0 + 4000)
    assert m.subscription.topics == ("t",) and len(m.assignment.partitions) == 6
    clock.advance(6001)  # nobody heartbeats: a tool looking at the group sees it gone
    d = coord.expire(G)
    assert (d.state, d.members, d.generation) == (GroupState.EMPTY, (), 2)


# -- heartbeats ----------------------------------------------------------------------------


def test_heartbeat_errors(coord: GroupCoordinator) -> None:
    a, b = stable_pair(coord)
    coord.heartbeat(G, b, 2)
    with pytest.raises(UnknownMemberIdError, match="no member 'nobody'"):
        coord.heartbeat(G, "nobody", 2)
    with pytest.raises(GroupIdNotFoundError):
        coord.heartbeat("other", a, 2)
    c = coord.join_group(G, request())
    with pytest.raises(RebalanceInProgressError):
        coord.heartbeat(G, a, 2)
    with pytest.raises(IllegalGenerationError):
        coord.heartbeat(G, a, 1)
    coord.join_group(G, request(a))
    coord.join_group(G, request(b))
    meta = coord.load(G).meta
    assert (meta.state, meta.generation) == (COMPLETING, 3)
    coord.heartbeat(G, c, 3)  # CompletingRebalance, current generation: fine (as Kafka)
    with pytest.raises(
        IllegalGenerationError, match="generation 2 but the group is at generation 3"
    ):
        coord.heartbeat(G, c, 2)


def test_heartbeat_sees_a_partition_count_change(
    coord: GroupCoordinator, admin: TopicAdmin
) -> None:
    member = GroupMember(
        coord, G, assignor=assignor_for("range"), subscription=lambda: Subscription(("t",))
    )
    assert set(member.join(timeout_ms=5000).partitions) == partitions(6)
    member.heartbeat()
    admin.alter_partitions("t", 8)
    with pytest.raises(RebalanceInProgressError, match="partition count"):
        member.heartbeat()
    assert coord.load(G).meta.state is PREPARING
    assert set(member.join(timeout_ms=5000).partitions) == partitions(8)
    assert member.generation == 2
    member.heartbeat()


def test_inconsistent_protocols_are_refused(coord: GroupCoordinator) -> None:
    coord.join_group(G, request())
    with pytest.raises(InconsistentGroupProtocolError, match="'range'"):
        coord.join_group(G, request(protocol="roundrobin"))
    with pytest.raises(InconsistentGroupProtocolError):
        coord.join_group(G, request(protocol_type="connect"))


def streams_join(process: str, topology: str, thread: int = 1) -> JoinGroupRequest:
    """A stream thread's JoinGroup: static member ``<process>-<thread>``, its topology's
    fingerprint in the subscription."""
    user_data = {"process_id": process, "topology": topology}
    return JoinGroupRequest(
        Subscription(("t",), user_data=user_data),
        protocol="streams",
        instance_id=f"{process}-{thread}",
        session_timeout_ms=6000,
        rebalance_timeout_ms=10_000,
    )


def test_an_instance_with_another_topology_is_refused(
    coord: GroupCoordinator, clock: Clock
) -> None:
    coord.join_group(G, streams_join("p1", "aaa", 1))
    coord.join_group(G, streams_join("p1", "aaa", 2))
    refusal = r"process p2 runs topology bbb, but the running instances p1 \(topology aaa\)"
    with pytest.raises(TopologyMismatchError, match=refusal):
        coord.join_group(G, streams_join("p2", "bbb"))
    assert sorted(m.instance_id or "" for m in coord.load(G).meta.members.values()) == [
        "p1-1",
        "p1-2",
    ]
    p2 = coord.join_group(G, streams_join("p2", "aaa"))  # the same topology joins
    # p1 restarted with a changed topology while p2 still runs the old one: refused, but
    # p1's own second thread (still holding its old slot) is no reason to refuse it.
    with pytest.raises(TopologyMismatchError, match=r"p2 \(topology aaa\)") as refused:
        coord.join_group(G, streams_join("p1", "bbb", 1))
    assert "p1 (topology" not in str(refused.value)
    assert isinstance(refused.value, InconsistentGroupProtocolError)
    coord.leave_group(G, p2, instance_id="p2-1")
    coord.join_group(G, streams_join("p1", "bbb", 1))
    coord.join_group(G, streams_join("p1", "bbb", 2))
    with pytest.raises(TopologyMismatchError):
        coord.join_group(G, streams_join("p3", "ccc"))
    clock.advance(6001)  # p1 stopped: its members expire, and a new topology may start
    coord.join_group(G, streams_join("p3", "ccc"))
    assert [m.instance_id for m in coord.load(G).meta.members.values()] == ["p3-1"]


def test_member_configuration_is_checked(coord: GroupCoordinator) -> None:
    sub: Callable[[], Subscription] = lambda: Subscription(("t",))  # noqa: E731
    with pytest.raises(ConfigError, match=r"heartbeat.interval.ms \(3000\) must be lower"):
        GroupMember(
            coord, G, assignor=assignor_for("range"), subscription=sub, session_timeout_ms=3000
        )
    with pytest.raises(ConfigError, match="group.id"):
        GroupMember(coord, "", assignor=assignor_for("range"), subscription=sub)
    with pytest.raises(ConfigError, match="initial.rebalance.delay"):
        GroupCoordinator(coord.admin, initial_rebalance_delay_ms=-1)


# -- members: leave, expiry, static membership --------------------------------------------


class Loop(threading.Thread):
    """A consumer's poll loop: join, heartbeat, rejoin on a rebalance; tracks ownership."""

    def __init__(
        self, member: GroupMember, owners: dict[TopicPartition, str], lock: threading.Lock
    ) -> None:
        super().__init__(daemon=True)
        self.member, self.owners, self.lock = member, owners, lock
        self.stop = threading.Event()
        self.label = member.instance_id or f"loop-{id(member)}"
        self.errors: list[BaseException] = []
        self.violations: list[str] = []

    def run(self) -> None:
        try:
            self._join()
            while not self.stop.wait(0.02):
                try:
                    self.member.heartbeat()
                except (RebalanceInProgressError, IllegalGenerationError, UnknownMemberIdError):
                    self._join()
        except BaseException as exc:
            self.errors.append(exc)

    def _join(self) -> None:
        assignment = self.member.join(timeout_ms=30_000, on_revoked=self._revoked)
        with self.lock:
            for tp in assignment.partitions:
                owner = self.owners.setdefault(tp, self.label)
                if owner != self.label:
                    self.violations.append(f"{tp} given to {self.label} while {owner} owns it")

    def _revoked(self, parts: tuple[TopicPartition, ...]) -> None:
        with self.lock:
            for tp in parts:
                if self.owners.get(tp) == self.label:
                    del self.owners[tp]

    def halt(self) -> None:
        self.stop.set()
        self.join(10)
        assert not self.is_alive() and not self.errors, self.errors


def start(members: list[GroupMember]) -> list[Loop]:
    owners: dict[TopicPartition, str] = {}
    lock = threading.Lock()
    loops = [Loop(m, owners, lock) for m in members]
    for loop in loops:
        loop.start()
    return loops


def converged(coord: GroupCoordinator, loops: list[Loop], n_partitions: int) -> bool:
    """Return True once the group is Stable and every loop holds its part of it."""
    for loop in loops:
        assert not loop.errors, loop.errors
    d = coord.describe(G)
    ids = {m.member_id for m in d.members}
    if d.state is not GroupState.STABLE or ids != {lp.member.member_id for lp in loops}:
        return False
    got = [lp.member.assignment for lp in loops]
    if any(lp.member.generation != d.generation for lp in loops) or None in got:
        return False
    owned = [set(a.partitions) for a in got if a is not None]
    assert sum(map(len, owned)) == len(set().union(*owned)), "a partition has two owners"
    return set().union(*owned) == partitions(n_partitions)


def wait_for(predicate: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def new_member(coord: GroupCoordinator, assignor: str = "range", **kwargs: object) -> GroupMember:
    return GroupMember(
        coord,
        G,
        assignor=assignor_for(assignor),
        subscription=lambda: Subscription(("t",)),
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("shared", [True, False], ids=["one-coordinator", "one-per-member"])
def test_members_joining_concurrently_end_stable_with_one_generation(
    root: str, admin: TopicAdmin, n: int, shared: bool
) -> None:
    admin.create("t", 7)
    one = GroupCoordinator(admin, initial_rebalance_delay_ms=200)
    coords = [
        one if shared else GroupCoordinator(TopicAdmin(root), initial_rebalance_delay_ms=200)
        for _ in range(n)
    ]
    loops = start([new_member(c) for c in coords])
    wait_for(lambda: converged(one, loops, 7))
    generations = {lp.member.generation for lp in loops}
    assert len(generations) == 1
    sizes = sorted(len(lp.member.assignment.partitions) for lp in loops if lp.member.assignment)
    assert sizes[-1] - sizes[0] <= 1
    for loop in loops:
        loop.halt()
        assert not loop.violations


def run_pair(coord: GroupCoordinator) -> tuple[GroupMember, GroupMember]:
    """Bring two members to a Stable generation in threads; return them, loops stopped."""
    a, b = new_member(coord, client_id="a"), new_member(coord, client_id="b")
    loops = start([a, b])
    wait_for(lambda: converged(coord, loops, 6))
    for loop in loops:
        loop.halt()
    return a, b


def test_leave_hands_everything_to_the_survivor(coord: GroupCoordinator) -> None:
    a, b = run_pair(coord)
    generation = a.generation
    b.leave()
    b.leave()  # idempotent
    with pytest.raises(RebalanceInProgressError):
        a.heartbeat()
    revoked: list[tuple[TopicPartition, ...]] = []
    assert set(a.join(timeout_ms=5000, on_revoked=revoked.append).partitions) == partitions(6)
    assert len(revoked) == 1 and len(revoked[0]) == 3  # eager: revoked before rejoining
    assert a.generation == generation + 1
    with pytest.raises(UnknownMemberIdError, match="call join"):
        b.heartbeat()


def test_session_expiry_hands_everything_to_the_survivor(
    coord: GroupCoordinator, clock: Clock
) -> None:
    a, b = run_pair(coord)
    clock.advance(30_000)
    a.heartbeat()
    clock.advance(15_000)
    a.heartbeat()  # b is 45 000 ms silent: not yet past its session timeout
    clock.advance(1)
    with pytest.raises(RebalanceInProgressError):
        a.heartbeat()
    assert set(a.join(timeout_ms=5000).partitions) == partitions(6)
    d = coord.describe(G)
    assert [m.member_id for m in d.members] == [a.member_id]
    with pytest.raises(UnknownMemberIdError):
        b.heartbeat()


def test_join_times_out_naming_the_group_and_its_state(coord: GroupCoordinator) -> None:
    a, b = run_pair(coord)
    coord.join_group(G, request())  # a third member: a and b must rejoin
    with pytest.raises(RebalanceInProgressError):
        a.heartbeat()
    with pytest.raises(
        GroupJoinTimeoutError,
        match=rf"join group 'app' within 0 ms: .*stuck in PreparingRebalance.*\['{b.member_id}'\]",
    ):
        a.join(timeout_ms=0)


def test_static_member_restart_keeps_assignment_and_generation(coord: GroupCoordinator) -> None:
    old = new_member(coord, instance_id="s1")
    other = new_member(coord, client_id="b")
    loops = start([old, other])
    wait_for(lambda: converged(coord, loops, 6))
    loops[0].halt()  # the static member's process dies without leaving
    generation, assignment = old.generation, old.assignment
    last = coord.cas_log(G).versions()[-1]
    restarted = new_member(coord, instance_id="s1")
    assert restarted.join(timeout_ms=5000) == assignment
    assert restarted.generation == generation and restarted.member_id != old.member_id
    assert restarted.member_id is not None and restarted.member_id.startswith("s1-")
    time.sleep(0.2)  # the other member keeps heartbeating: no rebalance reaches it
    new_docs = [(d.state, d.generation) for v, d in documents(coord) if v > last]
    assert new_docs == [(GroupState.STABLE, generation)]  # one version: the new member id
    assert other.generation == generation
    with pytest.raises(FencedInstanceIdError, match="zombie"):
        old.heartbeat()
    with pytest.raises(FencedInstanceIdError):
        old.join(timeout_ms=1000)
    loops[1].halt()
    assert not loops[1].violations


def test_static_member_with_new_topics_rebalances(coord: GroupCoordinator) -> None:
    coord.join_group(G, request(instance_id="s1"))
    sync(coord)
    new_id = coord.join_group(G, request(topics=("t", "u"), instance_id="s1"))
    meta = coord.load(G).meta
    assert list(meta.members) == [new_id] and meta.state is COMPLETING and meta.generation == 2


# -- offset-commit fencing (KIP-447) -----------------------------------------------------


def test_validate_generation(coord: GroupCoordinator, clock: Clock) -> None:
    coord.validate_generation(G, "", -1)  # a simple commit to a group without members
    with pytest.raises(GroupIdNotFoundError, match="does not exist"):
        coord.validate_generation(G, "m", 1)
    a, b = stable_pair(coord)
    coord.validate_generation(G, a, 2)
    with pytest.raises(UnknownMemberIdError):
        coord.validate_generation(G, "", -1)
    with pytest.raises(UnknownMemberIdError):
        coord.validate_generation(G, "zombie", 2)
    with pytest.raises(IllegalGenerationError):
        coord.validate_generation(G, a, 1)
    coord.join_group(G, request())  # PreparingRebalance: the current generation still commits
    coord.validate_generation(G, b, 2)
    coord.join_group(G, request(a))
    clock.advance(20_000)  # b never rejoins: the rebalance timeout (10 s) removes it
    with pytest.raises(UnknownMemberIdError):
        coord.validate_generation(G, b, 2)
    with pytest.raises(IllegalGenerationError):
        coord.validate_generation(G, a, 2)
    coord.validate_generation(G, a, 3)


def test_validate_generation_applies_a_due_session_expiry(
    coord: GroupCoordinator, clock: Clock
) -> None:
    a, b = stable_pair(coord)
    clock.advance(44_000)
    coord.heartbeat(G, a, 2)
    coord.validate_generation(G, b, 2)
    clock.advance(1001)  # b is past its session timeout, though nobody has looked yet
    with pytest.raises(UnknownMemberIdError):
        coord.validate_generation(G, b, 2)


# -- the cooperative protocol ------------------------------------------------------------


def test_cooperative_join_never_gives_a_partition_two_owners(
    coord: GroupCoordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(coordinator_module, "COMPACT_EVERY", 10**9)  # keep every version
    real = GroupCoordinator(coord.admin, initial_rebalance_delay_ms=0)
    first = start([new_member(real, "cooperative-sticky"), new_member(real, "cooperative-sticky")])
    wait_for(lambda: converged(real, first, 6))
    before = {
        lp.member.member_id: set(lp.member.assignment.partitions)
        for lp in first
        if lp.member.assignment
    }
    generation = real.describe(G).generation
    third = start([new_member(real, "cooperative-sticky")])
    loops = first + third
    wait_for(lambda: converged(real, loops, 6))
    after = real.describe(G)
    assert after.generation >= generation + 2  # the follow-up rebalance happened
    for loop in loops:
        loop.halt()
        assert not loop.violations, loop.violations
    docs = [d for _, d in documents(real)]
    assert [d.generation for d in docs] == sorted(d.generation for d in docs)
    for doc in docs:
        claims: dict[TopicPartition, str] = {}
        for member_id, m in doc.members.items():
            mine = set(m.assignment.partitions if m.assignment else ()) | set(m.subscription.owned)
            for tp in mine:
                owner = claims.setdefault(tp, member_id)
                assert owner == member_id, (doc.generation, doc.state, tp, owner, member_id)
    for described in after.members:  # sticky: the old members kept two partitions each
        if described.member_id in before:
            kept = set(described.assignment.partitions) & before[described.member_id]
            assert len(kept) == 2


def test_the_log_is_compacted(coord: GroupCoordinator) -> None:
    for _ in range(40):
        member_id = coord.join_group(G, request())
        coord.leave_group(G, member_id)
    versions = coord.cas_log(G).versions()
    assert versions[-1] == 79 and len(versions) < coordinator_module.COMPACT_EVERY + 8
    assert coord.load(G).meta.generation == 80


def test_an_assignor_giving_a_partition_twice_is_refused(coord: GroupCoordinator) -> None:
    a, b = stable_pair(coord)
    coord.join_group(G, request(a))
    coord.join_group(G, request(b))
    meta = coord.load(G).meta
    twice = Assignment((("t", 0),))
    with pytest.raises(GroupError, match="to both"):
        coord.sync_group(G, a, meta.generation, {a: twice, b: twice}, {"t": 6})
    with pytest.raises(GroupError, match="only the leader"):
        coord.sync_group(G, b, meta.generation, {a: Assignment(()), b: Assignment(())}, {"t": 6})
