"""The checks of the crash harness: a reference run, and what a crashed run must match.

:func:`compute_reference` pipes the input through the :class:`TopologyTestDriver` (the same
task engine, one record at a time, no crash); the other functions read what the real runs
left in the storage root and state directory and compare:

* outputs, per topic and key: the multiset of values (a surplus is a *duplicate*, a
  shortfall a *loss*), the partition each key landed in, and the order of each key's values
  within its partition. The order *across* keys of one partition is not compared: it
  depends on how batches interleave input partitions, in Kafka as here; nor is the order
  of a key whose records come from several input partitions (two reference runs with
  different interleavings disagree on it), and for a key whose very values depend on the
  interleaving only the number of records is compared;
* stores (:mod:`streams.crash.stores`): the changelog read back against the driver's store,
  and each local RocksDB store against its changelog;
* transactions left Ongoing or Prepare*, staged files left after the orphan sweep, and
  committed positions short of the end of a source topic.
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import pyarrow.fs as pafs
from deltalake import DeltaTable

from common.config import StreamsConfig
from runtime.storage.fs import storage_options
from runtime.storage.partitioner import partition_for_key
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.storage.vacuum import vacuum
from runtime.txn.coordinator import TransactionCoordinator
from runtime.txn.offsets import OffsetsStore
from runtime.txn.staging import STAGING_DIR
from statestores.bytes_layer import bottom
from streams.crash.inputs import InputRecord
from streams.testkit.driver import TopologyTestDriver
from topology.graph.graph import SinkSpec
from topology.graph.stores import resolve_serde
from topology.graph.topology import Topology

#: Where at_least_once stages its files (see runtime.thread.stream_thread).
ALOS_STAGING_DIR = "alos-staging"
_OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")
Key = bytes | None
#: ``show(topic, key, value) -> (key text, value text)``: records as the report prints them.
Show = Callable[[str, Key, bytes | None], tuple[str, str]]


@dataclass(frozen=True, slots=True)
class OutRecord:
    """An output record: key and value bytes, and the partition a sink chose (or None)."""

    key: Key
    value: bytes | None
    partition: int | None = None


@dataclass
class Reference:
    """What a crash-free run produces: output records per topic, store entries per store.

    ``unordered`` and ``unstable`` name, per output topic, the keys whose order (or even
    values) depend on how the input partitions interleave, and ``unstable_store_keys`` the
    store keys whose final value does; see :func:`compute_reference`.
    """

    outputs: dict[str, list[OutRecord]]
    stores: dict[str, dict[bytes, bytes]]
    store_kinds: dict[str, str]
    unordered: dict[str, set[Key]] = field(default_factory=dict)
    unstable: dict[str, set[Key]] = field(default_factory=dict)
    unstable_store_keys: dict[str, set[bytes]] = field(default_factory=dict)


def output_topics(topology: Topology, application_id: str) -> list[str]:
    """Return the topics the topology's sinks write that are not internal."""
    found = {
        topology.topic_name(spec.topic, application_id, internal=False)
        for spec in topology.nodes.values()
        if isinstance(spec, SinkSpec) and spec.topic is not None and not spec.internal
    }
    return sorted(found)


def compute_reference(
    topology: Topology,
    config: StreamsConfig,
    records: Sequence[InputRecord],
    partitions: Mapping[str, int],
    input_partitions: Mapping[str, int],
) -> Reference:
    """Pipe ``records`` through the test driver twice: the input partitions merged as
    Kafka's partition group picks (the partition whose next record has the smallest
    timestamp, ties in input order), and partition by partition. Both keep the order of
    every input partition (the order the records were produced in, late records included),
    so both are runs the real application could make; where they differ for a key, its
    order (or its values) depends on the interleaving, and only what does not is compared
    strictly.

    Args:
        partitions: partition counts of the output topics (for stream partitioners).
        input_partitions: partition counts of the input topics.
    """
    queues: dict[tuple[str, int], list[InputRecord]] = {}
    for r in records:
        queues.setdefault((r.topic, _input_partition(r, input_partitions)), []).append(r)
    by_time = _merged(list(queues.values()))
    by_partition = [r for _, queue in sorted(queues.items()) for r in queue]
    first = _drive(topology, config, by_time, partitions)
    second = _drive(topology, config, by_partition, partitions)
    kinds = {name: topology.stores[name].kind for name in first.stores}
    ref = Reference(first.outputs, first.stores, kinds)
    for topic, out in first.outputs.items():
        a, b = _by_key(out), _by_key(second.outputs[topic])
        ref.unstable[topic] = {k for k in a.keys() | b.keys() if _counts(a, k) != _counts(b, k)}
        ref.unordered[topic] = {k for k in a.keys() & b.keys() if a[k] != b[k]}
    for name, entries in first.stores.items():
        other = second.stores.get(name, {})
        ref.unstable_store_keys[name] = {
            k for k in entries.keys() | other.keys() if entries.get(k) != other.get(k)
        }
    return ref


def _merged(queues: list[list[InputRecord]]) -> list[InputRecord]:
    """Merge the queues, each kept in order, taking next the queue whose head has the
    smallest timestamp (ties: the earlier queue)."""
    heads = [(q[0].timestamp, i, 0) for i, q in enumerate(queues) if q]
    heapq.heapify(heads)
    out = []
    while heads:
        _, i, at = heapq.heappop(heads)
        out.append(queues[i][at])
        if at + 1 < len(queues[i]):
            heapq.heappush(heads, (queues[i][at + 1].timestamp, i, at + 1))
    return out


def _drive(
    topology: Topology,
    config: StreamsConfig,
    records: Sequence[InputRecord],
    partitions: Mapping[str, int],
) -> Reference:
    outputs = output_topics(topology, config.application_id)
    changelogs = topology.changelog_topics(config.application_id)
    with TopologyTestDriver(topology, config, partitions=partitions) as driver:
        for r in records:
            key, value, headers = r.raw()
            driver.pipe_raw(r.topic, key, value, r.timestamp, headers)
        out = {
            topic: [OutRecord(x.key, x.value, x.partition) for x in driver.output_queue(topic)]
            for topic in outputs
        }
        all_stores = driver.get_all_state_stores()
        stores = {
            name: dict(bottom(all_stores[name]).items(None, None))
            for name in changelogs
            if name in all_stores
        }
    return Reference(out, stores, {})


def _input_partition(record: InputRecord, counts: Mapping[str, int]) -> int:
    key = record.raw()[0]
    return -1 if key is None else partition_for_key(key, counts.get(record.topic, 1))


def _by_key(records: Sequence[OutRecord]) -> dict[Key, list[bytes | None]]:
    out: dict[Key, list[bytes | None]] = {}
    for r in records:
        out.setdefault(r.key, []).append(r.value)
    return out


def _counts(by_key: Mapping[Key, list[bytes | None]], key: Key) -> Counter[bytes | None]:
    return Counter(by_key.get(key, []))


# -- outputs ----------------------------------------------------------------------------


@dataclass
class OutputCheck:
    """How the output topics compare with the reference."""

    records_expected: int = 0
    records_out: int = 0
    duplicates: int = 0
    losses: int = 0
    misplaced: int = 0
    reordered: int = 0
    unordered_keys: int = 0
    unstable_keys: int = 0
    diff: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every output equals the reference."""
        return not (self.duplicates or self.losses or self.misplaced or self.reordered)


def read_topic(reader: TopicReader, topic: str) -> dict[int, list[tuple[Key, bytes | None]]]:
    """Return every committed ``(key, value)`` of ``topic`` per partition, in offset order."""
    out: dict[int, list[tuple[Key, bytes | None]]] = {}
    begin = reader.beginning_offsets(topic)
    for p in sorted(reader.end_offsets(topic)):
        table = reader.read(topic, p, begin.get(p, 0))
        keys, values = table.column("key").to_pylist(), table.column("value").to_pylist()
        out[p] = list(zip(keys, values, strict=True))
    return out


def compare_outputs(
    expected: Mapping[str, Sequence[OutRecord]],
    actual: Mapping[str, Mapping[int, Sequence[tuple[Key, bytes | None]]]],
    partitions: Mapping[str, int],
    show: Show,
    *,
    unordered: Mapping[str, set[Key]] | None = None,
    unstable: Mapping[str, set[Key]] | None = None,
    max_diff: int = 10,
) -> OutputCheck:
    """Compare each output topic with the reference (see the module docstring).

    Args:
        unordered: per topic, keys whose order is not compared (it depends on batching).
        unstable: per topic, keys whose values depend on batching: only their number of
            records is compared.
    """
    check = OutputCheck()
    for topic in sorted(expected):
        loose = (unordered or {}).get(topic, set()), (unstable or {}).get(topic, set())
        check.unordered_keys += len(loose[0] - loose[1])
        check.unstable_keys += len(loose[1])
        _compare_topic(
            check,
            topic,
            loose=loose,
            expected=expected[topic],
            actual=actual.get(topic, {}),
            num_partitions=partitions[topic],
            show=show,
            max_diff=max_diff,
        )
    return check


def _compare_topic(
    check: OutputCheck,
    topic: str,
    *,
    loose: tuple[set[Key], set[Key]],
    expected: Sequence[OutRecord],
    actual: Mapping[int, Sequence[tuple[Key, bytes | None]]],
    num_partitions: int,
    show: Show,
    max_diff: int,
) -> None:
    exp: dict[Key, list[bytes | None]] = {}
    home: dict[Key, int | None] = {}
    for r in expected:
        exp.setdefault(r.key, []).append(r.value)
        home.setdefault(r.key, _home(r, num_partitions))
    got: dict[Key, dict[int, list[bytes | None]]] = {}
    for p, records in actual.items():
        for key, value in records:
            got.setdefault(key, {}).setdefault(p, []).append(value)
    check.records_expected += len(expected)
    check.records_out += sum(len(v) for v in actual.values())
    for key in sorted(set(exp) | set(got), key=lambda k: (k is not None, k or b"")):
        want, by_part = exp.get(key, []), got.get(key, {})
        have = [v for p in sorted(by_part) for v in by_part[p]]
        if key in loose[1]:  # values depend on batching: count records only
            surplus, missing = max(0, len(have) - len(want)), max(0, len(want) - len(have))
        else:
            surplus = (Counter(have) - Counter(want)).total()
            missing = (Counter(want) - Counter(have)).total()
        check.duplicates += surplus
        check.losses += missing
        problem = "duplicates/losses" if surplus or missing else ""
        if not problem and key is not None and key not in loose[1]:
            p_home = home.get(key)
            stray = sum(len(v) for p, v in by_part.items() if p_home is not None and p != p_home)
            check.misplaced += stray
            if stray:
                problem = f"records outside partition {p_home}"
            elif by_part and key not in loose[0] and next(iter(by_part.values())) != want:
                check.reordered += 1
                problem = "order differs"
        if problem and len(check.diff) < max_diff:
            check.diff.append(
                _diff_line(topic, key, want=want, have=have, problem=problem, show=show)
            )


def _home(record: OutRecord, num_partitions: int) -> int | None:
    if record.partition is not None:
        return record.partition
    return None if record.key is None else partition_for_key(record.key, num_partitions)


def _diff_line(
    topic: str,
    key: Key,
    *,
    want: list[bytes | None],
    have: list[bytes | None],
    problem: str,
    show: Show,
) -> str:
    """One line of the diff, from just before the first position where the values part."""
    first = next(
        (i for i, (a, b) in enumerate(zip(want, have, strict=False)) if a != b),
        min(len(want), len(have)),
    )
    start = max(0, first - 2)

    def values(vs: list[bytes | None]) -> str:
        shown = [show(topic, key, v)[1] for v in vs[start : start + 8]]
        more = ", ..." if len(vs) > start + 8 else ""
        return "[" + ("..., " if start else "") + ", ".join(shown) + more + f"] ({len(vs)})"

    at = f" from #{start}" if start else ""
    return (
        f"{topic} key {show(topic, key, None)[0]}: {problem}; expected{at} {values(want)} "
        f"got {values(have)}"
    )


def record_formatter(topology: Topology, config: StreamsConfig) -> Show:
    """Return ``show(topic, key, value) -> (key text, value text)`` with the sinks' serdes (else
    the default serdes; undecodable bytes are shown as bytes)."""
    serdes: dict[str, tuple[Any, Any]] = {}
    for spec in topology.nodes.values():
        if isinstance(spec, SinkSpec) and spec.topic is not None and not spec.internal:
            serdes[spec.topic] = (
                resolve_serde(spec.key_serde, config.default_key_serde),
                resolve_serde(spec.value_serde, config.default_value_serde),
            )

    def decode(serde: Any, topic: str, data: bytes | None) -> str:
        if data is None:
            return "null"
        try:
            return repr(serde.deserialize(topic, data))
        except Exception:
            return repr(data)

    def show(topic: str, key: Key, value: bytes | None) -> tuple[str, str]:
        ks, vs = serdes.get(topic, (None, None))
        return decode(ks, topic, key), decode(vs, topic, value)

    return show


# -- transactions, staging, offsets -----------------------------------------------------


def open_transactions(admin: TopicAdmin) -> list[str]:
    """Return ``"<id>: <state>"`` for every transaction left Ongoing or Prepare*."""
    coordinator = TransactionCoordinator(admin)
    return [
        f"{m.transactional_id}: {m.state.state_name}"
        for m in coordinator.list()
        if m.state.state_name in _OPEN_STATES
    ]


def sweep_and_list_staged(admin: TopicAdmin, root_path: str) -> tuple[int, list[str]]:
    """Run the coordinator's orphan sweep (no age limit); return how many staged files it
    deleted and the staged files still left under any topic (on a local root or an object
    store; ``root_path`` is kept for callers, the admin's root is what is listed)."""
    del root_path
    now = int(time.time() * 1000)
    for topic in admin.list():  # the run is over: no reader needs a removed file now
        vacuum(admin, topic, delay_ms=0, now_ms=now)
    deleted = TransactionCoordinator(admin).delete_orphans(min_age_ms=0)
    left: list[str] = []
    for topic in admin.list():
        table = admin.table_path(topic)
        staged = [
            p
            for staging in (STAGING_DIR, ALOS_STAGING_DIR)
            for p in _parquet_under(admin, f"{table}/{staging}")
        ]
        if staged:
            referenced = _referenced(admin.table_uri(topic), table)
            left.extend(p for p in staged if p not in referenced)
    return deleted, left


def _parquet_under(admin: TopicAdmin, path: str) -> Iterable[str]:
    selector = pafs.FileSelector(path, allow_not_found=True, recursive=True)
    for info in admin.root.fs.get_file_info(selector):
        if info.type == pafs.FileType.File and info.base_name.endswith(".parquet"):
            yield info.path


def _referenced(uri: str, table: str) -> set[str]:
    """Return the full paths of the data files in a table's Delta log."""
    delta = DeltaTable(uri, storage_options=storage_options(uri))
    paths = delta.get_add_actions(flatten=True).column("path").to_pylist()
    return {f"{table}/{unquote(p)}" for p in paths}


def offsets_lag(admin: TopicAdmin, group: str, topics: Iterable[str]) -> dict[str, int]:
    """Return ``"topic-partition" -> records not covered`` by the committed positions."""
    committed = OffsetsStore(admin).fetch(group)
    reader = TopicReader(admin)
    lag: dict[str, int] = {}
    for topic in sorted(topics):
        for p, end in sorted(reader.end_offsets(topic).items()):
            behind = end - committed.get((topic, p), reader.beginning_offsets(topic)[p])
            if behind > 0:
                lag[f"{topic}-{p}"] = behind
    return lag
