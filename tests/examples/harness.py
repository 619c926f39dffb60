"""Run an example both ways, on local Spark and through the TopologyTestDriver, and compare.

The input is the example's ``generate(n)`` as ``streams-eos run --generate`` produces it
(:func:`runtime.app.topology_file.generated_records`). The driver's outputs are placed in partitions
with the producer's partitioner (murmur2 of the key, as the Spark run's sinks do), so the
two runs can be compared partition by partition.
"""

from __future__ import annotations

import importlib.util
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from runtime.app.topology_file import RawRecord, generated_records
from runtime.storage.partitioner import partition_for_key
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from streams.testing import TopologyTestDriver
from topology import Topology

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

#: An output record as both runs see it: key, value (serialized) and timestamp.
Out = tuple[bytes | None, bytes | None, int]
#: Output records per topic, then per partition, in offset order.
Outputs = dict[str, dict[int, list[Out]]]


def load_example(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` under a private module name."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def input_topics(example: ModuleType) -> list[str]:
    """The example's input topics (those its generator writes)."""
    return list(generated_records(example, 1))


def output_topics(example: ModuleType) -> list[str]:
    """Every topic of ``TOPICS`` that is not an input."""
    inputs = set(input_topics(example))
    return [t for t in example.TOPICS if t not in inputs]


def produce(admin: TopicAdmin, example: ModuleType, n: int) -> dict[str, list[RawRecord]]:
    """Create the example's topics and produce ``generate(n)``, topic by topic, as the CLI
    does; return what was produced."""
    for topic, partitions in example.TOPICS.items():
        admin.create(topic, partitions, if_not_exists=True)
    records = generated_records(example, n)
    producer = Producer(admin)
    for topic, raws in records.items():
        for key, value, timestamp in raws:
            producer.send(topic, key, value, timestamp=timestamp)
        producer.flush()
    return records


def driver_outputs(
    example: ModuleType, records: Mapping[str, list[RawRecord]], topology: Topology | None = None
) -> Outputs:
    """Pipe ``records`` through the TopologyTestDriver, topic by topic; return each output
    topic's records in the partitions the producer's partitioner gives their keys."""
    outputs: Outputs = {}
    topology = topology or example.build_topology()
    with TopologyTestDriver(topology, example.CONFIG) as driver:
        for topic, raws in records.items():
            for key, value, timestamp in raws:
                driver.pipe_raw(topic, key, value, 0 if timestamp is None else timestamp)
        for topic in output_topics(example):
            partitions = example.TOPICS[topic]
            per: dict[int, list[Out]] = {p: [] for p in range(partitions)}
            for raw in driver.output_queue(topic):
                assert raw.key is not None, f"{topic}: a keyless output cannot be compared"
                per[partition_for_key(raw.key, partitions)].append(
                    (raw.key, raw.value, raw.timestamp)
                )
            outputs[topic] = per
    return outputs


def topic_outputs(root: str, topics: list[str]) -> Outputs:
    """Read every committed record of ``topics``, per partition in offset order."""
    reader = TopicReader(root)
    outputs: Outputs = {}
    for topic in topics:
        per: dict[int, list[Out]] = {}
        for p in reader.end_offsets(topic):
            table = reader.read(topic, p, 0)
            per[p] = list(
                zip(
                    table.column("key").to_pylist(),
                    table.column("value").to_pylist(),
                    table.column("timestamp").to_pylist(),
                    strict=True,
                )
            )
        outputs[topic] = per
    return outputs


OrderKey = Callable[[Out], Hashable]


def by_key(record: Out) -> Hashable:
    """Records of one key keep their order (the default)."""
    return record[0]


def assert_same_outputs(
    got: Outputs, expected: Outputs, *, order: Mapping[str, OrderKey] | None = None
) -> None:
    """Each partition of each topic holds the same records in both, and records of one
    group (``order[topic]``, by default the key) come in the same order."""
    assert set(got) == set(expected)
    for topic, per in expected.items():
        group = (order or {}).get(topic, by_key)
        assert set(got[topic]) == set(per), topic
        for p, records in per.items():
            spark = got[topic][p]
            missing, extra = Counter(records) - Counter(spark), Counter(spark) - Counter(records)
            assert not missing and not extra, (
                f"{topic}-{p}: {sum(missing.values())} records missing, e.g. "
                f"{list(missing)[:2]}; {sum(extra.values())} extra, e.g. {list(extra)[:2]}"
            )
            assert _grouped(spark, group) == _grouped(records, group), f"{topic}-{p}: order"


def _grouped(records: list[Out], group: OrderKey) -> dict[Hashable, list[Out]]:
    out: dict[Hashable, list[Out]] = defaultdict(list)
    for record in records:
        out[group(record)].append(record)
    return dict(out)


def count(outputs: Outputs, topic: str) -> int:
    """The number of records of ``topic``."""
    return sum(len(records) for records in outputs[topic].values())


def values(outputs: Outputs, topic: str, decode: Callable[[bytes], Any]) -> list[Any]:
    """The decoded values of ``topic``, partition after partition."""
    return [decode(v) for _, records in sorted(outputs[topic].items()) for _, v, _ in records if v]
