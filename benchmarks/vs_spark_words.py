"""The word-count jobs of ``benchmarks/vs_spark.py``: ``wordcount``, ``windowed`` and
``emit-final`` (see that module's docstring), over ``examples/wordcount.py``'s lines."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from pyspark.sql import functions as fn
from vs_spark_kit import BASE_MS, chunk_of, file_stream, round_line, same_or_exit

from runtime.storage.producer import Producer
from runtime.storage.topics import TopicAdmin
from streams.serdes import Serdes
from topology import EmitStrategy, Materialized, Produced, StreamsBuilder, TimeWindows, Topology
from topology.api.emit import EMIT_INTERVAL_KEY


def timestamp_of(i: int, args: Any) -> int:
    """The timestamp of line ``i``: 1 for the word count, else ``BASE_MS + i * step_ms``."""
    return 1 if args.job == "wordcount" else BASE_MS + i * args.step_ms


def windows_of(ts: int, args: Any) -> list[int]:
    """The start of every hopping window holding ``ts``."""
    first = max(0, (ts - args.window_ms) // args.advance_ms + 1) * args.advance_ms
    return list(range(first, ts + 1, args.advance_ms))


def split_words(line: str) -> list[str]:
    """The words of a line as both systems split it (lower case, on non-word runs)."""
    return [w for w in re.split(r"\W+", line.lower()) if w]


class WordsJob:
    """The word count, per hopping window with ``windowed``, each window once when it
    closes with ``emit-final``; shaped like an example module (``run_mode`` runs it)."""

    def __init__(self, wc: Any, args: Any) -> None:
        self.final = args.job == "emit-final"
        # emit-final: look for closed windows after every record (see vs_spark's doc)
        self.CONFIG = {**wc.CONFIG, EMIT_INTERVAL_KEY: 0} if self.final else wc.CONFIG
        self.wc = wc
        self.args = args
        self.inputs = [wc.INPUT]
        self.output = wc.OUTPUT
        self.unit = "lines"

    def describe(self) -> str:
        """Name the job and its windows."""
        args = self.args
        if args.job == "wordcount":
            return "word count"
        job = (
            f"windowed word count ({args.window_ms} ms windows advancing by "
            f"{args.advance_ms} ms, grace {args.grace_ms} ms, lines {args.step_ms} ms apart)"
        )
        if self.final:
            job += ", final windows only (emit on window close / Spark's append mode)"
        return job

    def lines(self) -> Iterable[tuple[int, str, str]]:
        """Every input line ``(index, key, line)``, :func:`chunk_of` at a time."""
        chunk, records = chunk_of(self.args), self.args.records
        for start in range(0, records, chunk):
            lines = self.wc.generate(min(chunk, records - start), seed=start)
            for i, (key, line) in enumerate(lines, start):
                yield i, key, line

    def produce(self, admin: TopicAdmin) -> None:
        """Write the input lines, timestamped, one flush per chunk."""
        producer = Producer(admin)
        chunk = chunk_of(self.args)
        for i, key, line in self.lines():
            producer.send(
                self.wc.INPUT, key.encode(), line.encode(), timestamp=timestamp_of(i, self.args)
            )
            if (i + 1) % chunk == 0:
                producer.flush()
        producer.flush()

    def expected(self) -> Counter[str]:
        """The final count of every word (per window: ``word@start``) of the input
        (emit-final: only the windows closed at the end, which are emitted)."""
        args = self.args
        counts: Counter[str] = Counter()
        for i, _key, line in self.lines():
            words = split_words(line)
            if args.job == "wordcount":
                counts.update(words)
                continue
            for window in windows_of(timestamp_of(i, args), args):
                counts.update(f"{w}@{window}" for w in words)
        if self.final:
            close = timestamp_of(args.records - 1, args) - args.grace_ms
            return Counter({k: n for k, n in counts.items() if self._window_end(k) <= close})
        return counts

    def _window_end(self, key: str) -> int:
        return int(key.rsplit("@", 1)[1]) + int(self.args.window_ms)

    def build_topology(self) -> Topology:
        """The word count (``examples/wordcount.py``'s), or its windowed count."""
        if self.args.job == "wordcount":
            return self.wc.build_topology()  # type: ignore[no-any-return]
        args = self.args
        windows = TimeWindows.of_size_and_grace(args.window_ms, args.grace_ms).advance_by(
            args.advance_ms
        )
        words = self.wc.WORD.findall
        b = StreamsBuilder()
        windowed = (
            b.stream(self.wc.INPUT)
            .flat_map_values(lambda line: words(line.lower()))
            .group_by(lambda _key, word: word)
            .windowed_by(windows)
        )
        if self.final:
            windowed = windowed.emit_strategy(EmitStrategy.on_window_close())
        (
            windowed.count(Materialized.as_("windowed-counts"))
            .to_stream()
            .map(lambda wk, n: (f"{wk.key}@{wk.window.start}", n))
            .to(self.wc.OUTPUT, Produced.with_(Serdes.String(), Serdes.Long()))
        )
        return b.build()

    def spark_frame(self, spark: Any, dirs: list[str], files_per_trigger: int) -> tuple[Any, bool]:
        """``explode(split(lower(value), '\\W+'))``, ``groupBy(word).count()`` (windowed:
        ``withWatermark`` = grace, ``groupBy(window(...), word)``); append mode for
        emit-final, else update mode."""
        args = self.args
        lines = file_stream(spark, dirs[0], files_per_trigger)
        words = lines.select(
            fn.explode(fn.split(fn.lower(fn.col("value").cast("string")), r"\W+")).alias("word"),
            fn.timestamp_millis(fn.col("timestamp")).alias("ts"),
        ).where(fn.col("word") != "")
        if args.job == "wordcount":
            return words.groupBy("word").count(), False
        windowed = (
            words.withWatermark("ts", f"{args.grace_ms} milliseconds")
            .groupBy(
                fn.window(
                    "ts", f"{args.window_ms} milliseconds", f"{args.advance_ms} milliseconds"
                ),
                "word",
            )
            .count()
        )
        start_ms = (fn.unix_millis(fn.col("window.start"))).cast("string")
        counts = windowed.select(
            fn.concat(fn.col("word"), fn.lit("@"), start_ms).alias("word"), "count"
        )
        return counts, self.final

    @staticmethod
    def spark_counts(emitted: Any) -> Counter[str]:
        """Each word's (or window's) last count: the largest Spark emitted."""
        rows = emitted.groupBy("word").agg(fn.max("count").alias("n")).collect()
        return Counter({r["word"]: r["n"] for r in rows})

    def streams_counts(self, pairs: Iterable[tuple[bytes, Any]]) -> Counter[str]:
        """The last count of every word (or window) in this library's output."""
        longs, last = Serdes.Long(), {}
        for key, value in pairs:
            count = longs.deserialize(self.output, value)
            if count is not None:
                last[key.decode()] = count
        return Counter(last)

    def check(self, system: str, got: dict[str, Any], expected: Counter[str]) -> str:
        """Check a round's final counts against the input's (emit-final: and that each
        window went out once); describe the round."""
        same_or_exit(system, got["counts"], expected)
        note = "counts ok"
        if self.final:
            if got["records"] != len(expected):
                raise SystemExit(
                    f"{system}: {got['records']:,} records for {len(expected):,} windows"
                )
            note += f"  final windows={got['records']:,}"
        got["final"] = got["records"]
        return round_line(got, self.unit, note)

    @property
    def final_label(self) -> str | None:
        """What the report counts as emitted once (None: nothing)."""
        return "final windows" if self.final else None
