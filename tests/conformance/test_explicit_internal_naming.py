"""Kafka's KIP-1111 scenarios (``StreamsBuilderTest``, ``InternalTopologyBuilder``):
``ensure.explicit.internal.resource.naming``.

With the key true, a topology whose state stores, changelog topics or repartition topics
have generated names is refused: when ``StreamsBuilder(config)`` builds it (Kafka's
``StreamsBuilder(TopologyConfig)``), and when the driver or the app starts with the key in
its configuration. The error lists every such resource, one line per kind, as Kafka's;
with the key false, building only warns. Each parametrized case is one row of Kafka's
``@CsvSource``; a valid topology is also driven, under both engines, with the key set.
Not rewritten: ``joinKStreamVersionedKTableAndGracePeriodTest`` (versioned stores).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from common.errors import ConfigError, TopologyError
from common.serdes import Serdes
from runtime.app.app import StreamsApp
from tests.conformance.conftest import CONFIG, S
from topology import (
    BufferConfig,
    Grouped,
    Joined,
    JoinWindows,
    Materialized,
    Produced,
    Repartitioned,
    StreamJoined,
    StreamsBuilder,
    Suppressed,
    TimeWindows,
)

L = Serdes.Long()
NAMING = {"ensure.explicit.internal.resource.naming": "true"}
HOUR = timedelta(hours=1)

Recorder = Callable[[StreamsBuilder], None]
#: Kafka's ``@CsvSource`` rows: (repartition named, store named, logging, valid).
GROUPED_ROWS = [(True, False, True, False), (False, True, True, True), (True, True, True, True)]
GROUPED_ROWS.append((False, False, False, False))
JOIN_ROWS = [(True, False, True, False), (False, True, True, False), (True, True, True, True)]
JOIN_ROWS.append((False, False, False, False))


def _materialized(named: bool, logging: bool, value_serde: Any = S) -> Materialized:
    if named:
        return Materialized.as_("materialized-name").with_key_serde(S).with_value_serde(value_serde)
    mat = Materialized.with_(S, value_serde)
    return mat if logging else mat.with_logging_disabled()


def _repartition_named(option: Any, named: bool) -> Any:
    """``option`` (a Grouped, Joined, StreamJoined or Repartitioned) named
    ``repartition-name`` if ``named``."""
    return option.with_name("repartition-name") if named else option


def _strict(record: Recorder) -> StreamsBuilder:
    """A builder with the key set, ``record``'s topology recorded in it."""
    strict = StreamsBuilder(NAMING)
    record(strict)
    return strict


def _check(drive: Any, record: Recorder, valid: bool) -> None:
    """Build ``record``'s topology with the key set: refused unless ``valid``; build it
    without, then start a driver with the key: refused likewise, else it runs."""
    strict = _strict(record)
    lenient = StreamsBuilder()
    record(lenient)
    topology = lenient.build()
    if valid:
        strict.build()
        d = drive(topology, **NAMING)
        d.create_input_topic("input1", S, S).pipe_input("k", "v", 0)
        return
    with pytest.raises(TopologyError, match="^Invalid topology: Following") as built:
        strict.build()
    with pytest.raises(TopologyError) as started:
        drive(topology, **NAMING)
    assert str(started.value) == str(built.value)


@pytest.mark.parametrize(
    "group",
    [
        pytest.param(
            lambda stream, grouped: stream.group_by(lambda k, v: v, grouped),
            id="groupByWithAggregationTest",
        ),
        pytest.param(
            lambda stream, grouped: stream.select_key(lambda k, v: v).group_by_key(grouped),
            id="groupByKeyWithAggregationTest",
        ),
    ],
)
@pytest.mark.parametrize(("grouped_named", "materialized_named", "logging", "valid"), GROUPED_ROWS)
def test_group_by_with_aggregation(  # noqa: PLR0917 - the fixture, the grouping, the row
    drive: Any,
    group: Callable[[Any, Grouped], Any],
    grouped_named: bool,
    materialized_named: bool,
    logging: bool,
    valid: bool,
) -> None:
    """StreamsBuilderTest.groupByWithAggregationTest and groupByKeyWithAggregationTest:
    ``input1`` grouped by its value (``group_by``, or ``select_key`` then
    ``group_by_key``), counted."""

    def record(b: StreamsBuilder) -> None:
        grouped = _repartition_named(Grouped.with_(S, S), grouped_named)
        (
            group(b.stream("input1"), grouped)
            .count(_materialized(materialized_named, logging, L))
            .to_stream()
            .to("output", Produced.with_(S, L).with_name("sink"))
        )

    _check(drive, record, valid)


@pytest.mark.parametrize(("suppress_named", "valid"), [(True, True), (False, False)])
def test_aggregation_with_suppress(drive: Any, suppress_named: bool, valid: bool) -> None:
    """StreamsBuilderTest.aggregationWithSuppressTest"""

    def record(b: StreamsBuilder) -> None:
        suppressed = Suppressed.until_window_closes(BufferConfig.unbounded())
        suppressed = suppressed.with_name("suppressed-name") if suppress_named else suppressed
        (
            b.stream("input1")
            .group_by_key()
            .windowed_by(TimeWindows.of_size_with_no_grace(HOUR))
            .count(Materialized.as_("materialized-name"))
            .suppress(suppressed)
            .to_stream()
            .to("output", Produced.as_("sink"))
        )

    _check(drive, record, valid)


@pytest.mark.parametrize(
    ("repartition_named", "store_named", "logging", "valid"),
    JOIN_ROWS,
)
def test_join_kstream_kstream(
    drive: Any, repartition_named: bool, store_named: bool, logging: bool, valid: bool
) -> None:
    """StreamsBuilderTest.joinKStreamKStreamTest"""
    joined = _repartition_named(StreamJoined.with_(S, S, S), repartition_named)
    if store_named:
        joined = joined.with_store_name("store-name")
    if not (repartition_named or store_named or logging):
        joined = joined.with_logging_disabled()

    def record(b: StreamsBuilder) -> None:
        one, two = b.stream("input1"), b.stream("input2")
        one.select_key(lambda k, v: v).left_join(
            two.select_key(lambda k, v: v),
            lambda v1, v2: v1,
            JoinWindows.of_time_difference_without_grace(HOUR),
            joined,
        )

    _check(drive, record, valid)


@pytest.mark.parametrize(
    ("repartition_named", "materialized_named", "logging", "valid"),
    JOIN_ROWS,
)
def test_join_kstream_ktable(
    drive: Any, repartition_named: bool, materialized_named: bool, logging: bool, valid: bool
) -> None:
    """StreamsBuilderTest.joinKStreamKTableTest"""
    joined = _repartition_named(Joined.with_(S, S, S), repartition_named)

    def record(b: StreamsBuilder) -> None:
        table = b.table("input2", None, _materialized(materialized_named, logging))
        b.stream("input1").select_key(lambda k, v: v).join(table, lambda v1, v2: v1, joined)

    _check(drive, record, valid)


@pytest.mark.parametrize(("materialized_named", "valid"), [(False, False), (True, True)])
def test_join_kstream_global_ktable(drive: Any, materialized_named: bool, valid: bool) -> None:
    """StreamsBuilderTest.joinKStreamGlobalKTableTest"""

    def record(b: StreamsBuilder) -> None:
        mat = _materialized(True, True) if materialized_named else None
        table = b.global_table("input2", None, mat)
        b.stream("input1").select_key(lambda k, v: v).join(table, lambda k, v: k, lambda v1, v2: v1)

    _check(drive, record, valid)


@pytest.mark.parametrize(("repartition_named", "valid"), [(False, False), (True, True)])
def test_repartition(drive: Any, repartition_named: bool, valid: bool) -> None:
    """StreamsBuilderTest.repartitionTest"""
    repartitioned = _repartition_named(Repartitioned.with_(S, S), repartition_named)

    def record(b: StreamsBuilder) -> None:
        b.stream("input1").repartition(repartitioned).to("output")

    _check(drive, record, valid)


@pytest.mark.parametrize(
    ("repartition_named", "materialized_named", "logging", "valid"),
    JOIN_ROWS,
)
def test_cogroup(
    drive: Any, repartition_named: bool, materialized_named: bool, logging: bool, valid: bool
) -> None:
    """StreamsBuilderTest.coGroupTest"""
    grouped = _repartition_named(Grouped.with_(S, S), repartition_named)

    def record(b: StreamsBuilder) -> None:
        one = b.stream("input1").group_by(lambda k, v: v, grouped)
        two = b.stream("input2").group_by(lambda k, v: v)
        (
            one.cogroup(lambda k, v, agg: agg + v)
            .cogroup(two, lambda k, v, agg: agg + v)
            .aggregate(lambda: "", _materialized(materialized_named, logging))
            .to_stream()
            .to("output")
        )

    if repartition_named:
        _check(drive, record, valid)
        return
    # both grouped streams unnamed: both repartition topics would be named after the store
    # (Kafka's KAFKA-10659), refused as it is recorded here, when built in Kafka
    with pytest.raises(TopologyError, match="-repartition is already used"):
        _strict(record).build()


def _unnamed_count(b: StreamsBuilder, mat: Materialized | None = None) -> None:
    b.stream("input1").group_by(lambda k, v: v).count(mat).to_stream().to("output")


def test_error_lists_every_unnamed_resource_by_kind(drive: Any) -> None:
    """InternalTopologyBuilder (KIP-1111): one line per kind, every resource listed, in the
    order changelog topics, state stores, repartition topics."""
    b = StreamsBuilder(NAMING)
    _unnamed_count(b)
    b.stream("input2").select_key(lambda k, v: v).repartition().to("output2")
    with pytest.raises(TopologyError) as error:
        b.build()
    assert str(error.value).splitlines() == [
        "Invalid topology: Following changelog topic(s) has not been named: "
        "KSTREAM-AGGREGATE-STATE-STORE-0000000002-changelog",
        "Following state store(s) has not been named: KSTREAM-AGGREGATE-STATE-STORE-0000000002",
        "Following repartition topic(s) has not been named: "
        "KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition, "
        "KSTREAM-REPARTITION-0000000011-repartition",
    ]


def test_store_without_logging_has_no_changelog_line(drive: Any) -> None:
    """InternalTopologyBuilder (KIP-1111): a store without changelog is listed alone."""
    b = StreamsBuilder(NAMING)
    _unnamed_count(b, Materialized.with_(S, L).with_logging_disabled())
    with pytest.raises(TopologyError) as error:
        b.build()
    message = str(error.value)
    assert "changelog" not in message
    assert "state store(s) has not been named: KSTREAM-AGGREGATE-STATE-STORE-0000000002" in message


def test_unnamed_resources_only_warn_when_the_key_is_false(
    drive: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """InternalTopologyBuilder (KIP-1111): with the key false (the default), building and
    running a topology with generated names works; the build logs a warning naming them."""
    b = StreamsBuilder({"ensure.explicit.internal.resource.naming": False})
    _unnamed_count(b)
    with caplog.at_level(logging.WARNING):
        topology = b.build()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        "Explicit naming for internal resources is currently disabled" in m
        and "KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition" in m
        for m in warned
    )
    d = drive(topology)
    d.create_input_topic("input1", S, S).pipe_input("k", "v", 0)
    out = d.create_output_topic("output", S, L).read_key_values_to_list()
    assert out == [("v", 1)]


def test_app_refuses_to_start_with_unnamed_resources(drive: Any, tmp_path: Any) -> None:
    """StreamsConfig.ENSURE_EXPLICIT_INTERNAL_RESOURCE_NAMING_CONFIG: the application
    refuses to start (here, before Spark is touched) when a resource has a generated
    name."""
    b = StreamsBuilder()
    _unnamed_count(b)
    config = {**CONFIG, **NAMING, "topics.root": str(tmp_path)}
    with pytest.raises(TopologyError, match="^Invalid topology: Following changelog"):
        StreamsApp(b.build(), config)


@pytest.mark.parametrize("value", ["yes", "1", 1, ""])
def test_the_key_takes_true_or_false_only(drive: Any, value: object) -> None:
    """StreamsConfig (ConfigDef BOOLEAN): anything but true/false is refused, naming the
    key, the value and what is allowed."""
    with pytest.raises(ConfigError, match="ensure.explicit.internal.resource.naming: must be"):
        StreamsBuilder({"ensure.explicit.internal.resource.naming": value})
