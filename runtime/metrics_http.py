"""The application's metrics over HTTP, in Prometheus' text format (``metrics.port``).

Each metric becomes ``kafka_<group>_<name>`` with its tags as labels, ``-`` and other
characters Prometheus does not allow turned into ``_`` (``stream-thread-metrics`` /
``process-rate`` / ``thread-id`` is ``kafka_stream_thread_metrics_process_rate{thread_id=...}``,
the names Prometheus' JMX exporter gives Kafka's own metrics); a ``...-total`` metric is a
counter, every other one a gauge. The values are read when Prometheus scrapes (a snapshot
of the registry), by the prometheus client library's own server on its own thread.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from common.errors import ConfigError
from common.metrics import MetricsSnapshot

log = logging.getLogger(__name__)

_NOT_ALLOWED = re.compile(r"[^a-zA-Z0-9_]")


def prometheus_name(group: str, name: str) -> str:
    """The Prometheus name of metric ``name`` of ``group``."""
    return _NOT_ALLOWED.sub("_", f"kafka_{group}_{name}")


class SnapshotCollector:
    """A Prometheus collector of a metrics snapshot function."""

    def __init__(self, snapshot: Callable[[], MetricsSnapshot]):
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Any] = {}
        for name, metric in sorted(self.snapshot().items(), key=lambda kv: str(kv[0])):
            value = metric.value
            if not isinstance(value, int | float):
                continue  # a metric whose value is text: no Prometheus sample
            full = prometheus_name(name.group, name.name)
            labels = sorted(_NOT_ALLOWED.sub("_", k) for k in name.tags)
            key = f"{full}|{','.join(labels)}"
            family = families.get(key)
            if family is None:
                counter = name.name.endswith("-total")
                cls = CounterMetricFamily if counter else GaugeMetricFamily
                base = full[: -len("_total")] if counter else full
                family = families[key] = cls(base, name.description or name.name, labels=labels)
            values = [
                v for _, v in sorted((_NOT_ALLOWED.sub("_", k), v) for k, v in name.tag_items)
            ]
            family.add_metric(values, float(value))
        yield from families.values()


class MetricsServer:
    """Serves ``snapshot()`` at ``http://<host>:<port>/metrics`` (every interface).

    Raises:
        ConfigError: the port cannot be bound (naming ``metrics.port``).
    """

    def __init__(self, snapshot: Callable[[], MetricsSnapshot], port: int, addr: str = "0.0.0.0"):
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SnapshotCollector(snapshot))
        try:
            self._server, self._thread = start_http_server(port, addr, registry=self.registry)
        except OSError as exc:
            raise ConfigError(
                f"metrics.port: cannot serve metrics on port {port} ({exc.strerror or exc}); "
                "choose a free port, or 0 for none"
            ) from exc
        self.port = self._server.server_port
        log.info("metrics served at http://%s:%d/metrics", addr, self.port)

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
