"""The session-window job of ``benchmarks/vs_spark.py`` (``--job session``): the words of
``examples/wordcount.py``'s lines counted per session of each word.

The lines come in bursts of --session-lines lines, --step-ms apart, the bursts twice the
inactivity gap (--gap-ms) apart: every word seen in a burst has one session there,
``[first, last]`` of its times in the burst. Timestamps, gap and grace are even numbers of
milliseconds (below).

* **streams**: ``group_by(word).windowed_by(SessionWindows.of_inactivity_gap_and_grace(gap,
  grace)).count()`` (Kafka's ``KStreamSessionWindowAggregate``: a record joins the sessions
  of its key ending at or after ``t - gap`` and starting at or before ``t + gap``), every
  update written out as ``word@start@end`` (the merged sessions as tombstones).
* **spark**: ``withWatermark(ts, grace).groupBy(session_window(ts, gap + 1 ms), word)
  .count()`` in append mode. Spark's session of an event at ``t`` is ``[t, t + gap)``,
  sessions merging while they overlap: with ``gap + 1`` two events merge exactly when
  Kafka's do (at most ``gap`` apart), and Spark's session ends ``gap + 1`` after its last
  event. Append mode emits a session once the watermark (the largest timestamp minus
  grace) reaches its end; the last watermark's no-data batch emits what it closes.

Checked: this library's final sessions (the last update of each, tombstones removing
merged ones) are every session of the input with its count; Spark's emitted sessions are
exactly those whose end (``last + gap + 1``) is at most the last watermark, each once. All
timestamps are even (``BASE_MS`` + even steps), the gap and grace too, so no session ends
exactly at the last watermark (an odd distance from it), where the two could disagree.
Grace covers the disorder the repartition by word brings (a batch's time span), so this
library drops nothing; Spark's input is in timestamp order, so it drops nothing either.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from pyspark.sql import functions as fn
from vs_spark_kit import BASE_MS, chunk_of, file_stream, round_line, same_or_exit
from vs_spark_words import split_words

from runtime.storage.producer import Producer
from runtime.storage.topics import TopicAdmin
from streams.serdes import Serdes
from topology import Materialized, Produced, SessionWindows, StreamsBuilder, Topology


class SessionJob:
    """The session-window word count, shaped like an example module (``run_mode`` runs
    it)."""

    def __init__(self, wc: Any, args: Any) -> None:
        for name in ("step_ms", "gap_ms", "grace_ms"):
            if getattr(args, name) % 2:
                raise SystemExit(f"--job session: --{name.replace('_', '-')} must be even")
        self.CONFIG = wc.CONFIG
        self.wc = wc
        self.args = args
        self.inputs = [wc.INPUT]
        self.output = wc.OUTPUT
        self.unit = "lines"
        self.final_label = "closed sessions"

    def describe(self) -> str:
        """Name the job and its sessions."""
        a = self.args
        return (
            f"session-window word count (gap {a.gap_ms} ms, grace {a.grace_ms} ms; bursts of "
            f"{a.session_lines} lines {a.step_ms} ms apart, {2 * a.gap_ms} ms between bursts)"
        )

    def timestamp_of(self, i: int) -> int:
        """The timestamp of line ``i``: in burst ``i // session_lines``."""
        a = self.args
        burst, j = divmod(i, a.session_lines)
        period = (a.session_lines - 1) * a.step_ms + 2 * a.gap_ms
        return int(BASE_MS + burst * period + j * a.step_ms)

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
                self.wc.INPUT, key.encode(), line.encode(), timestamp=self.timestamp_of(i)
            )
            if (i + 1) % chunk == 0:
                producer.flush()
        producer.flush()

    def expected(self) -> Counter[str]:
        """Every session of the input, ``word@start@end`` -> its count."""
        gap = self.args.gap_ms
        open_: dict[str, list[int]] = {}  # word -> [start, end, count]
        sessions: Counter[str] = Counter()
        for i, _key, line in self.lines():
            ts = self.timestamp_of(i)
            for word in split_words(line):
                session = open_.get(word)
                if session is not None and ts - session[1] <= gap:
                    session[1] = ts
                    session[2] += 1
                    continue
                if session is not None:
                    sessions[f"{word}@{session[0]}@{session[1]}"] = session[2]
                open_[word] = [ts, ts, 1]
        for word, (start, end, n) in open_.items():
            sessions[f"{word}@{start}@{end}"] = n
        return sessions

    def closed(self, sessions: Counter[str]) -> Counter[str]:
        """The sessions Spark's last watermark closes: ending (``last + gap + 1``) at or
        before the largest timestamp minus grace."""
        watermark = self.timestamp_of(self.args.records - 1) - self.args.grace_ms
        spark_gap = self.args.gap_ms + 1
        return Counter(
            {k: n for k, n in sessions.items() if int(k.rsplit("@", 1)[1]) + spark_gap <= watermark}
        )

    def build_topology(self) -> Topology:
        """Count the words per session, each update out as ``word@start@end``."""
        a = self.args
        words = self.wc.WORD.findall
        b = StreamsBuilder()
        (
            b.stream(self.wc.INPUT)
            .flat_map_values(lambda line: words(line.lower()))
            .group_by(lambda _key, word: word)
            .windowed_by(SessionWindows.of_inactivity_gap_and_grace(a.gap_ms, a.grace_ms))
            .count(Materialized.as_("session-counts"))
            .to_stream()
            .map(lambda wk, n: (f"{wk.key}@{wk.window.start}@{wk.window.end}", n))
            .to(self.wc.OUTPUT, Produced.with_(Serdes.String(), Serdes.Long()))
        )
        return b.build()

    def spark_frame(self, spark: Any, dirs: list[str], files_per_trigger: int) -> tuple[Any, bool]:
        """``groupBy(session_window(ts, gap + 1 ms), word).count()`` with a watermark of
        grace, in append mode."""
        a = self.args
        lines = file_stream(spark, dirs[0], files_per_trigger)
        words = lines.select(
            fn.explode(fn.split(fn.lower(fn.col("value").cast("string")), r"\W+")).alias("word"),
            fn.timestamp_millis(fn.col("timestamp")).alias("ts"),
        ).where(fn.col("word") != "")
        sessions = (
            words.withWatermark("ts", f"{a.grace_ms} milliseconds")
            .groupBy(fn.session_window("ts", f"{a.gap_ms + 1} milliseconds"), "word")
            .count()
        )
        start = fn.unix_millis(fn.col("session_window.start"))
        end = fn.unix_millis(fn.col("session_window.end")) - (a.gap_ms + 1)
        frame = sessions.select(
            fn.concat_ws("@", "word", start.cast("string"), end.cast("string")).alias("session"),
            "count",
        )
        return frame, True

    @staticmethod
    def spark_counts(emitted: Any) -> Counter[str]:
        """Spark's emitted sessions (each once: a session emitted twice would show as
        more records than sessions)."""
        return Counter({r["session"]: r["count"] for r in emitted.collect()})

    def streams_counts(self, pairs: Iterable[tuple[bytes, Any]]) -> Counter[str]:
        """The last count of every session in this library's output, merged sessions
        (tombstones) removed."""
        longs, last = Serdes.Long(), dict[str, int]()
        for key, value in pairs:
            count = longs.deserialize(self.output, value)
            if count is None:
                last.pop(key.decode(), None)
            else:
                last[key.decode()] = count
        return Counter(last)

    def check(self, system: str, got: dict[str, Any], expected: Counter[str]) -> str:
        """This library: every session with its count; Spark: the closed sessions, each
        once."""
        if system == "spark":
            closed = self.closed(expected)
            same_or_exit(system, got["counts"], closed)
            if got["records"] != len(closed):
                raise SystemExit(f"spark: {got['records']:,} records for {len(closed):,} sessions")
            got["final"] = len(closed)
            return round_line(got, self.unit, f"sessions ok  closed sessions={len(closed):,}")
        same_or_exit(system, got["counts"], expected)
        got["final"] = len(self.closed(got["counts"]))
        return round_line(
            got, self.unit, f"sessions ok  sessions={len(expected):,} closed={got['final']:,}"
        )
