"""What Kafka's cogroup tests share (``CogroupedKStreamImplTest`` and its time, sliding and
session windowed siblings): the aggregators and initializer, the topologies their
``setup`` builds, the argument-check cases the windowed siblings repeat, piping records
through a cogroup's table, and reading the descriptions Kafka asserts.

The scenarios stay in the modules named after Kafka's test classes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from common.errors import TopologyError
from tests.conformance.conftest import S
from topology import (
    CogroupedKStream,
    Consumed,
    Grouped,
    KTable,
    Materialized,
    Named,
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    TimeWindows,
)

GOLDEN = Path(__file__).parent / "golden"

#: Every behavioural scenario runs with the record cache on (Kafka's test configuration)
#: and off.
CACHED = pytest.mark.parametrize("cached", [True, False], ids=["cached", "uncached"])


# -- aggregators and initializer (Kafka's test's and MockAggregator's) ----------------------


def string_aggregator(key: str, value: str, agg: str) -> str:
    """Kafka's ``STRING_AGGREGATOR``: append the value."""
    return agg + value


def string_sum_aggregator(key: str, value: str, agg: int) -> int:
    """Kafka's ``STRING_SUM_AGGREGATOR``: add a string value as an integer."""
    return agg + int(value)


def sum_aggregator(key: str, value: int, agg: int) -> int:
    """Kafka's ``SUM_AGGREGATOR``: add an integer value."""
    return agg + value


def adder(key: Any, value: Any, agg: Any) -> str:
    """``MockAggregator.TOSTRING_ADDER``: append ``+value``."""
    return f"{agg}+{value}"


def remover(key: Any, value: Any, agg: Any) -> str:
    """``MockAggregator.TOSTRING_REMOVER``: append ``-value``."""
    return f"{agg}-{value}"


def merger(key: Any, agg1: Any, agg2: Any) -> str:
    """The session merger of Kafka's session cogroup test: ``agg1+agg2``."""
    return f"{agg1}+{agg2}"


def init() -> str:
    """``MockInitializer.STRING_INIT``: ``"0"``."""
    return "0"


# -- topologies ------------------------------------------------------------------------------


def topic_cogrouped() -> CogroupedKStream[Any, Any]:
    """``topic`` (strings) grouped by key and cogrouped with ``TOSTRING_ADDER``, in a builder
    of its own (``cogrouped.builder``)."""
    b = StreamsBuilder()
    grouped = b.stream("topic", Consumed.with_(S, S)).group_by_key(Grouped.with_(S, S))
    return grouped.cogroup(adder)


class Setup:
    """The windowed tests' ``setup``: ``topic`` and ``topic2`` (strings) grouped by key and
    cogrouped, ``topic`` with ``TOSTRING_ADDER``, ``topic2`` with ``TOSTRING_REMOVER``; the
    cogroup windowed by ``windows``."""

    def __init__(self, windows: TimeWindows | SlidingWindows | SessionWindows) -> None:
        self.builder = StreamsBuilder()
        stream = self.builder.stream("topic", Consumed.with_(S, S))
        stream2 = self.builder.stream("topic2", Consumed.with_(S, S))
        self.grouped = stream.group_by_key(Grouped.with_(S, S))
        grouped2 = stream2.group_by_key(Grouped.with_(S, S))
        self.windowed: Any = (
            self.grouped.cogroup(adder).cogroup(grouped2, remover).windowed_by(windows)
        )


# -- argument checks of the windowed cogroups --------------------------------------------


def refused(
    windows: TimeWindows | SlidingWindows | SessionWindows, message: str, *args: Any, **options: Any
) -> None:
    """Assert that ``Setup(windows).windowed.aggregate(*args, **options)`` raises a
    TopologyError matching ``message``."""
    with pytest.raises(TopologyError, match=message):
        Setup(windows).windowed.aggregate(*args, **options)


#: The time and sliding windowed tests' ``shouldNotHaveNullInitializer...OnAggregate``:
#: (Kafka method, the other options).
NULL_INITIALIZER_CASES = [
    ("shouldNotHaveNullInitializerOnAggregate", {}),
    ("shouldNotHaveNullInitializerTwoOptionNamedOnAggregate", {"named": Named.as_("test")}),
    (
        "shouldNotHaveNullInitializerTwoOptionMaterializedOnAggregate",
        {"materialized": Materialized.as_("test")},
    ),
    (
        "shouldNotHaveNullInitializerThreeOptionOnAggregate",
        {"named": Named.as_("test"), "materialized": Materialized.as_("test")},
    ),
]

#: Their ``shouldNotHaveNull{Materialized,Named}...OnAggregate``: (Kafka method, options,
#: error).
INVALID_OPTION_CASES = [
    (
        "shouldNotHaveNullMaterializedOnTwoOptionAggregate",
        {"materialized": Named.as_("test")},
        "materialized must be a Materialized",
    ),
    ("shouldNotHaveNullNamedTwoOptionOnAggregate", {"named": 1}, "named must be a Named"),
    (
        "shouldNotHaveNullMaterializedOnAggregate",
        {"named": Named.as_("Test"), "materialized": "test"},
        "materialized must be a Materialized",
    ),
    (
        "shouldNotHaveNullNamedOnAggregate",
        {"named": Materialized.as_("test"), "materialized": Materialized.as_("test")},
        "named must be a Named",
    ),
]


# -- running and describing ------------------------------------------------------------------


def piped(
    drive: Any,
    table: KTable[Any, Any],
    inputs: list[tuple[str, str, Any, int]],
    cached: bool,
    value_serde: Any = S,
    *,
    key_serde: Any = S,
    **serdes: Any,
) -> list[tuple[Any, Any, int]]:
    """Send ``table``'s updates to ``output``, pipe ``(topic, key, value, timestamp)``
    records (values through ``serdes[topic]`` or strings); return the output's (key,
    value, timestamp), read through ``key_serde`` and ``value_serde``."""
    table.to_stream().to("output")
    config = {} if cached else {"statestore.cache.max.bytes": 0}
    d = drive(table.builder.build(), **config)
    topics: dict[str, Any] = {}
    for topic, key, value, ts in inputs:
        if topic not in topics:
            topics[topic] = d.create_input_topic(topic, S, serdes.get(topic, S))
        topics[topic].pipe_input(key, value, ts)
    out = d.create_output_topic("output", key_serde, value_serde).read_records_to_list()
    return [(r.key, r.value, r.timestamp) for r in out]


def unwindowed(rows: list[tuple[Any, Any, int]]) -> list[tuple[Any, Any, int]]:
    """``rows`` with each windowed key's plain key, as Kafka's assertions read them."""
    return [(key.key, value, ts) for key, value, ts in rows]


def golden(name: str) -> str:
    """Kafka's expected description, kept as ``golden/<name>.txt``."""
    return (GOLDEN / f"{name}.txt").read_text()


def named_foo(windows: TimeWindows | SlidingWindows | SessionWindows, *functions: Any) -> str:
    """The windowed tests' ``namedParamShouldSetName`` topology: ``topic_cogrouped()`` over
    ``windows``, aggregated with ``functions`` and ``Named.as_("foo")``; return its
    description."""
    cogrouped = topic_cogrouped()
    windowed: Any = cogrouped.windowed_by(windows)
    windowed.aggregate(*functions, named=Named.as_("foo"))
    return str(cogrouped.builder.build().describe())


def preserved_structure(
    windows: TimeWindows | SlidingWindows | SessionWindows, store: Any, *functions: Any
) -> str:
    """``TopologyTest``'s windowed cogroup count topology: ``input-topic`` grouped by key,
    cogrouped with ``(k, v, agg) -> v`` over ``windows``, aggregated with ``functions``
    and, unless ``store`` is None, ``Materialized.as_(store)``; return its description."""
    b = StreamsBuilder()
    cogrouped = b.stream("input-topic").group_by_key().cogroup(lambda k, v, agg: v)
    materialized = [] if store is None else [Materialized.as_(store)]
    cogrouped.windowed_by(windows).aggregate(*functions, *materialized)
    return str(b.build().describe())
