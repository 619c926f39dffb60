"""Compact an application's changelogs, each partition below its clean horizon.

The policy beside the mechanics of :mod:`runtime.storage.compaction`: which topics are an
application's changelogs (``<application.id>-<store>-changelog``), and how far each
partition may be cleaned. The horizon is the offset of the oldest kept snapshot of the
store's task (every restore starts from a snapshot or a live store's committed offset, never
below), lowered to the caller's bounds; a partition without a snapshot is left alone. The
runtime's log manager (:mod:`runtime.app.log_manager`) compacts each changelog below
:func:`snapshot_horizons` in the background; :func:`compact_changelogs` does it at once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from common.config import StreamsConfig
from runtime.state.adapters import RootSnapshotStorage
from runtime.storage.compaction import (
    DEFAULT_DELETE_RETENTION_MS,
    CompactionConflictError,
    CompactionResult,
    compact_changelog,
)
from runtime.storage.topics import TopicAdmin
from statestores.metered import changelog_topic
from statestores.protocols import SnapshotStorage
from statestores.snapshots import MANIFEST, SnapshotManager

log = logging.getLogger(__name__)

_CHANGELOG_SUFFIX = "-changelog"


def changelog_store(application_id: str, topic: str) -> str | None:
    """Return the store whose changelog ``topic`` is (``<application.id>-<store>-changelog``),
    or None when it is no changelog of the application."""
    prefix = f"{application_id}-"
    if not (topic.startswith(prefix) and topic.endswith(_CHANGELOG_SUFFIX)):
        return None
    store = topic[len(prefix) : -len(_CHANGELOG_SUFFIX)]
    if not store or changelog_topic(application_id, store) != topic:
        return None
    return store


def snapshot_horizons(storage: SnapshotStorage, application_id: str, store: str) -> dict[int, int]:
    """Return per changelog partition the offset of the oldest kept snapshot of ``store``
    (the smallest over the tasks of that partition): no restore from a snapshot starts
    below it. A partition without a snapshot is absent."""
    prefix = f"snapshots/{application_id}/"
    tasks = set()
    for key in storage.list_keys(prefix):
        parts = key[len(prefix) :].split("/")
        if len(parts) >= 3 and parts[1] == store and parts[-1] == MANIFEST:
            tasks.add(parts[0])
    out: dict[int, int] = {}
    for task in sorted(tasks):
        _, _, raw = task.rpartition("_")
        if not raw.isdigit():
            continue
        oldest = SnapshotManager(storage, application_id, task).horizon(store)
        if oldest is not None:
            p = int(raw)
            out[p] = min(oldest, out.get(p, oldest))
    return out


def compact_changelogs(
    admin: TopicAdmin,
    application_id: str,
    config: StreamsConfig | Mapping[str, Any] | None = None,
    *,
    snapshots: SnapshotStorage | None = None,
    lower_bounds: Mapping[tuple[str, int], int] | None = None,
    now_ms: int | None = None,
) -> list[CompactionResult]:
    """Compact every changelog topic ``<application.id>-<store>-changelog`` of the app.

    Each partition's horizon is the oldest kept snapshot of its store (a partition with
    none is not compacted), lowered to ``lower_bounds[(topic, partition)]`` when given
    (e.g. the committed offsets of live local stores). A topic whose ``cleanup.policy`` is
    set without ``compact`` is skipped. ``delete.retention.ms`` is the topic's, else the
    configuration's, else Kafka's default (one day).

    Args:
        admin: the topic admin of ``topics.root``.
        application_id: the application id.
        config: the ``StreamsConfig`` or a mapping of dotted keys (may be None).
        snapshots: where snapshots live (default: under the storage root).
        lower_bounds: offsets no compaction may pass, per ``(changelog topic, partition)``.
        now_ms: the current time (default: the clock).

    Returns:
        One result per changelog topic compacted. A partition whose compaction conflicts
        with another compactor is logged and skipped (the next run takes it).
    """
    storage = snapshots if snapshots is not None else RootSnapshotStorage(admin.root)
    default_retention = _config_retention(config)
    bounds = lower_bounds or {}
    results = []
    for topic in admin.list():
        store = changelog_store(application_id, topic)
        if store is None:
            continue
        configs = admin.configs(topic)
        if "compact" not in configs.get("cleanup.policy", "compact"):
            continue
        retention = int(configs.get("delete.retention.ms", default_retention))
        horizons = snapshot_horizons(storage, application_id, store)
        for (bound_topic, p), offset in bounds.items():
            if bound_topic == topic and p in horizons:
                horizons[p] = min(horizons[p], offset)
        results.append(_compact_partitions(admin, topic, horizons, retention, now_ms))
    return results


def _compact_partitions(
    admin: TopicAdmin,
    topic: str,
    horizons: Mapping[int, int],
    retention: int,
    now_ms: int | None,
) -> CompactionResult:
    out = CompactionResult(topic)
    for p, h in sorted(horizons.items()):
        try:
            done = compact_changelog(
                admin, topic, p, horizon=h, delete_retention_ms=retention, now_ms=now_ms
            )
        except CompactionConflictError as exc:
            log.warning("[compaction %s-%d] skipped: %s", topic, p, exc)
            continue
        out.partitions.extend(done.partitions)
    return out


def _config_retention(config: StreamsConfig | Mapping[str, Any] | None) -> int:
    if config is None:
        return DEFAULT_DELETE_RETENTION_MS
    value = config.get("delete.retention.ms")
    return DEFAULT_DELETE_RETENTION_MS if value is None else int(value)
