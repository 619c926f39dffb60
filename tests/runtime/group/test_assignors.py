"""The partition and task assignors of consumer groups (runtime.group.assignors)."""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from common.errors import ConfigError
from runtime.group.assignors import (
    KNOWN_ASSIGNORS,
    Assignment,
    Assignor,
    CooperativeStickyAssignor,
    InvalidSubscriptionError,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    StreamsAssignor,
    Subscription,
    TopicPartition,
    assignor_for,
    task_sort_key,
)

CASES = 200
Result = dict[str, Assignment]


def tps(topic: str, *partitions: int) -> tuple[TopicPartition, ...]:
    return tuple((topic, p) for p in partitions)


def numbers(result: Result, member: str) -> list[int]:
    return [p for _, p in result[member].partitions]


def counts(result: Result) -> dict[str, int]:
    return {m: len(a.partitions) for m, a in result.items()}


def spread(values: Sequence[int]) -> int:
    return max(values) - min(values) if values else 0


def subscribed(ppt: Mapping[str, int], subs: Mapping[str, Subscription]) -> set[TopicPartition]:
    topics = {t for s in subs.values() for t in s.topics}
    return {(t, p) for t in topics for p in range(ppt.get(t, 0))}


def check_at_most_once_to_subscribers(
    ppt: Mapping[str, int], subs: Mapping[str, Subscription], result: Result
) -> list[TopicPartition]:
    """Assert the result's shape; return every assigned partition."""
    assert list(result) == sorted(subs)
    every = [tp for a in result.values() for tp in a.partitions]
    assert len(every) == len(set(every)), "a partition was assigned twice"
    for member, assignment in result.items():
        assert list(assignment.partitions) == sorted(assignment.partitions)
        for topic, partition in assignment.partitions:
            assert topic in subs[member].topics, f"{member} got {topic} it does not subscribe to"
            assert 0 <= partition < ppt[topic]
    return every


# --------------------------------------------------------------------------- random inputs


def random_partitions(rng: random.Random) -> dict[str, int]:
    return {f"t{i}": rng.randint(0, 9) for i in range(rng.randint(1, 4))}


def random_members(rng: random.Random, low: int = 1, high: int = 7) -> list[str]:
    return sorted(rng.sample([f"m{i:02d}" for i in range(30)], rng.randint(low, high)))


def random_subscriptions(
    rng: random.Random, ppt: Mapping[str, int], *, equal: bool, owned: bool
) -> dict[str, Subscription]:
    topics = [*ppt, "not-created"]
    subs: dict[str, Subscription] = {}
    for member in random_members(rng):
        mine = topics if equal else rng.sample(topics, rng.randint(1, len(topics)))
        claims: list[TopicPartition] = []
        if owned:  # anything: conflicts, unsubscribed topics, partitions that do not exist
            claims = [(rng.choice(topics), rng.randint(0, 10)) for _ in range(rng.randint(0, 8))]
        subs[member] = Subscription(tuple(mine), tuple(claims), rng.randint(-1, 3))
    return subs


def shuffled_dict(rng: random.Random, mapping: Mapping[str, Any]) -> dict[str, Any]:
    keys = list(mapping)
    rng.shuffle(keys)
    return {k: mapping[k] for k in keys}


# --------------------------------------------------------------------------- range


def test_range_gives_the_first_members_one_more_consecutive_partition() -> None:
    subs = {m: Subscription(("t",)) for m in ("c", "a", "b")}
    result = RangeAssignor().assign({"t": 7}, subs)
    assert {m: numbers(result, m) for m in result} == {
        "a": [0, 1, 2],
        "b": [3, 4],
        "c": [5, 6],
    }


def test_range_favours_the_same_members_on_every_topic() -> None:
    subs = {m: Subscription(("x", "y")) for m in ("a", "b", "c")}
    result = RangeAssignor().assign({"x": 7, "y": 7}, subs)
    assert counts(result) == {"a": 6, "b": 4, "c": 4}
    assert result["a"].partitions == (*tps("x", 0, 1, 2), *tps("y", 0, 1, 2))


def test_range_assigns_a_topic_only_to_its_subscribers_and_skips_missing_topics() -> None:
    subs = {
        "a": Subscription(("x", "later")),
        "b": Subscription(("x", "y")),
        "c": Subscription(("y",)),
    }
    result = RangeAssignor().assign({"x": 3, "y": 2, "z": 5}, subs)
    assert result["a"].partitions == tps("x", 0, 1)
    assert result["b"].partitions == (*tps("x", 2), *tps("y", 0))
    assert result["c"].partitions == tps("y", 1)


# --------------------------------------------------------------------------- roundrobin


def test_roundrobin_skips_members_not_subscribed_to_the_topic() -> None:
    # The example of Kafka's RoundRobinAssignor documentation.
    subs = {
        "C0": Subscription(("t0",)),
        "C1": Subscription(("t0", "t1")),
        "C2": Subscription(("t0", "t1", "t2")),
    }
    result = RoundRobinAssignor().assign({"t0": 1, "t1": 2, "t2": 3}, subs)
    assert result["C0"].partitions == tps("t0", 0)
    assert result["C1"].partitions == tps("t1", 0)
    assert result["C2"].partitions == (*tps("t1", 1), *tps("t2", 0, 1, 2))


def test_roundrobin_deals_partitions_in_turn() -> None:
    subs = {m: Subscription(("x", "y")) for m in ("a", "b", "c")}
    result = RoundRobinAssignor().assign({"x": 2, "y": 3}, subs)
    assert result["a"].partitions == (("x", 0), ("y", 1))
    assert result["b"].partitions == (("x", 1), ("y", 2))
    assert result["c"].partitions == (("y", 0),)


# --------------------------------------------------------------------------- sticky


def test_sticky_balances_6_4_0_to_4_3_3_keeping_the_most_owned() -> None:
    # The document's balancer stops at 4/4/2; the real sticky assignor reaches 4/3/3.
    subs = {
        "a": Subscription(("t",), tps("t", 0, 1, 2, 3, 4, 5), 5),
        "b": Subscription(("t",), tps("t", 6, 7, 8, 9), 5),
        "c": Subscription(("t",)),
    }
    result = StickyAssignor().assign({"t": 10}, subs)
    assert numbers(result, "a") == [0, 1, 2, 3]  # the largest owner keeps one more
    assert numbers(result, "b") == [6, 7, 8]
    assert numbers(result, "c") == [4, 5, 9]
    subs["a"], subs["b"] = Subscription(("t",), tps("t", 6, 7, 8, 9), 5), subs["a"]
    result = StickyAssignor().assign({"t": 10}, subs)
    assert numbers(result, "b") == [0, 1, 2, 3]
    assert numbers(result, "a") == [6, 7, 8]


def test_sticky_gives_a_new_member_owning_nothing_its_share() -> None:
    subs = {
        "a": Subscription(("t",), tps("t", *range(6)), 2),
        "new": Subscription(("t",)),
    }
    result = StickyAssignor().assign({"t": 6}, subs)
    assert numbers(result, "a") == [0, 1, 2]
    assert numbers(result, "new") == [3, 4, 5]


def test_sticky_gives_a_partition_claimed_twice_to_the_highest_generation() -> None:
    subs = {
        "a": Subscription(("t",), tps("t", 0), 2),
        "b": Subscription(("t",), tps("t", 0), 3),
    }
    result = StickyAssignor().assign({"t": 2}, subs)
    assert numbers(result, "b") == [0]
    assert numbers(result, "a") == [1]


def test_sticky_gives_a_claim_tie_to_the_lowest_member_id() -> None:
    subs = {
        "x": Subscription(("t",), tps("t", 1), 3),
        "a": Subscription(("t",), tps("t", 1), 3),
    }
    result = StickyAssignor().assign({"t": 2}, subs)
    assert numbers(result, "a") == [1]
    assert numbers(result, "x") == [0]


def test_sticky_ignores_claims_on_partitions_gone_or_unsubscribed() -> None:
    subs = {
        "a": Subscription(("t",), (*tps("t", 0, 1, 2, 7), ("old", 0)), 1),
        "b": Subscription(("t", "u"), tps("u", 0), 1),
        "c": Subscription(("t",), tps("u", 1), 1),  # c dropped topic u
    }
    result = StickyAssignor().assign({"t": 3, "u": 2}, subs)
    assert result["a"].partitions == tps("t", 0, 1)  # t-7 and old-0 do not exist
    assert result["b"].partitions == tps("u", 0, 1)  # u-1 is no longer c's
    assert result["c"].partitions == tps("t", 2)


def test_sticky_moves_partitions_along_a_chain_when_subscriptions_differ() -> None:
    # a can only hold x, c only y: balance needs a -> b on x and b -> c on y.
    subs = {
        "a": Subscription(("x",), tps("x", 0, 1, 2, 3), 1),
        "b": Subscription(("x", "y"), tps("y", 0, 1), 1),
        "c": Subscription(("y",)),
    }
    result = StickyAssignor().assign({"x": 4, "y": 2}, subs)
    assert result["a"].partitions == tps("x", 0, 1)
    assert result["b"].partitions == tps("x", 2, 3)
    assert result["c"].partitions == tps("y", 0, 1)


def min_sum_of_squares(ppt: Mapping[str, int], subs: Mapping[str, Subscription]) -> int:
    """Brute force: the least sum of squared counts over every valid assignment."""
    members = sorted(subs)
    partitions = sorted(subscribed(ppt, subs))
    choices = [[m for m in members if tp[0] in subs[m].topics] for tp in partitions]
    best = None
    for owners in itertools.product(*choices):
        load = dict.fromkeys(members, 0)
        for owner in owners:
            load[owner] += 1
        cost = sum(v * v for v in load.values())
        best = cost if best is None else min(best, cost)
    return best or 0


def test_sticky_is_as_balanced_as_unequal_subscriptions_allow() -> None:
    for seed in range(CASES):
        rng = random.Random(seed)
        ppt = {t: rng.randint(0, 3) for t in ("t0", "t1", "t2")}
        subs = {}
        for member in random_members(rng, 2, 3):
            topics = rng.sample(sorted(ppt), rng.randint(1, 3))
            owned = [(rng.choice(sorted(ppt)), rng.randint(0, 3)) for _ in range(rng.randint(0, 5))]
            subs[member] = Subscription(tuple(topics), tuple(owned), rng.randint(0, 2))
        result = StickyAssignor().assign(ppt, subs)
        assert len(check_at_most_once_to_subscribers(ppt, subs, result)) == len(
            subscribed(ppt, subs)
        )
        cost = sum(v * v for v in counts(result).values())
        assert cost == min_sum_of_squares(ppt, subs), f"seed {seed}: {counts(result)}"


def max_kept(owned_counts: Mapping[str, int], total: int) -> int:
    """Brute force: the most owned partitions any balanced assignment can keep."""
    members = sorted(owned_counts)
    quota, extra = divmod(total, len(members))
    best = 0
    for bigger in itertools.combinations(members, extra):
        caps = {m: quota + (m in bigger) for m in members}
        best = max(best, sum(min(owned_counts[m], caps[m]) for m in members))
    return best


def test_sticky_moves_the_minimum_when_a_member_joins_or_leaves() -> None:
    sticky = StickyAssignor()
    for seed in range(CASES):
        rng = random.Random(seed)
        ppt = random_partitions(rng)
        members = random_members(rng, 1, 6)
        topics = tuple(ppt)
        first = sticky.assign(ppt, {m: Subscription(topics) for m in members})
        # Perturb the balanced assignment: members leave, new ones join.
        leaving = set(rng.sample(members, rng.randint(0, len(members) - 1)))
        joining = [f"new{i}" for i in range(rng.randint(0 if leaving else 1, 3))]
        subs = {
            m: Subscription(topics, first[m].partitions, 1) for m in members if m not in leaving
        }
        subs.update({m: Subscription(topics) for m in joining})
        second = sticky.assign(ppt, subs)
        total = sum(ppt.values())
        assert len(check_at_most_once_to_subscribers(ppt, subs, second)) == total
        assert spread(list(counts(second).values())) <= 1
        moved = sum(
            len(set(first[m].partitions) - set(second[m].partitions)) for m in subs if m in first
        )
        owned = {m: len(first[m].partitions) if m in first else 0 for m in subs}
        assert moved == sum(owned.values()) - max_kept(owned, total), f"seed {seed}"


# --------------------------------------------------------------------------- properties


EAGER: list[Callable[[], Assignor]] = [RangeAssignor, RoundRobinAssignor, StickyAssignor]


@pytest.mark.parametrize("factory", EAGER, ids=lambda f: f.__name__)
def test_eager_assignors_assign_every_subscribed_partition_once_to_a_subscriber(
    factory: Callable[[], Assignor],
) -> None:
    assignor = factory()
    assert assignor.protocol == "eager"
    for seed in range(CASES):
        rng = random.Random(seed)
        ppt = random_partitions(rng)
        subs = random_subscriptions(rng, ppt, equal=seed % 2 == 0, owned=True)
        result = assignor.assign(ppt, subs)
        every = check_at_most_once_to_subscribers(ppt, subs, result)
        assert set(every) == subscribed(ppt, subs), f"seed {seed}"


@pytest.mark.parametrize("factory", [RoundRobinAssignor, StickyAssignor], ids=lambda f: f.__name__)
def test_equal_subscriptions_give_counts_within_one(factory: Callable[[], Assignor]) -> None:
    for seed in range(CASES):
        rng = random.Random(seed)
        ppt = random_partitions(rng)
        subs = random_subscriptions(rng, ppt, equal=True, owned=True)
        assert spread(list(counts(factory().assign(ppt, subs)).values())) <= 1, f"seed {seed}"


def test_cooperative_sticky_never_gives_a_partition_another_member_still_owns() -> None:
    assignor = CooperativeStickyAssignor()
    assert assignor.protocol == "cooperative"
    for seed in range(CASES):
        rng = random.Random(seed)
        ppt = random_partitions(rng)
        subs = random_subscriptions(rng, ppt, equal=seed % 2 == 0, owned=True)
        result = assignor.assign(ppt, subs)
        check_at_most_once_to_subscribers(ppt, subs, result)
        target = StickyAssignor().assign(ppt, subs)
        for member, assignment in result.items():
            assert set(assignment.partitions) <= set(target[member].partitions)
            for tp in target[member].partitions:
                others = [m for m, s in subs.items() if m != member and tp in s.owned]
                mine = tp in subs[member].owned
                assert (tp in assignment.partitions) == (mine or not others), f"seed {seed}"


def streams_tasks(rng: random.Random) -> tuple[dict[str, list[TopicPartition]], dict[str, int]]:
    """Random tasks over 1-3 subtopologies; the second reads two co-partitioned topics."""
    sources = [["a"], ["b1", "b2"], ["c"]][: rng.randint(1, 3)]
    tasks: dict[str, list[TopicPartition]] = {}
    ppt: dict[str, int] = {}
    for sub, topics in enumerate(sources):
        count = rng.randint(1, 12)
        for topic in topics:
            ppt[topic] = count
        for p in range(count):
            tasks[f"{sub}_{p}"] = [(topic, p) for topic in topics]
    if rng.random() < 0.3:
        del ppt[rng.choice(sorted(ppt))]  # a topic not created yet
    return tasks, ppt


def streams_subscriptions(
    rng: random.Random, tasks: Mapping[str, Sequence[TopicPartition]], *, owned: bool
) -> dict[str, Subscription]:
    topics = tuple(sorted({tp[0] for parts in tasks.values() for tp in parts}))
    processes = [f"p{i}" for i in range(rng.randint(1, 3))]
    subs = {}
    for member in random_members(rng):
        data: dict[str, Any] = {"process_id": rng.choice(processes)}
        if owned:
            data["owned_tasks"] = rng.sample(sorted(tasks), rng.randint(0, min(4, len(tasks))))
            data["local_tasks"] = {
                t: rng.randint(-1, 1000) for t in rng.sample(sorted(tasks), min(3, len(tasks)))
            }
        subs[member] = Subscription(topics, (), rng.randint(-1, 3), data)
    return subs


def live_tasks(tasks: Mapping[str, Sequence[TopicPartition]], ppt: Mapping[str, int]) -> set[str]:
    return {t for t, parts in tasks.items() if all(p < ppt.get(topic, 0) for topic, p in parts)}


def test_streams_assigns_whole_live_tasks_balanced_and_at_most_once() -> None:
    for seed in range(CASES):
        rng = random.Random(seed)
        tasks, ppt = streams_tasks(rng)
        subs = streams_subscriptions(rng, tasks, owned=seed % 2 == 1)
        result = StreamsAssignor(tasks).assign(ppt, subs)
        check_at_most_once_to_subscribers(ppt, subs, result)
        assigned = [t for a in result.values() for t in a.user_data["tasks"]]
        assert len(assigned) == len(set(assigned))
        for assignment in result.values():
            mine = assignment.user_data["tasks"]
            assert mine == sorted(mine, key=task_sort_key)
            assert set(assignment.partitions) == {tp for t in mine for tp in tasks[t]}
        if seed % 2 == 0:  # nobody owns anything: everything is assigned, balanced
            assert set(assigned) == live_tasks(tasks, ppt), f"seed {seed}"
            assert spread([len(a.user_data["tasks"]) for a in result.values()]) <= 1


ALL: list[Callable[[], Assignor]] = [
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    CooperativeStickyAssignor,
]


@pytest.mark.parametrize("factory", ALL, ids=lambda f: f.__name__)
def test_the_same_input_in_another_order_gives_the_same_output(
    factory: Callable[[], Assignor],
) -> None:
    for seed in range(CASES):
        rng = random.Random(seed)
        ppt = random_partitions(rng)
        subs = random_subscriptions(rng, ppt, equal=seed % 3 == 0, owned=True)
        reordered = {
            m: Subscription(tuple(rng.sample(s.topics, len(s.topics))), s.owned[::-1], s.generation)
            for m, s in shuffled_dict(rng, subs).items()
        }
        expected = list(factory().assign(ppt, subs).items())
        assert list(factory().assign(shuffled_dict(rng, ppt), reordered).items()) == expected


def test_streams_gives_the_same_output_for_the_same_input_in_another_order() -> None:
    for seed in range(CASES):
        rng = random.Random(seed)
        tasks, ppt = streams_tasks(rng)
        subs = streams_subscriptions(rng, tasks, owned=True)
        reordered = {}
        for member, s in shuffled_dict(rng, subs).items():
            data = dict(s.user_data)
            data["owned_tasks"] = data["owned_tasks"][::-1]
            data["local_tasks"] = shuffled_dict(rng, data["local_tasks"])
            reordered[member] = Subscription(s.topics[::-1], (), s.generation, data)
        expected = list(StreamsAssignor(tasks).assign(ppt, subs).items())
        actual = StreamsAssignor(shuffled_dict(rng, tasks)).assign(
            shuffled_dict(rng, ppt), reordered
        )
        assert list(actual.items()) == expected


# --------------------------------------------------------------------------- cooperative rounds


class Group:
    """Simulated members feeding each round's assignment back as what they own."""

    def __init__(self, assignor: Assignor, ppt: dict[str, int], topics: tuple[str, ...]) -> None:
        self.assignor = assignor
        self.ppt = ppt
        self.topics = topics
        self.generation = 0
        self.owned: dict[str, Assignment] = {}
        self.process: dict[str, str] = {}
        self.local: dict[str, dict[str, int]] = {}  # process -> task -> offset sum

    def join(self, member: str, process: str = "") -> None:
        self.owned[member] = Assignment(())
        self.process[member] = process or member

    def leave(self, member: str) -> None:
        del self.owned[member]  # a leaving member gives up everything first

    def subscription(self, member: str) -> Subscription:
        owned = self.owned[member]
        data: dict[str, Any] = {}
        if isinstance(self.assignor, StreamsAssignor):
            data = {
                "process_id": self.process[member],
                "owned_tasks": list(owned.user_data.get("tasks", [])),
                "local_tasks": dict(self.local.get(self.process[member], {})),
            }
        generation = self.generation if owned.partitions else -1
        return Subscription(self.topics, owned.partitions, generation, data)

    def rebalance(self) -> Result:
        subs = {m: self.subscription(m) for m in self.owned}
        result = self.assignor.assign(self.ppt, subs)
        check_at_most_once_to_subscribers(self.ppt, subs, result)
        # Until this round completes a member still owns what it owned before; after it,
        # what it was given. Both must be disjoint between members at every moment.
        held = {m: set(self.owned[m].partitions) | set(result[m].partitions) for m in result}
        for a, b in itertools.combinations(sorted(held), 2):
            assert not held[a] & held[b], f"{a} and {b} both own {held[a] & held[b]}"
        if isinstance(self.assignor, StreamsAssignor):
            tasks = {
                m: set(self.owned[m].user_data.get("tasks", [])) | set(result[m].user_data["tasks"])
                for m in result
            }
            for a, b in itertools.combinations(sorted(tasks), 2):
                assert not tasks[a] & tasks[b]
            for member, assignment in result.items():
                offsets = self.local.setdefault(self.process[member], {})
                for task in assignment.user_data["tasks"]:
                    offsets[task] = offsets.get(task, 0) + 10
        self.owned = dict(result)
        self.generation += 1
        return result


def run_rounds(
    rng: random.Random,
    group: Group,
    units: Callable[[Result], list[str]],
    expected: Callable[[], set[str]],
) -> None:
    """Apply random joins, leaves and partition growth; after each change, two rounds must
    reach a complete, balanced assignment that a third round leaves unchanged."""
    next_id = 0
    for _ in range(5):
        for _ in range(rng.randint(1, 2)):
            if group.owned and rng.random() < 0.4:
                group.leave(rng.choice(sorted(group.owned)))
            else:
                group.join(f"m{next_id:03d}", f"p{rng.randint(0, 2)}")
                next_id += 1
        if group.ppt and rng.random() < 0.2:
            group.ppt[rng.choice(sorted(group.ppt))] += 1  # unowned: assigned at once
        group.rebalance()
        settled = group.rebalance()
        assigned = units(settled)
        assert len(assigned) == len(set(assigned))
        assert set(assigned) == (expected() if group.owned else set())
        assert spread([len(units({m: a})) for m, a in settled.items()]) <= 1
        assert group.rebalance() == settled


def test_cooperative_sticky_rounds_never_share_a_partition_and_settle_in_two() -> None:
    for seed in range(CASES // 2):
        rng = random.Random(seed)
        ppt = random_partitions(rng)
        group = Group(CooperativeStickyAssignor(), ppt, tuple(ppt))

        def units(result: Result) -> list[str]:
            return [f"{t}-{p}" for a in result.values() for t, p in a.partitions]

        def expected(group: Group = group) -> set[str]:
            return {f"{t}-{p}" for t, n in group.ppt.items() for p in range(n)}

        run_rounds(rng, group, units, expected)


def squares(result: Result) -> int:
    return sum(n * n for n in counts(result).values())


def test_cooperative_sticky_rounds_settle_with_unequal_subscriptions() -> None:
    assignor = CooperativeStickyAssignor()
    for seed in range(300):
        rng = random.Random(seed)
        topics = [f"t{i}" for i in range(rng.randint(2, 6))]
        ppt = {t: rng.randint(0, 15) for t in topics}

        def pick(rng: random.Random = rng, topics: list[str] = topics) -> tuple[str, ...]:
            return tuple(rng.sample(topics, rng.randint(1, len(topics))))

        subs = {f"m{i:02d}": Subscription(pick()) for i in range(rng.randint(2, 10))}
        owned: Result = {m: Assignment(()) for m in subs}
        results = []
        for generation in range(5):
            if generation == 2:  # one member leaves, another joins
                gone = rng.choice(sorted(subs))
                del subs[gone], owned[gone]
                subs["new"], owned["new"] = Subscription(pick()), Assignment(())
            current = {
                m: Subscription(s.topics, owned[m].partitions, generation) for m, s in subs.items()
            }
            result = assignor.assign(ppt, current)
            for a, b in itertools.combinations(sorted(result), 2):
                held_a = set(owned[a].partitions) | set(result[a].partitions)
                assert not held_a & (set(owned[b].partitions) | set(result[b].partitions))
            owned = result
            results.append(result)
        follow_up = results[3]
        assert results[4] == follow_up, f"seed {seed}: not stable after the follow-up round"
        assert {tp for a in follow_up.values() for tp in a.partitions} == subscribed(ppt, subs)
        assert squares(follow_up) == squares(StickyAssignor().assign(ppt, subs)), f"seed {seed}"


def test_cooperative_sticky_keeps_a_partition_with_its_winning_claim() -> None:
    subs = {
        "a": Subscription(("t",), tps("t", 0), 3),
        "b": Subscription(("t",), tps("t", 0, 1), 2),  # a stale claim on t-0
    }
    result = CooperativeStickyAssignor().assign({"t": 2}, subs)
    assert numbers(result, "a") == [0]  # not revoked from a because b claims it too
    assert numbers(result, "b") == [1]


def test_cooperative_sticky_revokes_first_and_assigns_in_the_follow_up_round() -> None:
    group = Group(CooperativeStickyAssignor(), {"t": 4}, ("t",))
    group.join("a")
    assert numbers(group.rebalance(), "a") == [0, 1, 2, 3]
    group.join("b")
    first = group.rebalance()
    assert (numbers(first, "a"), numbers(first, "b")) == ([0, 1], [])  # 2, 3 revoked
    second = group.rebalance()
    assert (numbers(second, "a"), numbers(second, "b")) == ([0, 1], [2, 3])
    group.leave("a")
    assert numbers(group.rebalance(), "b") == [0, 1, 2, 3]  # nobody owns 0, 1: at once


def test_streams_rounds_never_share_a_task_and_settle_in_two() -> None:
    for seed in range(CASES // 2):
        rng = random.Random(seed)
        tasks, ppt = streams_tasks(rng)
        topics = tuple(sorted({tp[0] for parts in tasks.values() for tp in parts}))
        group = Group(StreamsAssignor(tasks), ppt, topics)

        def units(result: Result) -> list[str]:
            return [t for a in result.values() for t in a.user_data["tasks"]]

        def expected(group: Group = group, tasks: dict[str, Any] = tasks) -> set[str]:
            return live_tasks(tasks, group.ppt)

        run_rounds(rng, group, units, expected)


# --------------------------------------------------------------------------- streams


def streams_sub(process: str, owned: Sequence[str] = (), **local: int) -> Subscription:
    data = {"process_id": process, "owned_tasks": list(owned), "local_tasks": local}
    return Subscription(("in",), (), 1 if owned else -1, data)


def task_ids(result: Result, member: str) -> list[str]:
    return list(result[member].user_data["tasks"])


FOUR_TASKS = {f"0_{p}": [("in", p)] for p in range(4)}


def test_streams_gives_a_task_to_the_process_holding_its_local_state() -> None:
    subs = {
        "a": streams_sub("p1", **{"0_2": 10, "0_3": -1}),
        "b": streams_sub("p2", **{"0_0": 100, "0_1": 50}),
    }
    result = StreamsAssignor(FOUR_TASKS).assign({"in": 4}, subs)
    assert task_ids(result, "a") == ["0_2", "0_3"]
    assert task_ids(result, "b") == ["0_0", "0_1"]
    assert result["b"].partitions == (("in", 0), ("in", 1))


def test_streams_prefers_the_largest_offset_sum_within_balance() -> None:
    subs = {
        "a": streams_sub("p1", **{"0_0": 5, "0_1": 5, "0_2": 5, "0_3": 900}),
        "b": streams_sub("p2", **{"0_0": 7, "0_1": 7, "0_2": 7, "0_3": 800}),
    }
    result = StreamsAssignor(FOUR_TASKS).assign({"in": 4}, subs)
    assert "0_3" in task_ids(result, "a")  # a's offset sum is the larger
    assert len(task_ids(result, "a")) == len(task_ids(result, "b")) == 2
    assert sorted(task_ids(result, "b")) == ["0_0", "0_1"]


def test_streams_keeps_owned_tasks_over_local_state_elsewhere() -> None:
    subs = {
        "a": streams_sub("p1", ["0_0", "0_1"]),
        "b": streams_sub("p2", **{"0_0": 1000, "0_1": 1000}),
    }
    result = StreamsAssignor(FOUR_TASKS).assign({"in": 4}, subs)
    assert task_ids(result, "a") == ["0_0", "0_1"]
    assert task_ids(result, "b") == ["0_2", "0_3"]


def test_streams_balances_per_member_and_spreads_over_processes() -> None:
    subs = {"a1": streams_sub("p1"), "a2": streams_sub("p1"), "b": streams_sub("p2")}
    six = {f"0_{p}": [("in", p)] for p in range(6)}
    result = StreamsAssignor(six).assign({"in": 6}, subs)
    assert [len(task_ids(result, m)) for m in ("a1", "a2", "b")] == [2, 2, 2]
    two = {f"0_{p}": [("in", p)] for p in range(2)}
    result = StreamsAssignor(two).assign({"in": 2}, subs)
    assert len(task_ids(result, "b")) == 1  # one task per process, not both on p1


def test_streams_keeps_a_task_with_its_co_partitioned_inputs_together() -> None:
    tasks = {f"1_{p}": [("left", p), ("right", p)] for p in range(3)}
    subs = {m: Subscription(("left", "right"), (), -1, {"process_id": m}) for m in "ab"}
    result = StreamsAssignor(tasks).assign({"left": 3, "right": 3}, subs)
    for assignment in result.values():
        assert {p for _, p in assignment.partitions if _ == "left"} == {
            p for _, p in assignment.partitions if _ == "right"
        }
    assert sorted(t for a in result.values() for t in a.user_data["tasks"]) == sorted(tasks)


def test_streams_sorts_task_ids_numerically_and_skips_tasks_not_created() -> None:
    tasks = {
        "0_10": [("a", 10)],
        "0_9": [("a", 9)],
        "0_2": [("a", 2)],
        "1_0": [("b", 0)],
        "2_0": [("missing", 0)],
        "0_11": [("a", 11)],  # topic a has 11 partitions: 0..10
    }
    subs = {"m": Subscription(("a", "b", "missing"), (), -1, {"process_id": "p"})}
    result = StreamsAssignor(tasks).assign({"a": 11, "b": 1}, subs)
    assert task_ids(result, "m") == ["0_2", "0_9", "0_10", "1_0"]
    assert result["m"].partitions == (("a", 2), ("a", 9), ("a", 10), ("b", 0))


def test_streams_withholds_a_moving_task_until_its_owner_revoked_it() -> None:
    group = Group(StreamsAssignor(FOUR_TASKS), {"in": 4}, ("in",))
    group.join("a", "p1")
    assert task_ids(group.rebalance(), "a") == ["0_0", "0_1", "0_2", "0_3"]
    group.join("b", "p2")
    first = group.rebalance()
    assert (task_ids(first, "a"), task_ids(first, "b")) == (["0_0", "0_1"], [])
    second = group.rebalance()
    assert task_ids(second, "b") == ["0_2", "0_3"]


def test_streams_rejects_malformed_user_data_naming_the_member() -> None:
    assignor = StreamsAssignor(FOUR_TASKS)
    bad: list[dict[str, Any]] = [
        {"process_id": 3},
        {"owned_tasks": "0_1"},
        {"local_tasks": {"0_1": "12"}},
        {"local_tasks": ["0_1"]},
        {"local_tasks": {"0_1": -5}},
    ]
    for data in bad:
        with pytest.raises(InvalidSubscriptionError, match="member zed"):
            assignor.assign({"in": 4}, {"zed": Subscription(("in",), (), -1, data)})


def test_streams_rejects_tasks_sharing_a_partition_or_without_one() -> None:
    with pytest.raises(ConfigError, match="in-1 belongs to tasks 0_1 and 1_1"):
        StreamsAssignor({"0_1": [("in", 1)], "1_1": [("in", 1)]})
    with pytest.raises(ConfigError, match="no source partitions"):
        StreamsAssignor({"0_0": []})


# --------------------------------------------------------------------------- api


def test_assignor_for_returns_each_known_assignor() -> None:
    protocols = {}
    for name in KNOWN_ASSIGNORS:
        options = {"tasks": FOUR_TASKS} if name == "streams" else {}
        assignor = assignor_for(name, **options)
        assert assignor.name == name
        protocols[name] = assignor.protocol
    assert protocols == {
        "range": "eager",
        "roundrobin": "eager",
        "sticky": "eager",
        "cooperative-sticky": "cooperative",
        "streams": "cooperative",
    }


def test_assignor_for_rejects_unknown_names_and_options() -> None:
    with pytest.raises(ConfigError, match="known assignors: range, roundrobin, sticky"):
        assignor_for("uniform")
    with pytest.raises(ConfigError, match="takes no options"):
        assignor_for("range", tasks={})
    with pytest.raises(ConfigError, match="'tasks'"):
        assignor_for("streams")


def test_subscription_and_assignment_normalise_their_fields() -> None:
    sub = Subscription(("b", "a", "b"), [["t", 2], ("t", 0)])  # type: ignore[arg-type]
    assert sub.topics == ("a", "b")
    assert sub.owned == (("t", 0), ("t", 2))
    assert hash(sub) == hash(Subscription(("a", "b"), (("t", 0), ("t", 2))))
    assert Assignment((("t", 1), ("s", 0))).partitions == (("s", 0), ("t", 1))
    with pytest.raises(InvalidSubscriptionError, match="not the string"):
        Subscription("topic")  # type: ignore[arg-type]
    with pytest.raises(InvalidSubscriptionError, match="Subscription.owned"):
        Subscription(("t",), (("t",),))  # type: ignore[arg-type]


def test_assign_handles_no_members_and_no_partitions() -> None:
    for factory in ALL:
        assert factory().assign({"t": 3}, {}) == {}
        result = factory().assign({}, {"a": Subscription(("t",))})
        assert result == {"a": Assignment(())}


def test_sticky_and_streams_stay_fast_for_thousands_of_partitions() -> None:
    topics = tuple(f"t{i}" for i in range(4))
    ppt = dict.fromkeys(topics, 1500)
    members = [f"m{i:03d}" for i in range(60)]
    everything = tuple((t, p) for t in topics for p in range(1500))
    unequal = {m: Subscription(topics[: 1 + i % 4], (), 1) for i, m in enumerate(members)}
    unequal["m000"] = Subscription(topics, everything, 1)  # owns all 6000: most must move
    tasks = {f"{i}_{p}": [(t, p)] for i, t in enumerate(topics) for p in range(1500)}
    streams = {m: Subscription(topics, (), -1, {"process_id": m[:3]}) for m in members}
    start = time.perf_counter()
    result = StickyAssignor().assign(ppt, unequal)
    assert len(check_at_most_once_to_subscribers(ppt, unequal, result)) == 6000
    StreamsAssignor(tasks).assign(ppt, streams)
    assert time.perf_counter() - start < 20
