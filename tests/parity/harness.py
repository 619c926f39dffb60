"""Parity harness: one topology, one input, run on the TopologyTestDriver and on Spark.

A :class:`Case` is a topology builder, its configuration, its input records (topic, key,
value, timestamp, headers, in order) and what to compare. :func:`run_on_driver` pipes the
input record by record; :func:`run_on_spark` produces the same records (one producer
flush, so every partition holds them in the case's order) and runs a ``StreamsApp``
under exactly_once_v2 with the case's ``max.poll.records`` until it is caught up. Both
give a :class:`Snapshot`:

- per output topic, per key, the sequence of ``(value, timestamp, headers)``;
- per logged state store, its final contents as the store's bytes layer holds them:
  key-value stores ``key -> value``; window stores ``(key, window start) -> value``;
  session stores ``(key, start, end) -> value`` (segment prefixes stripped, expired
  entries left out by the store's own rule). On the driver they are read from the live
  store; on Spark from the store's changelog (latest value per key) after the app
  stopped — the driver's own changelog is checked to give the same contents, so reading
  a changelog reads the store.

:func:`assert_same` raises ``AssertionError`` with a readable diff. The driver's run is
the reference: nothing is hard-coded.

Both runs disable record caches (``statestore.cache.max.bytes=0``): the driver commits after
every record, Spark after every batch, so with a cache Spark would rightly forward fewer
updates. Inputs use one partition per topic, so the per-partition order is the driver's.

A case that fails on Spark today carries ``xfail`` (strict) with the first difference or
the error: when a fix lands the test XPASSes, which fails the suite; delete the case's
``xfail`` then. ``test_harness.py`` runs every case's reference on the driver alone (its
``check``), outside the xfail, so an xfail never hides a broken reference.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from common.config import StreamsConfig
from common.serdes import Serdes
from runtime.app.app import StreamsApp
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from statestores.segments import NO_TIME, decode_time
from streams.testing import TopologyTestDriver
from topology import Topology

Headers = tuple[tuple[str, bytes | None], ...]
#: One output record of a key: (value, timestamp, headers).
OutRecord = tuple[bytes | None, int, Headers]
#: A store entry's key: the raw key, with window start (and end) for windowed stores.
StoreKey = tuple[bytes, ...] | tuple[bytes, int] | tuple[bytes, int, int] | bytes

APP_ID = "parity"
STR = Serdes.String()
LONG = Serdes.Long()

#: What both runs share: caching off (the driver commits after every record, so with a
#: cache Spark would legitimately emit fewer updates per batch) and explicit stores.
BASE_CONFIG: dict[str, Any] = {
    "application.id": APP_ID,
    "default.key.serde": "string",
    "default.value.serde": "string",
    "statestore.cache.max.bytes": 0,
    "default.dsl.store": "rocksDB",
}


@dataclass(frozen=True, slots=True)
class In:
    """An input record (serialized)."""

    topic: str
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: Headers = ()


def rec(
    topic: str,
    key: str | None,
    value: str | None,
    timestamp: int,
    headers: Iterable[tuple[str, bytes | None]] = (),
) -> In:
    """An input record with string key and value."""
    return In(
        topic,
        None if key is None else key.encode(),
        None if value is None else value.encode(),
        timestamp,
        tuple(headers),
    )


@dataclass(frozen=True)
class Snapshot:
    """What a run left: outputs per topic and key, and store contents."""

    outputs: dict[str, dict[bytes | None, list[OutRecord]]]
    stores: dict[str, dict[Any, bytes]]

    def count(self, topic: str) -> int:
        """How many records ``topic`` got."""
        return sum(len(v) for v in self.outputs[topic].values())

    def values(self, topic: str, decode: Callable[[bytes], Any] = bytes.decode) -> list[Any]:
        """The decoded values of ``topic`` (None kept), key after key."""
        return [
            None if v is None else decode(v)
            for records in self.outputs[topic].values()
            for v, _, _ in records
        ]


@dataclass(frozen=True)
class Case:
    """A parity case.

    Attributes:
        name: the test id.
        build: builds the topology (called once per run).
        inputs: the input records, in processing order. With several input topics in one
            task, order them by (timestamp, topic) as Kafka's partition group interleaves.
        outputs: the output topics compared (created before the Spark run).
        max_poll_records: between 1 and 5.
        config: configuration on top of :data:`BASE_CONFIG` (both runs).
        stores: the stores compared (None: every logged, non-global store).
        topics: further topics to create (partition count), e.g. unmatched pattern topics.
        check: asserts the driver's reference really exercises the operator.
        xfail: why the case fails on Spark today (a strict xfail), or None.
    """

    name: str
    build: Callable[[], Topology]
    inputs: Sequence[In]
    outputs: tuple[str, ...]
    max_poll_records: int
    config: Mapping[str, Any] = field(default_factory=dict)
    stores: tuple[str, ...] | None = None
    topics: Mapping[str, int] = field(default_factory=dict)
    check: Callable[[Snapshot], None] | None = None
    xfail: str | None = None

    def full_config(self) -> dict[str, Any]:
        """The configuration both runs use."""
        return {**BASE_CONFIG, **self.config}

    def param(self) -> Any:
        """This case as a pytest parameter (with its strict xfail mark)."""
        marks = [pytest.mark.xfail(strict=True, reason=self.xfail)] if self.xfail else []
        return pytest.param(self, id=self.name, marks=marks)


# -- stores ---------------------------------------------------------------------------------


def compared_stores(case: Case, topology: Topology) -> dict[str, str]:
    """Store name -> kind of every store compared."""
    logged = topology.changelog_topics(APP_ID)
    names = case.stores if case.stores is not None else sorted(logged)
    out = {}
    for name in names:
        assert name in logged, f"store {name!r} has no changelog: it cannot be compared"
        assert name not in topology.global_stores, f"{name!r} is a global store"
        out[name] = topology.stores[name].kind
    return out


def _entry_key(kind: str, raw: bytes) -> StoreKey:
    """Decode a store entry key: strip the segment prefix, split out window times."""
    if kind == "window":  # segment(8) key start(8) seq(4)
        return (raw[8:-12], decode_time(raw, len(raw) - 12), int.from_bytes(raw[-4:], "big"))
    if kind == "session":  # segment(8) key end(8) start(8)
        return (raw[8:-16], decode_time(raw, len(raw) - 8), decode_time(raw, len(raw) - 16))
    return raw


def _entry_time(kind: str, key: StoreKey) -> int:
    assert isinstance(key, tuple)
    return int(key[1]) if kind == "window" else int(key[2])  # type: ignore[misc]


def store_view(
    kind: str, entries: Iterable[tuple[bytes, bytes | None]], retention: int | None
) -> dict[Any, bytes]:
    """The live contents from entries in write order (latest per key; None deletes);
    window and session entries past ``retention`` behind the newest one are left out."""
    latest: dict[Any, bytes | None] = {}
    stream_time = NO_TIME
    for raw, value in entries:
        key = _entry_key(kind, raw)
        latest[key] = value
        if kind != "key_value":
            stream_time = max(stream_time, _entry_time(kind, key))
    live = {k: v for k, v in latest.items() if v is not None}
    if kind == "key_value" or retention is None or stream_time == NO_TIME:
        return live
    floor = stream_time - retention + 1
    return {k: v for k, v in live.items() if _entry_time(kind, k) >= floor}


def _retention(store: Any) -> int | None:
    return getattr(store, "retention_period", None)


# -- the driver -----------------------------------------------------------------------------


def run_on_driver(case: Case) -> Snapshot:
    """Pipe the case's input through the TopologyTestDriver; return what it left."""
    topology = case.build()
    stores = compared_stores(case, topology)
    changelogs = topology.changelog_topics(APP_ID)
    with TopologyTestDriver(topology, case.full_config(), initial_wall_clock_time_ms=0) as d:
        for r in case.inputs:
            d.pipe_raw(r.topic, r.key, r.value, r.timestamp, r.headers)
        outputs: dict[str, dict[bytes | None, list[OutRecord]]] = {}
        for topic in case.outputs:
            per: dict[bytes | None, list[OutRecord]] = {}
            for raw in d.output_queue(topic):
                per.setdefault(raw.key, []).append((raw.value, raw.timestamp, raw.headers))
            outputs[topic] = per
        contents: dict[str, dict[Any, bytes]] = {}
        for name, kind in stores.items():
            store = d.get_state_store(name)
            assert store is not None, name
            live = store_view(kind, store.wrapped.items(None, None), _retention(store))
            logged = [(r.key, r.value) for r in d.output_queue(changelogs[name])]
            from_log = store_view(kind, logged, _retention(store))  # type: ignore[arg-type]
            assert from_log == live, f"{name}: the driver's changelog does not give its store"
            contents[name] = live
    return Snapshot(outputs, contents)


# -- Spark ----------------------------------------------------------------------------------


def spark_config(case: Case, root: str, state_dir: str) -> dict[str, Any]:
    """The Spark run's configuration."""
    assert 1 <= case.max_poll_records <= 5
    return {
        **case.full_config(),
        "processing.guarantee": "exactly_once_v2",
        "max.poll.records": case.max_poll_records,
        "topics.root": root,
        "state.dir": state_dir,
        "commit.interval.ms": 20,
        "group.initial.rebalance.delay.ms": 0,  # one instance: no one to wait for
    }


def produce(case: Case, admin: TopicAdmin) -> None:
    """Create every topic of the case and produce its input in order (one flush)."""
    topics = {r.topic: 1 for r in case.inputs} | {t: 1 for t in case.outputs}
    for topic, partitions in {**topics, **case.topics}.items():
        admin.create(topic, partitions, if_not_exists=True)
    producer = Producer(admin)
    for r in case.inputs:
        producer.send(
            r.topic, r.key, r.value, timestamp=r.timestamp, headers=list(r.headers), partition=0
        )
    producer.flush()


def run_on_spark(case: Case, spark: Any, workdir: str) -> Snapshot:
    """Run the case on Spark until caught up, then read outputs and changelogs."""
    root = os.path.join(workdir, "storage")
    os.makedirs(root, exist_ok=True)
    admin = TopicAdmin(root)
    produce(case, admin)
    topology = case.build()
    stores = compared_stores(case, topology)
    config = spark_config(case, root, os.path.join(workdir, "state"))
    app = StreamsApp(topology, config, spark=spark)
    app.run_until_idle()
    reader = TopicReader(admin)
    outputs = {topic: _read_outputs(reader, topic) for topic in case.outputs}
    changelogs = topology.changelog_topics(APP_ID)
    retention = _retentions(topology, case, stores)
    contents = {
        name: store_view(kind, _read_log(reader, changelogs[name]), retention[name])
        for name, kind in stores.items()
    }
    return Snapshot(outputs, contents)


def _retentions(topology: Topology, case: Case, stores: Mapping[str, str]) -> dict[str, Any]:
    """Each compared store's retention, from a store built as the runtime builds it."""
    config = StreamsConfig.from_dict({**case.full_config(), "topics.root": "memory://x"})
    return {name: _retention(topology.stores[name].builder(config).build()) for name in stores}


def _rows(reader: TopicReader, topic: str) -> Iterable[dict[str, Any]]:
    for p in sorted(reader.end_offsets(topic)):
        yield from reader.read(topic, p, 0).to_pylist()


def _read_outputs(reader: TopicReader, topic: str) -> dict[bytes | None, list[OutRecord]]:
    per: dict[bytes | None, list[OutRecord]] = {}
    for row in _rows(reader, topic):
        headers = tuple((h["key"], h["value"]) for h in row["headers"] or ())
        per.setdefault(row["key"], []).append((row["value"], row["timestamp"], headers))
    return per


def _read_log(reader: TopicReader, topic: str) -> list[tuple[bytes, bytes | None]]:
    if not reader.admin.exists(topic):
        return []
    return [(row["key"], row["value"]) for row in _rows(reader, topic)]


# -- comparison -----------------------------------------------------------------------------


def _show(data: Any) -> str:
    if isinstance(data, bytes):
        try:
            text = data.decode()
        except UnicodeDecodeError:
            text = ""
        if text.isprintable() and (text or not data):
            return repr(text)
        if len(data) == 8:  # a long (counts) or a timestamp
            return f"int64:{int.from_bytes(data, 'big', signed=True)}"
        return data.hex()
    if isinstance(data, tuple):
        return "(" + ", ".join(_show(d) for d in data) + ")"
    if isinstance(data, list):
        return "[" + ", ".join(_show(d) for d in data) + "]"
    return repr(data)


def diff(got: Snapshot, expected: Snapshot) -> list[str]:
    """The differences of ``got`` (Spark) from ``expected`` (the driver), one line each."""
    lines: list[str] = []
    for topic, per in expected.outputs.items():
        spark = got.outputs.get(topic, {})
        for key in sorted(set(per) | set(spark), key=lambda k: b"" if k is None else k):
            want, have = per.get(key, []), spark.get(key, [])
            if want == have:
                continue
            at = next(
                (i for i, (a, b) in enumerate(zip(want, have, strict=False)) if a != b),
                min(len(want), len(have)),
            )
            lines.append(
                f"output {topic} key {_show(key)}: {len(want)} records on the driver, "
                f"{len(have)} on Spark; first difference at #{at}: "
                f"driver {_show(want[at]) if at < len(want) else '<none>'}, "
                f"spark {_show(have[at]) if at < len(have) else '<none>'}"
            )
    for name, contents in expected.stores.items():
        spark_store = got.stores.get(name, {})
        for key in sorted(set(contents) | set(spark_store), key=repr):
            want_v, have_v = contents.get(key), spark_store.get(key)
            if want_v != have_v:
                lines.append(
                    f"store {name} key {_show(key)}: driver {_show(want_v)}, spark {_show(have_v)}"
                )
    return lines


def assert_same(got: Snapshot, expected: Snapshot) -> None:
    """Raise AssertionError listing every difference of Spark's run from the driver's."""
    lines = diff(got, expected)
    if lines:
        shown = lines[:20] + ([f"... and {len(lines) - 20} more"] if len(lines) > 20 else [])
        raise AssertionError("Spark differs from the TopologyTestDriver:\n  " + "\n  ".join(shown))


def check_parity(case: Case, spark: Any, workdir: str) -> Snapshot:
    """Run ``case`` both ways; check the reference exercises the operator; compare."""
    expected = run_on_driver(case)
    assert any(expected.outputs.values()), f"{case.name}: the driver produced nothing"
    if case.check is not None:
        case.check(expected)
    got = run_on_spark(case, spark, workdir)
    assert_same(got, expected)
    return got
