"""What an application's topology reads, writes and keeps, recorded at every start.

``<root>/_apps/<application.id>/topology.json`` holds, for the running topology: the topics
it reads (and which sub-topology reads each), every table it writes (output topics,
repartition topics, changelogs, Delta sinks, the dead-letter topic) with its kind and
partition count, its stores (kind, sub-topology, changelog) and its description. Tools
that work on the application while it runs or after it stopped read it: a savepoint takes
its cut of exactly these tables (:mod:`runtime.app.savepoints`).
"""

from __future__ import annotations

import json
import time
from typing import Literal

from pydantic import BaseModel, ValidationError

from common.config import StreamsConfig
from common.errors import StreamsError
from runtime.app.internal_topics import TopicPlan
from runtime.storage.delta_sink import sink_table
from runtime.storage.topics import TopicAdmin
from topology.graph.topology import Topology

RECORD = "topology.json"

TableKind = Literal["topic", "repartition", "changelog", "delta-sink", "dead-letter"]


class TableRecord(BaseModel):
    """A table the application writes: its kind, where it is, how many partitions."""

    kind: TableKind
    path: str
    partitions: int


class StoreRecord(BaseModel):
    """A store of the application's tasks."""

    kind: str
    subtopology: int
    changelog: str | None


class TopologyRecord(BaseModel):
    """The record of one start (see the module)."""

    application_id: str
    guarantee: str
    started_ms: int
    sources: dict[str, int]
    outputs: dict[str, TableRecord]
    stores: dict[str, StoreRecord]
    description: str


def record_path(admin: TopicAdmin, application_id: str) -> str:
    """Where the application keeps its topology record."""
    return admin.root.path("_apps", application_id, RECORD)


def topology_record(
    topology: Topology, plan: TopicPlan, admin: TopicAdmin, config: StreamsConfig
) -> TopologyRecord:
    """The record of ``topology`` as ``plan`` runs it."""
    app = config.application_id
    changelogs = topology.changelog_topics(app)
    repartitions = set(topology.repartition_topic_names(app))
    dead_letters = config.errors_dead_letter_queue_topic_name
    outputs: dict[str, TableRecord] = {}
    for name, output in sorted(plan.outputs.items()):
        kind: TableKind = "topic"
        if name in changelogs.values():
            kind = "changelog"
        elif name in repartitions:
            kind = "repartition"
        elif sink_table(admin.root, name) is not None:
            kind = "delta-sink"
        elif name == dead_letters:
            kind = "dead-letter"
        outputs[name] = TableRecord(kind=kind, path=output.table_path, partitions=output.partitions)
    stores = {}
    for sub in topology.task_subtopologies():
        for name in sub.stores:
            store_kind = topology.stores[name].kind
            stores[name] = StoreRecord(
                kind=store_kind, subtopology=sub.id, changelog=changelogs.get(name)
            )
    return TopologyRecord(
        application_id=app,
        guarantee=config.processing_guarantee,
        started_ms=int(time.time() * 1000),
        sources=dict(plan.sources),
        outputs=outputs,
        stores=stores,
        description=str(topology.describe()),
    )


def write_record(admin: TopicAdmin, record: TopologyRecord) -> None:
    """Keep ``record`` as the application's topology record."""
    data = record.model_dump_json(indent=1).encode()
    admin.root.write_bytes(record_path(admin, record.application_id), data)


def read_record(admin: TopicAdmin, application_id: str) -> TopologyRecord:
    """The application's topology record.

    Raises:
        StreamsError: none was kept (the application never started with this version), or
            it cannot be read.
    """
    path = record_path(admin, application_id)
    raw = admin.root.read_bytes(path)
    if raw is None:
        raise StreamsError(
            f"application {application_id!r} has no topology record under {admin.root.uri} "
            f"({path}): start it once with this version, or check --application-id and --root"
        )
    try:
        return TopologyRecord.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        raise StreamsError(f"the topology record {path} is unreadable: {exc}") from exc
