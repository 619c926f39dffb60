"""The log manager of an application instance: keeps its topics' storage bounded.

Kafka's brokers enforce retention and compact topics; Kafka Streams purges its repartition
topics. Here each running instance does that for the topics its application reads and
writes (sources, sinks, changelogs, repartition topics, the dead-letter topic and
``__consumer_offsets``), in one background thread, on three schedules:

* every ``log.retention.check.interval.ms``: retention (``retention.ms``,
  ``retention.bytes``), merging of small files, the vacuum of removed files and the cleanup
  of old Delta log commits;
* every ``log.cleaner.backoff.ms``: compaction of compacted topics (a changelog below its
  oldest kept snapshot, others up to ``min.compaction.lag.ms``), merging, vacuum;
* every ``repartition.purge.interval.ms``: repartition topics lose the files below the
  lowest offset any group committed (Kafka Streams' ``deleteRecords`` after commits).

The first run of each comes one interval after start. The instances of one application
share the topics: at each run an instance cleans those whose name hashes to its place among
the group's processes (:meth:`LogManager.mine`), so two instances do the work once, not
twice, and do not undo each other's merges. Alone, or when the group cannot be read, an
instance cleans them all; two that clean one topic at once are safe anyway (each commit
is a compare-and-swap, and the loser of a race skips that step until its next run). A
failed run is logged (the next one tries again) and kept in :attr:`LogManager.last_error`;
processing is never stopped by it.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Callable, Iterable

from common.config import StreamsConfig
from runtime.app.internal_topics import CHANGELOG_CONFIGS, REPARTITION_CONFIGS, TopicPlan
from runtime.group.coordinator import GroupCoordinator
from runtime.state.adapters import RootSnapshotStorage
from runtime.state.changelog_compaction import changelog_store, snapshot_horizons
from runtime.storage.cleaner import CleanResult, LogCleaner
from runtime.storage.delta_sink import SinkTable, maintain, sink_table
from runtime.storage.topics import TopicAdmin
from runtime.txn.offsets import OFFSETS_TOPIC, OffsetsStore

log = logging.getLogger(__name__)

_REPARTITION_SUFFIX = "-repartition"


def cleaner_defaults(config: StreamsConfig) -> dict[str, object]:
    """Return the topic settings where a topic sets none, from the ``log.*`` keys."""
    return {
        "retention.ms": config.log_retention_ms,
        "retention.bytes": config.log_retention_bytes,
        "segment.bytes": config.log_segment_bytes,
        "segment.ms": config.log_roll_ms,
        "file.delete.delay.ms": config.log_segment_delete_delay_ms,
        "min.compaction.lag.ms": config.log_cleaner_min_compaction_lag_ms,
        "delete.retention.ms": config.delete_retention_ms,
    }


class LogManager:
    """Runs the log cleaner over an application's topics in a background thread.

    Args:
        admin: the storage root's topic admin.
        config: the application configuration.
        topics: returns the topics to clean (called at every run: pattern sources grow).
    """

    def __init__(
        self, admin: TopicAdmin, config: StreamsConfig, topics: Callable[[], Iterable[str]]
    ) -> None:
        self.admin = admin
        self.config = config
        self.topics = topics
        self.application_id = config.application_id
        self.cleaner = LogCleaner(
            admin,
            cleaner_defaults(config),
            delta_log_retention_ms=config.log_delta_retention_ms,
        )
        self.snapshots = RootSnapshotStorage(admin.root)
        self._offsets: OffsetsStore | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.runs = 0
        self.process_id: str | None = None
        self.last_error: BaseException | None = None
        self.totals: dict[str, int] = {}

    def start(self, process_id: str | None = None) -> None:
        """Start the background thread (its first runs one interval from now); with the
        instance's ``process_id``, it cleans its share of the topics (:meth:`mine`)."""
        self.process_id = process_id
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._loop, name=f"log-manager-{self.application_id}", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop the background thread (a run in progress finishes its current step)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _loop(self) -> None:
        c = self.config
        intervals = {
            "retention": c.log_retention_check_interval_ms / 1000,
            "cleaner": c.log_cleaner_backoff_ms / 1000,
            "purge": c.repartition_purge_interval_ms / 1000,
        }
        due = {name: time.monotonic() + every for name, every in intervals.items()}
        while not self._stop.wait(max(0.0, min(due.values()) - time.monotonic())):
            now = time.monotonic()
            ready = {name for name, at in due.items() if at <= now}
            for name in ready:
                due[name] = now + intervals[name]
            try:
                self.run_once(
                    retention="retention" in ready,
                    compaction="cleaner" in ready,
                    purge="purge" in ready,
                )
            except Exception as exc:  # the next run tries again
                self.last_error = exc
                log.warning(
                    "[log-manager %s] run failed: %s", self.application_id, exc, exc_info=True
                )

    def run_once(
        self,
        *,
        retention: bool = True,
        compaction: bool = True,
        purge: bool = True,
        now_ms: int | None = None,
    ) -> list[CleanResult]:
        """Run the chosen steps over every topic now; return what each topic's clean did."""
        results = []
        for topic in self.mine(sorted(set(self.topics()))):
            if self._stop.is_set():
                break
            sink = sink_table(self.admin.root, topic)
            if sink is not None:  # a Delta sink's table: compacted and vacuumed
                if compaction:
                    self._maintain(sink)
                continue
            if not self.admin.exists(topic):
                continue
            result = self._clean(topic, retention, compaction, purge, now_ms)
            if result is not None:
                results.append(result)
                self._count(result)
        self.runs += 1
        return results

    def mine(self, topics: list[str]) -> list[str]:
        """The ``topics`` this instance cleans: with the group's members from several
        processes, those whose name hashes (CRC-32) to this process's place among them,
        sorted; all of them when it runs alone, has no process id, is not in the group
        (yet), or the group cannot be read."""
        if self.process_id is None:
            return topics
        try:
            members = GroupCoordinator(self.admin).describe(self.application_id).members
        except Exception as exc:  # this run cleans them all
            log.debug("[log-manager %s] group not read: %s", self.application_id, exc)
            return topics
        processes = sorted({m.instance_id.rpartition("-")[0] for m in members if m.instance_id})
        if len(processes) < 2 or self.process_id not in processes:
            return topics
        place = processes.index(self.process_id)
        return [t for t in topics if zlib.crc32(t.encode()) % len(processes) == place]

    def _clean(
        self, topic: str, retention: bool, compaction: bool, purge: bool, now_ms: int | None
    ) -> CleanResult | None:
        repartition = self._is_repartition(topic)
        if not (retention or compaction or (purge and repartition)):
            return None
        purge_below = self.offsets().consumed_by_all(topic) if purge and repartition else None
        store = changelog_store(self.application_id, topic)
        # a changelog loses nothing a restore needs: only what lies below the oldest
        # kept snapshot of its task is compacted or deleted (windowed stores' changelogs
        # are compact,delete, as Kafka Streams makes them)
        horizons = (
            snapshot_horizons(self.snapshots, self.application_id, store)
            if store is not None and (compaction or retention)
            else None
        )
        kind = (
            REPARTITION_CONFIGS if repartition else CHANGELOG_CONFIGS if store is not None else None
        )
        result = self.cleaner.clean(
            topic,
            kind=kind,
            now_ms=now_ms,
            retention=retention,
            purge_below=purge_below,
            compaction_horizons=horizons,
            delete_below=horizons,
            compact=compaction,
            merge=retention or compaction,
        )
        if result.deleted_files or result.merges or result.compactions or result.vacuumed_files:
            log.info("[log-manager %s] %s", self.application_id, result)
        return result

    def _maintain(self, sink: SinkTable) -> None:
        done = maintain(sink, target_bytes=self.config.log_segment_bytes, root=self.admin.root)
        self.totals["sink-files-compacted"] = (
            self.totals.get("sink-files-compacted", 0) + done.compacted_files
        )
        self.totals["sink-files-vacuumed"] = (
            self.totals.get("sink-files-vacuumed", 0) + done.vacuumed_files
        )
        if done.compacted_files or done.vacuumed_files:
            log.info("[log-manager %s] %s: %s", self.application_id, sink.table, done)

    def _is_repartition(self, topic: str) -> bool:
        return topic.startswith(f"{self.application_id}-") and topic.endswith(_REPARTITION_SUFFIX)

    def offsets(self) -> OffsetsStore:
        """Return the reader of committed positions (made on first use)."""
        if self._offsets is None:
            self._offsets = OffsetsStore(self.admin)
        return self._offsets

    def _count(self, result: CleanResult) -> None:
        for name, value in (
            ("files-deleted", result.deleted_files),
            ("records-deleted", result.deleted_records),
            ("files-merged", result.merged_files),
            ("compactions", len(result.compactions)),
            ("files-vacuumed", result.vacuumed_files),
            ("log-files-deleted", result.log_files_deleted),
        ):
            self.totals[name] = self.totals.get(name, 0) + value


def application_topics(
    sources: Iterable[str], outputs: Iterable[str], extra: Iterable[str] = ()
) -> set[str]:
    """Return the topics an application instance cleans: what it reads and writes, and
    ``__consumer_offsets``."""
    return {*sources, *outputs, *extra, OFFSETS_TOPIC}


def plan_topics_cleaned(plan: TopicPlan, read: Iterable[str]) -> set[str]:
    """The topics an application instance running ``plan`` cleans, its threads reading
    ``read`` too (pattern-matched topics)."""
    return application_topics([*plan.sources, *read], plan.outputs, plan.global_topics)
