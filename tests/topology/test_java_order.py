"""The Java orders Kafka's topology description depends on, reproduced."""

from __future__ import annotations

from topology.graph.java_order import TreeSet, hash_map_order, java_string_hash


def test_string_hash_is_javas() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == 0x80000000  # Integer.MIN_VALUE
    assert java_string_hash("\U0001f600") == (31 * 0xD83D + 0xDE00)  # two UTF-16 units


def test_hash_map_order_is_bucket_then_insertion_order() -> None:
    # "Aa" and "BB" share a hash (2112): one bucket, in insertion order either way
    assert hash_map_order(["BB", "Aa"]) == ["BB", "Aa"]
    assert hash_map_order(["Aa", "BB"]) == ["Aa", "BB"]
    assert hash_map_order(["c", "b", "a"]) == ["a", "b", "c"]  # buckets 97, 98, 99 & 15
    keys = [f"k{i}" for i in range(13)]  # 13 > 12: a table of 32
    assert sorted(hash_map_order(keys)) == sorted(keys)


def test_tree_set_keeps_the_place_an_element_got_when_inserted() -> None:
    weight = {"a": 1, "b": 1, "c": 1}

    def compare(x: str, y: str) -> int:
        if weight[x] != weight[y]:
            return weight[y] - weight[x]
        return (x > y) - (x < y)

    tree = TreeSet(compare)
    for item in ("b", "a"):
        tree.add(item)
    weight["b"] = 5  # heavier now, but already placed after "a"
    tree.add("c")
    assert list(tree) == ["a", "b", "c"]
    assert sorted(weight, key=lambda k: (-weight[k], k)) == ["b", "a", "c"]
    many = TreeSet(lambda x, y: (x > y) - (x < y))
    for item in "qwertyuiopasdfghjklzxcvbnm":
        many.add(item)
    assert "".join(many) == "abcdefghijklmnopqrstuvwxyz"
