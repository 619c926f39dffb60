"""Kafka's ``KTableKTableForeignKeyJoinScenarioTest``: a foreign-key join whose serdes come
from the configuration's defaults, alone or mixed with serdes given to the DSL, and the
topics the join asks the user's serdes to serialize for.

The serde scenarios join ``A`` (``int -> "<fk>-<text>"``) with ``B`` by foreign key into a
table materialized as ``asdf``, then join ``A`` with that table by key; the defaults are
``default.key.serde=int`` and ``default.value.serde=string``.

The topics scenario wraps every serde given to the DSL in a recorder (Kafka's
``UniqueTopicSerdeScope``) that notes ``<topic>--key`` or ``<topic>--value`` for each
non-null value it serializes, and checks that a topic is always serialized for one type.
Kafka's set is the fact: the registration and response topics, the two source tables'
changelogs, the output topic, and the pseudo-topics ``<registration topic>-fk``, ``-pk``
and ``-vh`` under which the join serializes foreign keys, primary keys and hashed left
values inside its own formats (the subscription store and the subscriptions), whatever
topic or changelog those are written to. This project's join did not: it serialized them
for the registration topic's raw name, and primary keys inside the subscription store for
that store's changelog; it now uses Kafka's pseudo-topics (no design choice of the
project asks for other names).
"""

from __future__ import annotations

from typing import Any

from tests.conformance.conftest import I, S
from topology import Consumed, Materialized, Produced, StreamsBuilder

DEFAULTS = {"default.key.serde": "int", "default.value.serde": "string"}
APP = "ktable-ktable-joinOnForeignKey"
LEFT_TABLE, RIGHT_TABLE, OUTPUT = "left_table", "right_table", "output-topic"


def _fk(value: str) -> int:
    return int(value.split("-", maxsplit=1)[0])


def _pair(a: Any, b: Any) -> str:
    return f"({a},{b})"


def _process(
    drive: Any,
    *,
    consumed: Consumed | None = None,
    fk_materialized: Materialized | None = None,
    equi_materialized: Materialized | None = None,
    produced: Produced | None = None,
) -> None:
    """Kafka's topology (the options given where the scenario gives them) and its
    ``validateTopologyCanProcessData``: the final join's output is Kafka's."""
    b = StreamsBuilder()
    a_table = b.table("A", consumed) if consumed else b.table("A")
    b_table = b.table("B")
    fk_join = a_table.join(b_table, _fk, _pair, fk_materialized or Materialized.as_("asdf"))
    final = a_table.join(fk_join, _pair, *([equi_materialized] if equi_materialized else []))
    final.to_stream().to("output", *([produced] if produced else []))
    d = drive(b.build(), **DEFAULTS)
    d.create_input_topic("A", I, S).pipe_input(1, "999-alpha")
    d.create_input_topic("B", I, S).pipe_input(999, "beta")
    output = d.create_output_topic("output", I, S).read_key_values_to_map()
    assert output == {1: "(999-alpha,(999-alpha,beta))"}
    assert dict(d.get_key_value_store("asdf").all()) == {1: "(999-alpha,beta)"}


def test_should_work_with_default_serdes(drive: Any) -> None:
    """KTableKTableForeignKeyJoinScenarioTest.shouldWorkWithDefaultSerdes"""
    _process(drive)


def test_should_work_with_default_and_consumed_serdes(drive: Any) -> None:
    """KTableKTableForeignKeyJoinScenarioTest.shouldWorkWithDefaultAndConsumedSerdes"""
    _process(drive, consumed=Consumed.with_(I, S))


def test_should_work_with_default_and_join_result_serdes(drive: Any) -> None:
    """KTableKTableForeignKeyJoinScenarioTest.shouldWorkWithDefaultAndJoinResultSerdes"""
    materialized = Materialized.as_("asdf").with_key_serde(I).with_value_serde(S)
    _process(drive, fk_materialized=materialized)


def test_should_work_with_default_and_equi_join_result_serdes(drive: Any) -> None:
    """KTableKTableForeignKeyJoinScenarioTest.shouldWorkWithDefaultAndEquiJoinResultSerdes"""
    _process(drive, equi_materialized=Materialized.with_(I, S))


def test_should_work_with_default_and_produced_serdes(drive: Any) -> None:
    """KTableKTableForeignKeyJoinScenarioTest.shouldWorkWithDefaultAndProducedSerdes"""
    _process(drive, produced=Produced.with_(I, S))


class _SerdeScope:
    """Kafka's ``UniqueTopicSerdeScope``: serdes that note each topic and role they
    serialize a non-null value for (and deserialize for), one value type per topic."""

    def __init__(self) -> None:
        self.serialized: dict[str, type] = {}
        self.deserialized: set[str] = set()

    def decorate(self, serde: Any, *, is_key: bool) -> _RecordingSerde:
        """Return ``serde`` recording its calls as a key or a value serde."""
        return _RecordingSerde(self, serde, "--key" if is_key else "--value")


class _RecordingSerde:
    """A serde that records its topics in its scope, then delegates."""

    def __init__(self, scope: _SerdeScope, delegate: Any, role: str) -> None:
        self.scope, self.delegate, self.role = scope, delegate, role

    def serialize(self, topic: str, data: Any) -> bytes | None:
        """Record ``topic`` and its value type (always the same one), then serialize."""
        if data is not None:
            seen = self.scope.serialized.setdefault(topic + self.role, type(data))
            assert seen is type(data), f"{topic + self.role}: {type(data)} after {seen}"
        out: bytes | None = self.delegate.serialize(topic, data)
        return out

    def deserialize(self, topic: str, data: bytes | None) -> Any:
        """Record ``topic``, then deserialize."""
        if data is not None:
            self.scope.deserialized.add(topic + self.role)
        return self.delegate.deserialize(topic, data)


def test_should_use_expected_topics_with_serde(drive: Any) -> None:
    """KTableKTableForeignKeyJoinScenarioTest.shouldUseExpectedTopicsWithSerde (and what is
    deserialized: the source topics and topics serialized for, nothing else)"""
    scope = _SerdeScope()

    def consumed() -> Consumed:
        key, value = scope.decorate(I, is_key=True), scope.decorate(S, is_key=False)
        return Consumed.with_(key, value)

    b = StreamsBuilder()
    left = b.table(LEFT_TABLE, consumed())
    right = b.table(RIGHT_TABLE, consumed())
    joined = left.join(
        right,
        lambda value: int(value.split("|")[1]),
        _pair,
        Materialized.with_(None, scope.decorate(S, is_key=False)),
    )
    joined.to_stream().to(OUTPUT)
    d = drive(b.build(), **{"application.id": APP})
    d.create_input_topic(LEFT_TABLE, I, S).pipe_input(2, "lhsValue1|1")
    d.create_input_topic(RIGHT_TABLE, I, S).pipe_input(1, "rhsValue1")
    assert d.create_output_topic(OUTPUT, I, S).read_key_values_to_map() == {
        2: "(lhsValue1|1,rhsValue1)"
    }
    registration = f"{APP}-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-topic"
    response = f"{APP}-KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000014-topic"
    expected = {
        # Kafka's pseudo-topics
        f"{registration}-fk--key",
        f"{registration}-pk--key",
        f"{registration}-vh--value",
        # internal topics
        f"{registration}--key",
        f"{response}--key",
        f"{response}--value",
        f"{APP}-left_table-STATE-STORE-0000000000-changelog--key",
        f"{APP}-left_table-STATE-STORE-0000000000-changelog--value",
        f"{APP}-right_table-STATE-STORE-0000000003-changelog--key",
        f"{APP}-right_table-STATE-STORE-0000000003-changelog--value",
        # the output topic
        f"{OUTPUT}--key",
        f"{OUTPUT}--value",
    }
    assert set(scope.serialized) == expected
    sources = {f"{t}--{role}" for t in (LEFT_TABLE, RIGHT_TABLE) for role in ("key", "value")}
    assert sources <= scope.deserialized <= expected | sources
