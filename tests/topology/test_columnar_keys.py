"""Keys the columnar engine does not build record by record: a flat map's expanded keys,
made a list only when a node reads them, and a grouping by the value, whose keys are the
batch's values themselves. Both engines must give the same records and stores, with
empty expansions, null values and values other than strings."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest

from common.config import StreamsConfig
from common.serdes import Serdes
from tests.topology.test_columnar import (
    BASE,
    EOS,
    random_batches,
    run,
    run_combined,
    weighted_keys,
)
from topology import Grouped, Materialized, Produced, StreamsBuilder, TimeWindows, Topology
from topology.api.windowed_serdes import WindowedSerdes
from topology.engine.combine import combined_topics
from topology.processors.proc_stream import returns_second_argument

S, L, D = Serdes.String(), Serdes.Long(), Serdes.Double()


@pytest.fixture(autouse=True)
def engine() -> str:
    """This module sets each run's engine itself (not the suite's two runs)."""
    return "each run's own"


def by_word(key: Any, word: Any) -> Any:
    """The value as the key, written as a function."""
    return word


def _words_or_none(line: str) -> list[str]:
    return [] if "fig" in line else line.split()


def words_by_value(b: StreamsBuilder, materialized: Materialized) -> None:
    """Lines of which some expand to nothing, counted per word."""
    (
        b.stream("in")
        .flat_map_values(_words_or_none)
        .group_by(lambda k, w: w, Grouped.with_(S, S))
        .count(materialized)
        .to_stream()
        .to("out", Produced.with_(S, L))
    )


def null_words(b: StreamsBuilder, materialized: Materialized) -> None:
    """Null values, grouped by themselves: null keys, which the count drops."""
    (
        b.stream("in")
        .flat_map_values(lambda v: [None if w == "date" else w for w in v.split()])
        .group_by(by_word, Grouped.with_(S, S))
        .count(materialized)
        .to_stream()
        .to("out", Produced.with_(S, L))
    )


def word_lengths(b: StreamsBuilder, materialized: Materialized) -> None:
    """Integer values grouped by themselves, from a flat map given the key too."""
    (
        b.stream("in")
        .flat_map_values(lambda k, v: [len(w) for w in v.split()] if k else [], with_key=True)
        .group_by(lambda _k, n: n, Grouped.with_(L, L))
        .count(materialized)
        .to_stream()
        .to("out", Produced.with_(L, L))
    )


def mixed_numbers(b: StreamsBuilder, materialized: Materialized) -> None:
    """Integers and floats grouped by themselves (2 and 2.0 are one key as doubles)."""
    (
        b.stream("in")
        .flat_map_values(lambda v: [len(w) if len(w) % 3 else len(w) / 2 for w in v.split()])
        .group_by(lambda _k, n: n, Grouped.with_(D, D))
        .count(materialized)
        .to_stream()
        .to("out", Produced.with_(D, L))
    )


def rekeyed_stateless(b: StreamsBuilder, materialized: Materialized) -> None:
    """Keys selected as the values, then read beside them; a flat map's keys read below
    it; a key selector that returns its first argument (not the value)."""
    words = b.stream("in").flat_map_values(str.split)
    words.select_key(lambda k, w: w).map(lambda k, w: (f"{k}!", f"{k}/{w}")).to("out")
    words.filter(lambda k, w: k is not None).map_values(lambda k, w: f"{k}:{w}", with_key=True).to(
        "out-keys"
    )
    b.stream("other").select_key(lambda k, v: k).to("out-first")


def windowed_by_value(b: StreamsBuilder, materialized: Materialized) -> None:
    """Words, some lines none, counted per hopping window after a grouping by value."""
    serde = WindowedSerdes.time_windowed_serde_from(S, 100)
    (
        b.stream("in")
        .flat_map_values(_words_or_none)
        .group_by(by_word, Grouped.with_(S, S))
        .windowed_by(TimeWindows.of_size_and_grace(100, 250).advance_by(30))
        .count(materialized)
        .to_stream()
        .to("out", Produced.with_(serde, L))
    )


TOPOLOGIES: dict[str, Callable[[StreamsBuilder, Materialized], None]] = {
    "words_by_value": words_by_value,
    "null_words": null_words,
    "word_lengths": word_lengths,
    "mixed_numbers": mixed_numbers,
    "rekeyed_stateless": rekeyed_stateless,
}


@pytest.mark.parametrize("caching", [True, False], ids=["cache", "no-cache"])
@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_keys_taken_from_values_give_the_record_engines_outputs(
    name: str, caching: bool, seed: int
) -> None:
    def build() -> Topology:
        b = StreamsBuilder()
        mat = Materialized.as_("store")
        TOPOLOGIES[name](b, mat if caching else mat.with_caching_disabled())
        return b.build()

    config = {} if caching else {"statestore.cache.max.bytes": 0}
    combined = combined_topics(build(), StreamsConfig.from_dict({**BASE, **config}))
    batches = random_batches(seed, ["in", "other"])
    record = run(build(), batches, "record", config)
    for arrow in (False, True):
        columnar = run(build(), batches, "columnar", config, arrow=arrow)
        assert columnar[0].keys() == record[0].keys()
        for topic in record[0]:
            if topic in combined:  # a cached count's repartition records go combined
                assert weighted_keys(columnar[0][topic]) == weighted_keys(record[0][topic])
                continue
            assert columnar[0][topic] == record[0][topic], (topic, arrow)
        assert columnar[1] == record[1]
        assert any(columnar[0].values())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_windowed_count_by_value_combined_inside_batches_counts_as_record_by_record(
    seed: int,
) -> None:
    def build() -> Topology:
        b = StreamsBuilder()
        windowed_by_value(b, Materialized.as_("store"))
        return b.build()

    batches = random_batches(seed, ["in"], n=900, step=8, late_share=0.01)
    record = run(build(), batches, "record", EOS)
    got = run_combined(build, batches, EOS)
    repartition = next(t for t in record[0] if t.endswith("-repartition"))
    assert got[0]["out"] == record[0]["out"]
    assert got[1] == record[1]
    assert weighted_keys(got[0][repartition]) == weighted_keys(record[0][repartition])
    assert len(got[0][repartition]) < len(record[0][repartition])


def _generated(k: Any, v: Any) -> Any:
    yield v


def _star(*args: Any) -> Any:
    return args[1]


def _keyword(k: Any, *, v: Any = None) -> Any:
    return v


def _closure() -> Callable[[Any, Any], Any]:
    kept = "x"
    return lambda k, v: kept


def _nested() -> Callable[[Any, Any], Any]:
    return lambda k, v: v


class _Holder:
    def second(self, k: Any, v: Any) -> Any:  # (self, k, v): returns k
        return v


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (lambda k, v: v, True),
        (lambda _key, word: word, True),
        (by_word, True),
        (_nested(), True),
        (lambda k, v=1: v, True),
        (lambda k, v: k, False),
        (lambda k, v: v.upper(), False),
        (lambda k, v: v, True),
        (lambda k, v: None, False),
        (_generated, False),
        (_star, False),
        (_keyword, False),
        (_closure(), False),
        (_Holder().second, False),
        (functools.partial(by_word, 1), False),
        (max, False),
    ],
)
def test_a_key_selector_returning_the_value_is_recognised_by_its_instructions(
    fn: Any, expected: bool
) -> None:
    assert returns_second_argument(fn) is expected
