"""What a running application shows of itself (``StreamsApp``'s side of it).

One :class:`AppInsight` per application instance holds its metrics (and their Prometheus
endpoint, ``metrics.port``), the listeners of its batches' progress, its instance record
under the storage root (``streams-eos status``) and its store queries (``app.store``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyspark import cloudpickle

from runtime.app.app_state import AppState
from runtime.app.instance_status import InstanceStatus, store_rows
from runtime.app.store_queries import QueryableStore, StoreCatalog, catalog_path, query_of
from runtime.app.topology_record import topology_record, write_record
from runtime.metrics import StreamsMetrics, ThreadMetrics, store_scopes
from runtime.metrics_http import MetricsServer
from runtime.thread.progress import BatchProgress

if TYPE_CHECKING:
    from runtime.app.app import StreamsApp
    from runtime.thread.stream_thread import StreamThread

log = logging.getLogger(__name__)


class AppInsight:
    """Metrics, progress listeners, the instance record and store queries of ``app``."""

    def __init__(self, app: StreamsApp):
        self.app = app
        self.metrics = StreamsMetrics(
            app.config, app.application_id, store_scopes(app.topology, app.config)
        )
        self.metrics.client_gauges(self._alive_threads, self._failed_threads)
        self.listeners: list[Callable[[BatchProgress], None]] = []
        self.queries: dict[tuple[str, bool], QueryableStore] = {}
        self._server: MetricsServer | None = None
        self._status: InstanceStatus | None = None
        #: The tasks restoring in each thread, as the instance record last told them.
        self._restoring: list[frozenset[str]] = []

    def started(self) -> None:
        """The application got its process id: keep its record and store catalog under the
        root, follow its state, serve its metrics (``metrics.port``)."""
        app = self.app
        self._status = InstanceStatus(app.admin, app.application_id, app.process_id, self._describe)
        catalog = StoreCatalog.of(app.topology, app.config)
        data = cloudpickle.dumps(catalog)  # type: ignore[no-untyped-call]
        app.admin.root.write_bytes(catalog_path(app.admin, app.application_id), data)
        if app.plan is not None:
            record = topology_record(app.topology, app.plan, app.admin, app.config)
            write_record(app.admin, record)
        if app.config.metrics_port:
            self._server = MetricsServer(self.metrics.snapshot, app.config.metrics_port)

    def stopped(self) -> None:
        """Stop serving the metrics (the queries stay usable)."""
        if self._server is not None:
            self._server.close()
            self._server = None

    def thread_metrics(self, index: int) -> ThreadMetrics:
        """The metrics of stream thread ``index`` (Kafka's thread id)."""
        app = self.app
        thread_id = f"{app.application_id}-{app.process_id}-StreamThread-{index}"
        return self.metrics.thread(thread_id, thread_id)

    def attach(self, thread: StreamThread) -> None:
        """Tell ``thread``'s batches to the listeners (and rewrite the instance record)."""
        thread.reporter.listeners.extend(self.listeners)
        thread.reporter.listeners.append(self._after_batch)
        thread.reporter.stall_listeners.append(self._stall_changed)

    def add_listener(self, listener: Callable[[BatchProgress], None]) -> None:
        """Tell ``listener`` every batch from now on, of every thread."""
        self.listeners.append(listener)
        for thread in self.app.threads:
            thread.reporter.listeners.append(listener)

    def store(self, name: str, timestamped: bool) -> QueryableStore:
        """The query of store ``name`` (one per name, kept)."""
        key = (name, timestamped)
        found = self.queries.get(key)
        if found is None:
            app = self.app
            found = query_of(app.topology, app.config, app.admin, name, timestamped=timestamped)
            self.queries[key] = found
        return found

    def state_changed(self, new: AppState, old: AppState) -> None:
        """Rewrite the instance record (the app's state observer)."""
        self._write_status(force=True)

    def _after_batch(self, progress: BatchProgress) -> None:
        # tasks that start or stop restoring are told at once (those watching wait for it)
        restoring = [t.placement.restoring for t in list(self.app.threads)]
        changed, self._restoring = restoring != self._restoring, restoring
        self._write_status(force=changed)

    def _stall_changed(self, stalled: bool) -> None:
        self._write_status(force=True)  # no batch runs while stalled: say so now

    def _write_status(self, *, force: bool) -> None:
        if self._status is None:
            return
        try:
            self._status.write(force=force)
        except Exception as exc:  # for people watching: never stops the app
            log.warning("[app %s] cannot write its status record: %s", self.app.application_id, exc)

    def _describe(self) -> dict[str, Any]:
        """What the instance record holds now (see :mod:`runtime.app.instance_status`)."""
        app, m = self.app, self.metrics.snapshot()
        threads = []
        for index, thread in enumerate(list(app.threads)):
            query = app.queries[index] if index < len(app.queries) else None
            sensors = thread.reporter.sensors
            thread_id = sensors.thread_id if sensors is not None else thread.transactional_id
            group = "stream-thread-metrics"
            threads.append(
                {
                    "thread.id": thread_id,
                    "transactional.id": thread.transactional_id,
                    "alive": bool(query is not None and query.isActive),
                    "stalled": thread.reporter.stalled_now,
                    "batches": thread.batches,
                    "last_batch_ms": thread.reporter.last_batch_ms,
                    "commit_latency_avg_ms": _finite(
                        m.total("commit-latency-avg", group, thread_id=thread_id)
                    ),
                    "process_rate": _finite(m.total("process-rate", group, thread_id=thread_id)),
                    "tasks": thread.task_ids(),
                    "restoring": thread.placement.restoring_of(thread.task_ids()),
                    "executors": thread.placement.by_executor(),
                    "failure": None if thread.failure is None else str(thread.failure),
                }
            )
        return {
            "state": app.state.value,
            "threads": threads,
            "stores": store_rows(m),
            "error": None if app.error is None else str(app.error),
        }

    def _alive_threads(self) -> int:
        app = self.app
        if not app.state.is_running_or_rebalancing():
            return 0
        return sum(1 for q in app.queries if q.isActive)

    def _failed_threads(self) -> int:
        app = self.app
        return app.replaced_threads + (1 if app.state is AppState.ERROR else 0)


def _finite(value: float) -> float | None:
    """``value``, or None when it is NaN (no sample yet): JSON has no NaN."""
    return None if math.isnan(value) else value
