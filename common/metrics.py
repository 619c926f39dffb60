"""Metrics as Kafka keeps them: named sensors of windowed and cumulative statistics.

A :class:`MetricName` is Kafka's: a name, a group and tags (``thread-id``, ``task-id``, ...);
a :class:`Metric` is a name and its value. A :class:`Sensor` takes recorded values (one at
a time, or a batch's values already summed up, which is how the executors' figures arrive)
and keeps the statistics its metrics read:

* ``avg``, ``max``, ``min``: over the recorded values of the last samples (Kafka's
  ``metrics.num.samples`` windows of ``metrics.sample.window.ms``); NaN when the window
  holds none, as in Kafka;
* ``rate`` (per second, of the values' sum) and ``count-rate`` (of how many values), over
  the same windows, measured as Kafka's ``Rate``: over at least ``num.samples - 1`` whole
  windows, so a young sensor does not overstate its rate;
* ``total`` (the sum of every value ever recorded) and ``count`` (how many).

Sensors and metrics have a recording level (``metrics.recording.level``: INFO, DEBUG,
TRACE). A sensor above the configured level is not created: its metrics do not exist and
recording into it costs a no-op call. :meth:`Metrics.snapshot` returns the values at one
moment as a :class:`MetricsSnapshot` (a mapping from name to metric, Kafka's ``metrics()``).
"""

from __future__ import annotations

import enum
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

#: The statistics a sensor's metric may read.
STATS = ("avg", "max", "min", "rate", "count-rate", "total", "count")


class RecordingLevel(enum.IntEnum):
    """Kafka's ``Sensor.RecordingLevel``: a sensor records when its level is at most the
    configured one."""

    INFO = 0
    DEBUG = 1
    TRACE = 2

    @classmethod
    def of(cls, name: str) -> RecordingLevel:
        """The level named ``name`` (case-insensitive)."""
        try:
            return cls[name.upper()]
        except KeyError:
            raise ValueError(
                f"metrics.recording.level: {name!r} is not INFO, DEBUG or TRACE"
            ) from None


@dataclass(frozen=True)
class MetricName:
    """Kafka's ``MetricName``: equal when name, group and tags are (not the description)."""

    name: str
    group: str
    tag_items: tuple[tuple[str, str], ...] = ()
    description: str = field(default="", compare=False)

    @classmethod
    def of(
        cls, name: str, group: str, tags: Mapping[str, str] | None = None, description: str = ""
    ) -> MetricName:
        """Build a name from a tag mapping (kept sorted)."""
        return cls(name, group, tuple(sorted((tags or {}).items())), description)

    @property
    def tags(self) -> dict[str, str]:
        """The tags as a dict."""
        return dict(self.tag_items)

    def __str__(self) -> str:
        tags = ",".join(f"{k}={v}" for k, v in self.tag_items)
        return f"{self.group}:{self.name}{{{tags}}}"


@dataclass(frozen=True)
class Metric:
    """A metric's value at the moment of a snapshot (Kafka's ``Metric``)."""

    metric_name: MetricName
    value: float

    def metric_value(self) -> float:
        """The value (Kafka's ``metricValue()``)."""
        return self.value

    @property
    def name(self) -> str:
        """The metric's name."""
        return self.metric_name.name

    @property
    def group(self) -> str:
        """The metric's group."""
        return self.metric_name.group

    @property
    def tags(self) -> dict[str, str]:
        """The metric's tags."""
        return self.metric_name.tags


class MetricsSnapshot(Mapping[MetricName, Metric]):
    """Kafka's ``metrics()`` at one moment: every metric by its name.

    ``value(name, group, **tags)`` reads one metric and ``total(...)`` sums those that match
    (tags are given with ``_`` for ``-``: ``thread_id="..."``).
    """

    def __init__(self, metrics: Mapping[MetricName, Metric]):
        self._metrics = dict(metrics)

    def __getitem__(self, key: MetricName) -> Metric:
        return self._metrics[key]

    def __iter__(self) -> Iterator[MetricName]:
        return iter(self._metrics)

    def __len__(self) -> int:
        return len(self._metrics)

    def select(
        self, name: str | None = None, group: str | None = None, **tags: str
    ) -> list[Metric]:
        """The metrics with ``name`` (any when None) in ``group`` carrying ``tags``."""
        wanted = {k.replace("_", "-"): str(v) for k, v in tags.items()}
        return [
            m
            for n, m in self._metrics.items()
            if (name is None or n.name == name)
            and (group is None or n.group == group)
            and all(dict(n.tag_items).get(k) == v for k, v in wanted.items())
        ]

    def value(self, name: str, group: str | None = None, **tags: str) -> float:
        """The value of the one metric that matches.

        Raises:
            KeyError: none or several match (the message lists what exists).
        """
        found = self.select(name, group, **tags)
        if len(found) != 1:
            raise KeyError(self._missing(name, group, tags, found))
        return found[0].value

    def total(self, name: str, group: str | None = None, **tags: str) -> float:
        """The sum of the metrics that match (NaN values are left out).

        Raises:
            KeyError: no metric has that name and group at all (a misspelt name).
        """
        found = self.select(name, group, **tags)
        if not found and not self.select(name, group):
            raise KeyError(self._missing(name, group, tags, found))
        return sum(m.value for m in found if not math.isnan(m.value))

    def by_name(self, group: str) -> dict[str, float]:
        """Each metric name of ``group`` with its values summed over the tags (over the
        threads, tasks, ...): meaningful for totals and rates."""
        out: dict[str, float] = {}
        for n, m in self._metrics.items():
            if n.group == group and not math.isnan(m.value):
                out[n.name] = out.get(n.name, 0.0) + m.value
        return out

    def _missing(
        self, name: str, group: str | None, tags: Mapping[str, str], found: list[Metric]
    ) -> str:
        if found:
            return f"{len(found)} metrics named {name!r} match {tags or 'no tags'}; name more tags"
        groups = sorted({n.group for n in self._metrics if n.name == name})
        if groups:
            return f"no metric {name!r} with group {group!r} and tags {tags}; groups: {groups}"
        return f"no metric named {name!r} (the recording level may leave it out)"


class _Samples:
    """The windowed samples of one sensor: ``[start ms, count, sum, max, min]`` each."""

    __slots__ = ("num", "samples", "window_ms")

    def __init__(self, window_ms: int, num: int):
        self.window_ms, self.num = window_ms, num
        self.samples: list[list[float]] = []

    def record(self, count: int, total: float, high: float, low: float, now: int) -> None:
        current = self.samples[-1] if self.samples else None
        if current is None or now - current[0] >= self.window_ms:
            current = [now, 0, 0.0, -math.inf, math.inf]
            self.samples.append(current)
            if len(self.samples) > self.num:
                del self.samples[0]
        current[1] += count
        current[2] += total
        current[3] = max(current[3], high)
        current[4] = min(current[4], low)

    def live(self, now: int) -> list[list[float]]:
        """The samples not older than the window (``num`` windows back)."""
        horizon = now - self.num * self.window_ms
        return [s for s in self.samples if s[0] > horizon]

    def elapsed_seconds(self, now: int) -> float:
        """Kafka's ``Rate.windowSize``: the time the samples cover, at least
        ``num - 1`` whole windows."""
        live = self.live(now)
        oldest = live[0][0] if live else now
        elapsed = now - oldest
        full = elapsed // self.window_ms
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return max(elapsed, 1) / 1000.0


class Sensor:
    """A named recorder whose values feed the statistics of its metrics."""

    def __init__(self, name: str, window_ms: int, num_samples: int, clock: Callable[[], int]):
        self.name = name
        self._clock = clock
        self._samples = _Samples(window_ms, num_samples)
        self._count = 0
        self._total = 0.0
        self.metrics: dict[MetricName, str] = {}
        self._lock = threading.Lock()

    def add(self, metric: MetricName, stat: str) -> Sensor:
        """Let ``metric`` read statistic ``stat`` (one of :data:`STATS`) of this sensor."""
        if stat not in STATS:
            raise ValueError(f"unknown statistic {stat!r} (one of {STATS})")
        self.metrics[metric] = stat
        return self

    def record(self, value: float = 1.0, now: int | None = None) -> None:
        """Record one value."""
        self.record_many(1, value, value, value, now)

    def record_many(
        self,
        count: int,
        total: float,
        high: float | None = None,
        low: float | None = None,
        now: int | None = None,
    ) -> None:
        """Record ``count`` values summing to ``total`` (their largest ``high``, smallest
        ``low``; by default their mean)."""
        if count <= 0 and not total:
            return
        mean = total / count if count else total
        when = self._clock() if now is None else now
        with self._lock:
            self._count += count
            self._total += total
            self._samples.record(
                count, total, mean if high is None else high, mean if low is None else low, when
            )

    def measure(self, stat: str, now: int) -> float:
        """The value of statistic ``stat`` now."""
        with self._lock:
            if stat == "total":
                return self._total
            if stat == "count":
                return float(self._count)
            live = self._samples.live(now)
            if stat == "rate":
                return sum(s[2] for s in live) / self._samples.elapsed_seconds(now)
            if stat == "count-rate":
                return sum(s[1] for s in live) / self._samples.elapsed_seconds(now)
            counted = [s for s in live if s[1]]
            if not counted:
                return math.nan
            if stat == "avg":
                return sum(s[2] for s in counted) / sum(s[1] for s in counted)
            if stat == "max":
                return max(s[3] for s in counted)
            return min(s[4] for s in counted)


class _NoSensor(Sensor):
    """A sensor above the recording level: records nothing."""

    def add(self, metric: MetricName, stat: str) -> Sensor:
        return self

    def record_many(
        self,
        count: int,
        total: float,
        high: float | None = None,
        low: float | None = None,
        now: int | None = None,
    ) -> None:
        return


class Metrics:
    """A registry of sensors and gauges (Kafka's ``Metrics``).

    Args:
        level: the recording level (``metrics.recording.level``).
        sample_window_ms: the window of one sample (``metrics.sample.window.ms``).
        num_samples: the samples kept (``metrics.num.samples``).
        clock: milliseconds now (the wall clock by default).
    """

    def __init__(
        self,
        level: str | RecordingLevel = RecordingLevel.INFO,
        sample_window_ms: int = 30000,
        num_samples: int = 2,
        clock: Callable[[], int] | None = None,
    ):
        self.level = level if isinstance(level, RecordingLevel) else RecordingLevel.of(level)
        self.sample_window_ms = sample_window_ms
        self.num_samples = num_samples
        self.clock: Callable[[], int] = clock or (lambda: time.time_ns() // 1_000_000)
        self._sensors: dict[str, Sensor] = {}
        self._gauges: dict[MetricName, Callable[[], Any]] = {}
        self._lock = threading.Lock()

    def should_record(self, level: RecordingLevel) -> bool:
        """Whether sensors of ``level`` record."""
        return level <= self.level

    def sensor(self, name: str, level: RecordingLevel = RecordingLevel.INFO) -> Sensor:
        """The sensor ``name``, created on first use (a no-op one above the level)."""
        with self._lock:
            found = self._sensors.get(name)
            if found is None:
                cls = Sensor if self.should_record(level) else _NoSensor
                found = cls(name, self.sample_window_ms, self.num_samples, self.clock)
                self._sensors[name] = found
            return found

    def gauge(
        self,
        metric: MetricName,
        read: Callable[[], Any],
        level: RecordingLevel = RecordingLevel.INFO,
    ) -> None:
        """Add (or replace) a metric whose value ``read()`` gives when asked."""
        if self.should_record(level):
            with self._lock:
                self._gauges[metric] = read

    def remove(self, match: Callable[[str], bool]) -> None:
        """Remove the sensors whose name ``match`` accepts, and their metrics."""
        with self._lock:
            for name in [n for n in self._sensors if match(n)]:
                del self._sensors[name]

    def remove_gauges(self, match: Callable[[MetricName], bool]) -> None:
        """Remove the gauges ``match`` accepts."""
        with self._lock:
            for name in [n for n in self._gauges if match(n)]:
                del self._gauges[name]

    def snapshot(self) -> MetricsSnapshot:
        """Every metric's value now."""
        now = self.clock()
        with self._lock:
            sensors = list(self._sensors.values())
            gauges = list(self._gauges.items())
        out: dict[MetricName, Metric] = {}
        for sensor in sensors:
            for name, stat in sensor.metrics.items():
                out[name] = Metric(name, sensor.measure(stat, now))
        for name, read in gauges:
            value = read()
            if value is not None:
                out[name] = Metric(name, value)
        return MetricsSnapshot(out)
