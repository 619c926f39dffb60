"""An application's metrics, with Kafka Streams' names, groups, tags and levels.

One :class:`StreamsMetrics` per application instance (the driver) holds a
:class:`~common.metrics.Metrics` registry. Each stream thread records into it through its
:class:`ThreadMetrics`: what the driver measures itself (polls, commits, batches, lag,
rebalances, transactions) and what the batch's tasks measured on the executors (their
figures arrive with the batch's result rows, see :mod:`topology.engine.task_metrics`).

The groups and names (``metrics.recording.level`` in brackets):

* ``stream-metrics`` (client-id): ``alive-stream-threads``, ``failed-stream-threads`` [INFO]
* ``stream-thread-metrics`` (thread-id): ``process-rate/total``,
  ``process-latency-avg/max`` (ms per record), ``process-records-avg/max``,
  ``poll-rate/total``, ``poll-latency-avg/max``, ``poll-records-avg/max``,
  ``commit-rate/total``, ``commit-latency-avg/max``, ``punctuate-rate/total``,
  ``punctuate-latency-avg/max`` [INFO]; this project adds ``batch-latency-avg/max`` (a
  whole micro-batch, ms) and its runtime counters (``job-retry-total``,
  ``task-moved-total``, ...) [INFO]
* ``stream-task-metrics`` (thread-id, task-id): ``dropped-records-rate/total``,
  ``restore-total``, ``restore-rate``, ``restore-remaining-records-total`` [INFO];
  ``process-rate/total``, ``process-latency-avg/max``, ``punctuate-rate/total``,
  ``punctuate-latency-avg/max``, ``commit-rate/total``, ``commit-latency-avg/max`` [DEBUG]
* ``stream-processor-node-metrics`` (thread-id, task-id, processor-node-id):
  ``record-e2e-latency-avg/min/max`` of source and terminal nodes [INFO];
  ``process-rate/total`` of every node [DEBUG]
* ``stream-state-metrics`` (thread-id, task-id, ``<type>-state-id``):
  ``total-sst-files-size`` and ``size-all-mem-tables`` (RocksDB stores),
  ``estimate-num-keys`` [INFO]; ``<op>-rate`` and ``<op>-latency-avg/max`` for put, get,
  delete, put-if-absent, put-all, range, all, prefix-scan, fetch, remove, flush [DEBUG]
* ``consumer-fetch-manager-metrics`` (client-id[, topic, partition]): ``records-lag``,
  ``records-lag-avg``, ``records-lag-max`` [INFO]
* ``consumer-coordinator-metrics`` (client-id): ``rebalance-total``,
  ``rebalance-rate-per-hour``, ``rebalance-latency-avg/max/total``,
  ``last-rebalance-seconds-ago`` [INFO]
* ``producer-metrics`` (client-id): ``txn-commit-time-ns-total``,
  ``txn-abort-time-ns-total`` (Kafka's), and this project's ``txn-commit-rate/total``,
  ``txn-abort-rate/total``, ``txn-commit-latency-avg/max`` [INFO]

Latencies are in milliseconds, as Kafka Streams reports them.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from common.config import StreamsConfig
from common.metrics import MetricName, Metrics, MetricsSnapshot, RecordingLevel, Sensor
from topology.engine import task_metrics as tm
from topology.graph.topology import Topology

INFO, DEBUG = RecordingLevel.INFO, RecordingLevel.DEBUG

CLIENT = "stream-metrics"
THREAD = "stream-thread-metrics"
TASK = "stream-task-metrics"
NODE = "stream-processor-node-metrics"
STATE = "stream-state-metrics"
FETCH = "consumer-fetch-manager-metrics"
COORDINATOR = "consumer-coordinator-metrics"
PRODUCER = "producer-metrics"

_NS_PER_MS = 1e6


def store_scopes(topology: Topology, config: StreamsConfig) -> dict[str, str]:
    """Store name -> its Kafka metrics scope (``rocksdb-state``, ``in-memory-window-state``,
    ...), which names its ``<scope>-id`` tag."""
    scopes: dict[str, str] = {}
    for name, factory in topology.stores.items():
        try:
            builder: Any = factory.builder(config)
            base = builder.supplier.metrics_scope()
            kind = getattr(builder, "kind", "key_value")
        except Exception:  # a user's store factory that cannot say: a key-value store
            base, kind = "rocksdb", "key_value"
        middle = {"window": "-window", "session": "-session"}.get(kind, "")
        scopes[name] = f"{base}{middle}-state"
    return scopes


class StreamsMetrics:
    """The metrics of one application instance.

    Args:
        config: the application configuration (recording level, sample windows).
        client_id: the instance's client id (``<application.id>-<process id>``).
        store_scopes: store name -> metrics scope (see :func:`store_scopes`).
    """

    def __init__(
        self, config: StreamsConfig, client_id: str, store_scopes: Mapping[str, str] | None = None
    ):
        self.config = config
        self.client_id = client_id
        self.registry = Metrics(
            config.metrics_recording_level,
            config.metrics_sample_window_ms,
            config.metrics_num_samples,
        )
        self.store_scopes = dict(store_scopes or {})
        self.threads: dict[str, ThreadMetrics] = {}

    def thread(self, thread_id: str, client_id: str) -> ThreadMetrics:
        """The metrics of stream thread ``thread_id`` (made on first use)."""
        found = self.threads.get(thread_id)
        if found is None:
            found = self.threads[thread_id] = ThreadMetrics(self, thread_id, client_id)
        return found

    def client_gauges(self, alive: Callable[[], int], failed: Callable[[], int]) -> None:
        """Add the client-level gauges (threads alive and failed)."""
        tags = {"client-id": self.client_id}
        reg = self.registry
        reg.gauge(MetricName.of("alive-stream-threads", CLIENT, tags, "threads running"), alive)
        reg.gauge(MetricName.of("failed-stream-threads", CLIENT, tags, "threads that died"), failed)

    def snapshot(self) -> MetricsSnapshot:
        """Every metric now (Kafka's ``metrics()``)."""
        return self.registry.snapshot()


def _add_rate_total(sensor: Sensor, op: str, group: str, tags: Mapping[str, str]) -> None:
    sensor.add(MetricName.of(f"{op}-rate", group, tags, f"{op} per second"), "count-rate")
    sensor.add(MetricName.of(f"{op}-total", group, tags, f"{op} in total"), "count")


def _add_avg_max(sensor: Sensor, prefix: str, group: str, tags: Mapping[str, str]) -> None:
    sensor.add(MetricName.of(f"{prefix}-avg", group, tags, f"average {prefix}"), "avg")
    sensor.add(MetricName.of(f"{prefix}-max", group, tags, f"largest {prefix}"), "max")


class ThreadMetrics:
    """What one stream thread records (see the module's list).

    Args:
        parent: the application's metrics.
        thread_id: the thread's id (its client id, as Kafka's ``thread-id`` tag).
        client_id: the consumer and producer client id prefix.
    """

    def __init__(self, parent: StreamsMetrics, thread_id: str, client_id: str):
        self.parent = parent
        self.registry = parent.registry
        self.thread_id = thread_id
        self.tags = {"thread-id": thread_id}
        self.consumer_id = f"{client_id}-consumer"
        self.producer_id = f"{client_id}-producer"
        reg = self.registry
        # (operation: its -rate/-total and -latency-avg/max), (a size: its -avg/-max)
        self.process = self._thread_sensor("process", "process-latency")
        self.process_records = self._thread_sensor(None, "process-records")
        self.poll = self._thread_sensor("poll", "poll-latency")
        self.poll_records = self._thread_sensor(None, "poll-records")
        self.commit = self._thread_sensor("commit", "commit-latency")
        self.punctuate = self._thread_sensor("punctuate", "punctuate-latency")
        self.batch = self._thread_sensor(None, "batch-latency")
        self.lag_max = reg.sensor(f"{thread_id}.records-lag-max", INFO)
        lag_tags = {"client-id": self.consumer_id}
        self.lag_max.add(
            MetricName.of("records-lag-max", FETCH, lag_tags, "largest lag of any partition"),
            "max",
        )
        self._lags: dict[tuple[str, int], float] = {}
        self.rebalance = reg.sensor(f"{thread_id}.rebalance", INFO)
        co_tags = {"client-id": self.consumer_id}
        self.rebalance.add(
            MetricName.of("rebalance-total", COORDINATOR, co_tags, "rebalances joined"), "count"
        )
        self.rebalance.add(
            MetricName.of("rebalance-latency-total", COORDINATOR, co_tags, "ms in rebalances"),
            "total",
        )
        _add_avg_max(self.rebalance, "rebalance-latency", COORDINATOR, co_tags)
        self._last_rebalance: float | None = None
        reg.gauge(
            MetricName.of("rebalance-rate-per-hour", COORDINATOR, co_tags, "rebalances/hour"),
            self._rebalances_per_hour,
        )
        reg.gauge(
            MetricName.of(
                "last-rebalance-seconds-ago", COORDINATOR, co_tags, "since the last rebalance"
            ),
            self._since_rebalance,
        )
        self._rebalance_times: list[float] = []
        p_tags = {"client-id": self.producer_id}
        self.txn_commit = reg.sensor(f"{thread_id}.txn-commit", INFO)
        _add_rate_total(self.txn_commit, "txn-commit", PRODUCER, p_tags)
        _add_avg_max(self.txn_commit, "txn-commit-latency", PRODUCER, p_tags)
        self.txn_commit_ns = reg.sensor(f"{thread_id}.txn-commit-ns", INFO)
        self.txn_commit_ns.add(
            MetricName.of("txn-commit-time-ns-total", PRODUCER, p_tags, "ns committing"), "total"
        )
        self.txn_abort = reg.sensor(f"{thread_id}.txn-abort", INFO)
        _add_rate_total(self.txn_abort, "txn-abort", PRODUCER, p_tags)
        self.txn_abort.add(
            MetricName.of("txn-abort-time-ns-total", PRODUCER, p_tags, "ns aborting"), "total"
        )
        self._producer_seen: dict[int, dict[str, int]] = {}
        self._counters: dict[str, float] = {}
        self._tasks: dict[str, _TaskSensors] = {}

    def _thread_sensor(self, operation: str | None, measured: str) -> Sensor:
        """A thread-level sensor: ``<operation>-rate/-total`` (when given) and
        ``<measured>-avg/-max``."""
        sensor = self.registry.sensor(f"{self.thread_id}.{measured}", INFO)
        if operation is not None:
            _add_rate_total(sensor, operation, THREAD, self.tags)
        _add_avg_max(sensor, measured, THREAD, self.tags)
        return sensor

    # -- what the driver measures -------------------------------------------------------

    def polled(self, records: int, seconds: float) -> None:
        """A batch planned its reads: ``records`` in ``seconds``."""
        self.poll.record(seconds * 1000)
        self.poll_records.record(records)

    def batch_done(
        self, seconds: float, commit_seconds: float | None, lags: Mapping[tuple[str, int], int]
    ) -> None:
        """A batch ended after ``seconds`` (its commit phase ``commit_seconds``, None when
        nothing was committed); ``lags``: each owned partition's lag after it."""
        self.batch.record(seconds * 1000)
        if commit_seconds is not None:
            self.commit.record(commit_seconds * 1000)
        self.lagged(lags)

    def lagged(self, lags: Mapping[tuple[str, int], int]) -> None:
        """Set each partition's ``records-lag`` (and feed the ``-avg``/``-max``)."""
        reg = self.registry
        for (topic, partition), lag in lags.items():
            key = (topic, partition)
            if key not in self._lags:
                tags = {"client-id": self.consumer_id, "topic": topic, "partition": str(partition)}
                reg.gauge(
                    MetricName.of("records-lag", FETCH, tags, "the partition's latest lag"),
                    functools.partial(self._lags.get, key),
                )
                sensor = reg.sensor(f"{self.thread_id}.lag.{topic}.{partition}", INFO)
                sensor.add(MetricName.of("records-lag-avg", FETCH, tags, "average lag"), "avg")
                sensor.add(MetricName.of("records-lag-max", FETCH, tags, "largest lag"), "max")
            self._lags[key] = float(lag)
            reg.sensor(f"{self.thread_id}.lag.{topic}.{partition}", INFO).record(lag)
        if lags:
            self.lag_max.record(max(lags.values()))

    def lags(self) -> dict[tuple[str, int], float]:
        """The latest lag of each partition the thread consumed."""
        return dict(self._lags)

    def rebalanced(self, seconds: Iterable[float]) -> None:
        """The thread's member joined its group (each join's duration)."""
        for each in seconds:
            self.rebalance.record(each * 1000)
            self._last_rebalance = time.time()
            self._rebalance_times.append(self._last_rebalance)

    def _rebalances_per_hour(self) -> float:
        hour_ago = time.time() - 3600
        self._rebalance_times = [t for t in self._rebalance_times if t > hour_ago]
        return float(len(self._rebalance_times))

    def _since_rebalance(self) -> float | None:
        last = self._last_rebalance
        return None if last is None else time.time() - last

    def producer(self, producer: Any) -> None:
        """Take a transactional producer's commits and aborts since last time."""
        now = dict(producer.metrics)
        seen = self._producer_seen.get(id(producer), {})
        self._producer_seen[id(producer)] = now
        commits = now.get("commits", 0) - seen.get("commits", 0)
        commit_ns = now.get("commit-time-ns", 0) - seen.get("commit-time-ns", 0)
        if commits > 0:
            self.txn_commit.record_many(commits, commit_ns / _NS_PER_MS)
            self.txn_commit_ns.record_many(commits, commit_ns)
        aborts = now.get("aborts", 0) - seen.get("aborts", 0)
        abort_ns = now.get("abort-time-ns", 0) - seen.get("abort-time-ns", 0)
        if aborts > 0:
            self.txn_abort.record_many(aborts, abort_ns)

    def counters(self, counts: Mapping[str, int]) -> None:
        """The runtime's own counters (``job-retry-total``, ...): added as metrics of
        the thread on first sight."""
        for name, value in counts.items():
            if name not in self._counters:
                metric = MetricName.of(name, THREAD, self.tags, "a runtime counter")
                self.registry.gauge(metric, functools.partial(self._counters.get, name))
            self._counters[name] = float(value)

    # -- what the tasks measured -------------------------------------------------------

    def task_stats(self, task_id: str, figures: list[Any], gauges: Mapping[str, float]) -> None:
        """Feed one task's figures and gauges of a batch (see
        :meth:`~topology.engine.task_metrics.TaskStats.drain`)."""
        sensors = self._tasks.get(task_id)
        if sensors is None:
            sensors = self._tasks[task_id] = _TaskSensors(self, task_id)
        records = 0
        for kind, name, count, total, high, low in figures:
            if kind == tm.PROCESS:
                records += count
                self.process.record_many(
                    count, total / _NS_PER_MS, high / _NS_PER_MS, low / _NS_PER_MS
                )
            elif kind == tm.PUNCTUATE:
                self.punctuate.record_many(
                    count, total / _NS_PER_MS, high / _NS_PER_MS, low / _NS_PER_MS
                )
            sensors.figure(kind, name, count, total, high, low)
        if records:
            self.process_records.record(records)
        for key, value in gauges.items():
            kind, _, name = key.partition("\x00")
            sensors.gauge(kind, name, value)

    def closed_tasks(self, live: Iterable[str]) -> None:
        """Forget the metrics of tasks the thread no longer runs."""
        keep = set(live)
        for task_id in [t for t in self._tasks if t not in keep]:
            self._tasks.pop(task_id).remove()


class _TaskSensors:
    """The sensors of one task, its nodes and stores (made as figures arrive)."""

    def __init__(self, thread: ThreadMetrics, task_id: str):
        self.thread = thread
        self.registry = thread.registry
        self.task_id = task_id
        self.tags = {**thread.tags, "task-id": task_id}
        self.prefix = f"{thread.thread_id}.task.{task_id}."
        self._sensors: dict[tuple[str, str], Sensor] = {}
        self._gauges: dict[tuple[str, str], float] = {}
        reg = self.registry
        self.dropped = reg.sensor(self.prefix + "dropped", INFO)
        self.dropped.add(
            MetricName.of("dropped-records-rate", TASK, self.tags, "records dropped/s"), "rate"
        )
        self.dropped.add(
            MetricName.of("dropped-records-total", TASK, self.tags, "records dropped"), "total"
        )
        self.restore = reg.sensor(self.prefix + "restore", INFO)
        self.restore.add(
            MetricName.of("restore-total", TASK, self.tags, "records restored"), "count"
        )
        self.restore.add(
            MetricName.of("restore-rate", TASK, self.tags, "records/s restored"), "count-rate"
        )
        self._remaining: dict[str, float] = {}
        reg.gauge(
            MetricName.of(
                "restore-remaining-records-total", TASK, self.tags, "records left to restore"
            ),
            lambda: float(sum(self._remaining.values())),
        )

    def figure(  # noqa: PLR0917 - one drained figure
        self, kind: str, name: str, count: int, total: float, high: float, low: float
    ) -> None:
        sensor = self._sensor(kind, name)
        if sensor is None:
            return
        if kind in (tm.E2E, tm.NODE, tm.DROPPED, tm.RESTORE):
            sensor.record_many(count, total, high, low)
        else:  # durations in ns, recorded in ms
            sensor.record_many(count, total / _NS_PER_MS, high / _NS_PER_MS, low / _NS_PER_MS)

    def _sensor(self, kind: str, name: str) -> Sensor | None:
        found = self._sensors.get((kind, name))
        if found is not None:
            return found
        reg, tags, key = self.registry, self.tags, f"{self.prefix}{kind}.{name}"
        if kind == tm.DROPPED:
            found = self.dropped
        elif kind in (tm.PROCESS, tm.PUNCTUATE, tm.COMMIT):
            found = reg.sensor(key, DEBUG)
            _add_rate_total(found, kind, TASK, tags)
            _add_avg_max(found, f"{kind}-latency", TASK, tags)
        elif kind == tm.RESTORE:
            found = self.restore
        elif kind == tm.NODE:
            found = reg.sensor(key, DEBUG)
            node_tags = {**tags, "processor-node-id": name}
            _add_rate_total(found, "process", NODE, node_tags)
        elif kind == tm.E2E:
            found = reg.sensor(key, INFO)
            node_tags = {**tags, "processor-node-id": name}
            for stat in ("avg", "min", "max"):
                found.add(
                    MetricName.of(
                        f"record-e2e-latency-{stat}", NODE, node_tags, f"{stat} e2e latency ms"
                    ),
                    stat,
                )
        elif kind == tm.STORE:
            store, _, operation = name.partition("\x00")
            found = reg.sensor(key, DEBUG)
            state_tags = self._store_tags(store)
            found.add(
                MetricName.of(f"{operation}-rate", STATE, state_tags, f"{operation}s/s"),
                "count-rate",
            )
            _add_avg_max(found, f"{operation}-latency", STATE, state_tags)
        else:
            return None
        self._sensors[(kind, name)] = found
        return found

    def _store_tags(self, store: str) -> dict[str, str]:
        scope = self.thread.parent.store_scopes.get(store, "rocksdb-state")
        return {**self.tags, f"{scope}-id": store}

    def gauge(self, kind: str, name: str, value: float) -> None:
        if kind == tm.REMAINING:
            self._remaining[name] = value
            return
        key = (kind, name)
        if key not in self._gauges:
            if kind == tm.STORE_SIZE:
                metric = MetricName.of(
                    "total-sst-files-size", STATE, self._store_tags(name), "bytes on disk"
                )
            elif kind == tm.STORE_KEYS:
                metric = MetricName.of(
                    "estimate-num-keys", STATE, self._store_tags(name), "keys (estimate)"
                )
            elif kind == tm.STORE_MEMTABLES:
                metric = MetricName.of(
                    "size-all-mem-tables", STATE, self._store_tags(name), "bytes in memtables"
                )
            else:
                return
            self.registry.gauge(metric, functools.partial(self._gauges.get, key))
        self._gauges[key] = value

    def remove(self) -> None:
        """Remove every metric of the task."""
        prefix = self.prefix
        self.registry.remove(lambda n: n.startswith(prefix))
        task_id, thread_id = self.task_id, self.thread.thread_id
        self.registry.remove_gauges(
            lambda m: m.tags.get("task-id") == task_id and m.tags.get("thread-id") == thread_id
        )
