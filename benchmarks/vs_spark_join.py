"""The stream-stream outer join of ``benchmarks/vs_spark.py`` (``--job outer-join``).

Two topics of --records records between them, keyed alike (co-partitioned): orders of
one second, --events-per-second records a second on each side. Most left records have one
right partner of the same key 0 to 3 seconds later; the others, and some right records,
have none. A partner at most --join-ms away joins; one farther leaves both unmatched.

* **streams**: ``left.outer_join(right, joiner, JoinWindows.of_time_difference_and_grace(
  join, grace))`` (Kafka's ``KStreamKStreamJoin``: a match is emitted at once; an
  unmatched record waits in the shared outer store and goes out with a null partner once
  stream time passes its window plus grace).
* **spark**: the same full outer join in Structured Streaming: both sides
  ``withWatermark(ts, grace)``, ``key = key AND r.ts BETWEEN l.ts - join AND l.ts +
  join``, append mode (a match at once, an unmatched row once the watermark passes its
  window, in the no-data batch of the last watermark).

The final output is well defined for both: each side's records are in timestamp order
(both systems take them so: this library's task interleaves its two topics by timestamp,
Spark's watermark follows its batches), so no record is late for either and no record
goes out unmatched before its partner arrives; the last records of every partition, one
per side, are a sentinel far enough ahead of the rest (join + grace + a minute) to close
every other window in both systems, and are never emitted themselves. Both must emit
exactly the input's joined pairs and unmatched records (each once), computed from it.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from pyspark.sql import functions as fn
from vs_spark_kit import BASE_MS, chunk_of, file_stream, round_line, same_or_exit

from runtime.storage.partitioner import partition_for_key
from runtime.storage.producer import Producer
from runtime.storage.topics import TopicAdmin
from streams.serdes import Serdes
from topology import JoinWindows, Produced, StreamsBuilder, Topology

LEFT, RIGHT, OUTPUT = "join-left", "join-right", "joined-out"
#: A record: (timestamp, key, value).
Event = tuple[int, str, str]


def joined_value(left: str | None, right: str | None) -> str:
    """The joiner of both systems: ``left|right``, ``-`` for a missing side."""
    return f"{left or '-'}|{right or '-'}"


class OuterJoinJob:
    """The outer join, shaped like an example module (``run_mode`` runs it)."""

    def __init__(self, wc: Any, args: Any) -> None:
        self.CONFIG = wc.CONFIG  # string keys and values
        self.args = args
        self.inputs = [LEFT, RIGHT]
        self.output = OUTPUT
        self.unit = "records"
        self.final_label = "results"
        self._events: tuple[list[Event], list[Event]] | None = None

    def describe(self) -> str:
        """Name the job and its windows."""
        a = self.args
        return (
            f"stream-stream outer join (+-{a.join_ms} ms, grace {a.grace_ms} ms, "
            f"{a.events_per_second:,} records a second a side)"
        )

    def events(self) -> tuple[list[Event], list[Event]]:
        """Both sides' records, each in timestamp order (then the sentinels)."""
        if self._events is None:
            self._events = self._generate()
        return self._events

    def _generate(self) -> tuple[list[Event], list[Event]]:
        a = self.args
        rng = random.Random(7)
        left: list[Event] = []
        right: list[Event] = []
        n = a.records // 2
        for i in range(n):
            ts = BASE_MS + (i // a.events_per_second) * 1000
            draw = rng.random()
            if draw < 0.15:  # a right record of its own
                right.append((ts, f"b{i}", f"R{i}"))
                continue
            left.append((ts, f"k{i}", f"L{i}"))
            if draw < 0.85:  # a partner 0 to 3 s later
                right.append((ts + 1000 * rng.randrange(4), f"k{i}", f"R{i}"))
        right.sort(key=lambda e: e[0])  # stable: the keys' order within a second
        last = max(left[-1][0], right[-1][0])
        sentinel = last + a.join_ms + a.grace_ms + 60_000
        for side, records in (("l", left), ("r", right)):
            for p in range(a.partitions):
                key = next(
                    k
                    for k in (f"end-{side}-{p}-{j}" for j in range(10_000))
                    if partition_for_key(k.encode(), a.partitions) == p
                )
                records.append((sentinel, key, "end"))
        return left, right

    def produce(self, admin: TopicAdmin) -> None:
        """Write both sides, half a chunk of each at a time (a file per partition each)."""
        producer = Producer(admin)
        left, right = self.events()
        step = max(1, chunk_of(self.args) // 2)
        for start in range(0, max(len(left), len(right)), step):
            for topic, records in ((LEFT, left), (RIGHT, right)):
                for ts, key, value in records[start : start + step]:
                    producer.send(topic, key.encode(), value.encode(), timestamp=ts)
            producer.flush()

    def expected(self) -> Counter[str]:
        """Every joined pair and unmatched record of the input, ``key|left|right`` ->
        how many times (sentinels excluded: neither system ever closes their windows)."""
        x = self.args.join_ms
        left, right = self.events()
        rights: dict[str, list[Event]] = defaultdict(list)
        for event in right:
            rights[event[1]].append(event)
        out: Counter[str] = Counter()
        matched: set[tuple[int, str, str]] = set()
        for ts, key, value in left:
            if key.startswith("end-"):
                continue
            partners = [r for r in rights.get(key, ()) if ts - x <= r[0] <= ts + x]
            for partner in partners:
                out[f"{key}|{joined_value(value, partner[2])}"] += 1
                matched.add(partner)
            if not partners:
                out[f"{key}|{joined_value(value, None)}"] += 1
        for event in right:
            if event not in matched and not event[1].startswith("end-"):
                out[f"{event[1]}|{joined_value(None, event[2])}"] += 1
        return out

    def build_topology(self) -> Topology:
        """``left.outer_join(right, joiner, JoinWindows...)`` to the output topic."""
        a = self.args
        b = StreamsBuilder()
        left, right = b.stream(LEFT), b.stream(RIGHT)
        windows = JoinWindows.of_time_difference_and_grace(a.join_ms, a.grace_ms)
        # as joined_value, inline: a function of this module would be pickled by reference,
        # and Spark's workers cannot import it
        joiner = lambda lv, rv: f"{lv or '-'}|{rv or '-'}"  # noqa: E731
        left.outer_join(right, joiner, windows).to(
            OUTPUT, Produced.with_(Serdes.String(), Serdes.String())
        )
        return b.build()

    def spark_frame(self, spark: Any, dirs: list[str], files_per_trigger: int) -> tuple[Any, bool]:
        """Spark's full outer stream-stream join with watermarks and a time range."""
        a = self.args
        delay = f"{a.grace_ms} milliseconds"
        sides = []
        for side, path in zip("lr", dirs, strict=True):
            frame = file_stream(spark, path, files_per_trigger).select(
                fn.col("key").cast("string").alias(f"{side}key"),
                fn.col("value").cast("string").alias(f"{side}value"),
                fn.timestamp_millis(fn.col("timestamp")).alias(f"{side}ts"),
            )
            sides.append(frame.withWatermark(f"{side}ts", delay))
        within = fn.expr(
            f"rts >= lts - interval {a.join_ms} milliseconds AND "
            f"rts <= lts + interval {a.join_ms} milliseconds"
        )
        joined = sides[0].join(sides[1], (fn.col("lkey") == fn.col("rkey")) & within, "full_outer")
        result = joined.select(
            fn.concat_ws(
                "|",
                fn.coalesce("lkey", "rkey"),
                fn.coalesce("lvalue", fn.lit("-")),
                fn.coalesce("rvalue", fn.lit("-")),
            ).alias("result")
        )
        return result, True

    @staticmethod
    def spark_counts(emitted: Any) -> Counter[str]:
        """Spark's output rows, each with how many times it was emitted."""
        rows = emitted.groupBy("result").count().collect()
        return Counter({r["result"]: r["count"] for r in rows})

    @staticmethod
    def streams_counts(pairs: Iterable[tuple[bytes, Any]]) -> Counter[str]:
        """This library's output records, each with how many times it was emitted."""
        return Counter(_results(pairs))

    def check(self, system: str, got: dict[str, Any], expected: Counter[str]) -> str:
        """Both: exactly the input's joined pairs and unmatched records, each once."""
        same_or_exit(system, got["counts"], expected)
        got["final"] = sum(expected.values())
        joined = sum(n for k, n in expected.items() if "-" not in k.split("|")[1:])
        return round_line(
            got, self.unit, f"results ok ({joined:,} joined, {got['final'] - joined:,} unmatched)"
        )


def _results(pairs: Iterable[tuple[bytes, Any]]) -> Iterator[str]:
    for key, value in pairs:
        yield f"{key.decode()}|{value.decode()}"
