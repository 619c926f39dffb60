"""The DSL inside your own Spark job: a stream of clicks (JSON files, or Spark's ``rate``
source), enriched with a table of users, counted per country in 10-second windows, and
upserted into a Delta table analysts query::

    spark-submit examples/clicks_job.py --root /tmp/clicks --input /tmp/clicks-in --generate 2000
    spark-submit examples/clicks_job.py --root /tmp/clicks --rate 200 --seconds 30

``--generate N`` first writes N clicks as JSON files into ``--input`` (``key``: the user,
``value``: the page, ``timestamp``: epoch milliseconds), ten files of them; the job then
reads every file there (Spark's file source) until it is idle. With ``--rate R`` it reads
R rows a second from Spark's ``rate`` source for ``--seconds`` seconds instead.

The table of users (``users``: user -> country) is a topic like any other: the job fills
it before it starts. Each click is joined with its user's country (a KTable join), the
clicks per country are counted in 10-second tumbling windows (a click up to five minutes
late still counts), and the counts are upserted
into the Delta table ``<root>/tables/clicks-per-country`` (``key`` = country,
``window_start``, ``window_end``, ``value`` = clicks, ``timestamp``): one row per country
and window, read by Spark, pandas, polars or DuckDB as an ordinary Delta table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import time

from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as fn

from runtime.spark.session import get_or_create_session
from runtime.storage.producer import Producer
from runtime.storage.topics import TopicAdmin
from streams import Consumed, Materialized, Serdes, StreamsApp, StreamsBuilder, TimeWindows
from topology.graph.topology import Topology

CLICKS = "clicks"
USERS = "users"
TABLE = "clicks-per-country"
WINDOW = datetime.timedelta(seconds=10)
#: How late a click may come and still count: the repartition by country interleaves the
#: clicks of several tasks, so a country's clicks arrive a little out of order.
GRACE = datetime.timedelta(minutes=5)
COUNTRIES = ["de", "fr", "jp", "br", "us"]
USER_COUNT = 50
PAGES = ["/", "/search", "/item", "/cart", "/checkout"]
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z

CONFIG = {
    "application.id": "clicks-job",
    "processing.guarantee": "exactly_once_v2",
    "default.key.serde": "string",
    "default.value.serde": "string",
    "num.partitions": 2,
    "commit.interval.ms": 200,
}


def country_of_user(user: str) -> str:
    """Where a user lives (the users table's value)."""
    return COUNTRIES[int(user.removeprefix("user-")) % len(COUNTRIES)]


def build_topology() -> Topology:
    """Clicks joined with their user's country, counted per country and window."""
    s = Serdes.String()
    b = StreamsBuilder()
    users = b.table(USERS, Consumed.with_(s, s), Materialized.as_("users"))
    (
        b.stream(CLICKS, Consumed.with_(s, s))
        .join(users, lambda _page, country: country)  # the click's value: its country
        .group_by(lambda _user, country: country)
        .windowed_by(TimeWindows.of_size_and_grace(WINDOW, GRACE))
        .count(Materialized.as_("clicks-per-country"))
        .to_delta(TABLE)  # upsert: one row per (country, window)
    )
    return b.build()


def write_clicks(n: int, directory: str) -> list[tuple[str, str, int]]:
    """Write ``n`` clicks as ten JSON files into ``directory``; return them."""
    rnd = random.Random(7)
    clicks = [
        (f"user-{rnd.randrange(USER_COUNT)}", rnd.choice(PAGES), START_MS + i * 50)
        for i in range(n)
    ]
    os.makedirs(directory, exist_ok=True)
    per_file = max(1, -(-n // 10))
    for f, at in enumerate(range(0, n, per_file)):
        rows = [{"key": k, "value": v, "timestamp": t} for k, v, t in clicks[at : at + per_file]]
        tmp = os.path.join(directory, f".clicks-{f:03d}.tmp")
        with open(tmp, "w") as out:
            out.writelines(json.dumps(r) + "\n" for r in rows)
        os.replace(tmp, os.path.join(directory, f"clicks-{f:03d}.json"))  # whole files only
    return clicks


def reference(clicks: list[tuple[str, str, int]]) -> dict[tuple[str, int], int]:
    """The counts the table must hold: (country, window start ms) -> clicks."""
    size = int(WINDOW.total_seconds() * 1000)
    out: dict[tuple[str, int], int] = {}
    for user, _page, ts in clicks:
        key = (country_of_user(user), ts - ts % size)
        out[key] = out.get(key, 0) + 1
    return out


def file_stream(spark: SparkSession, directory: str) -> DataFrame:
    """The clicks in ``directory``'s JSON files (Spark's file source, two files a batch)."""
    return (
        spark.readStream.schema("key string, value string, timestamp long")
        .option("maxFilesPerTrigger", 2)
        .json(directory)
    )


def rate_stream(spark: SparkSession, rows_per_second: int) -> DataFrame:
    """Clicks made up from Spark's ``rate`` source (``timestamp``, ``value``)."""
    rate = spark.readStream.format("rate").option("rowsPerSecond", rows_per_second).load()
    return rate.select(
        fn.concat(fn.lit("user-"), (fn.col("value") % USER_COUNT).cast("string")).alias("key"),
        fn.element_at(
            fn.array(*map(fn.lit, PAGES)), (fn.col("value") % len(PAGES) + 1).cast("int")
        ).alias("value"),
        fn.col("timestamp"),
    )


def fill_users(root: str) -> None:
    """Create the topics and write the users table (once)."""
    admin = TopicAdmin(root)
    if admin.exists(USERS):
        return
    admin.create(USERS, 2)
    with Producer(admin) as producer:
        for i in range(USER_COUNT):
            user = f"user-{i}"
            producer.send(USERS, user.encode(), country_of_user(user).encode(), timestamp=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="topics.root: topics, tables, logs")
    parser.add_argument("--input", help="a directory of JSON click files (the file source)")
    parser.add_argument("--generate", type=int, default=0, help="write N clicks to --input")
    parser.add_argument("--rate", type=int, default=0, help="rows a second from 'rate'")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long --rate runs")
    args = parser.parse_args()
    if bool(args.input) == bool(args.rate):
        parser.error("give either --input DIR or --rate R")
    spark = get_or_create_session("clicks-job")
    fill_users(args.root)
    config = {
        **CONFIG,
        "topics.root": args.root,
        "state.dir": os.path.join(args.root, "_state"),
    }
    if args.input:
        clicks = write_clicks(args.generate, args.input) if args.generate else None
        app = StreamsApp(
            build_topology(), config, spark=spark, sources={CLICKS: file_stream(spark, args.input)}
        )
        app.run_until_idle()  # every file present at the start, and what that produces
        if clicks is not None:
            check(args.root, clicks)
    else:
        app = StreamsApp(
            build_topology(), config, spark=spark, sources={CLICKS: rate_stream(spark, args.rate)}
        )
        app.start()
        time.sleep(args.seconds)
        app.stop_sources()  # no more clicks: process what came, then stop
        app.run_until_idle()
    show(spark, args.root)


def table_rows(root: str) -> dict[tuple[str, int], int]:
    """The Delta table's rows: (country, window start ms) -> clicks."""
    rows = DeltaTable(os.path.join(root, "tables", TABLE)).to_pyarrow_table().to_pylist()
    return {(r["key"], int(r["window_start"].timestamp() * 1000)): r["value"] for r in rows}


def check(root: str, clicks: list[tuple[str, str, int]]) -> None:
    """Compare the table with the counts computed from the clicks themselves."""
    got, want = table_rows(root), reference(clicks)
    verdict = "equal to" if got == want else "DIFFERENT FROM"
    print(f"clicks-job: {len(got)} rows (country, window), {verdict} the reference")
    if got != want:
        raise SystemExit(1)


def show(spark: SparkSession, root: str) -> None:
    """Print the busiest windows, read back as an ordinary Delta table (pandas here)."""
    frame = DeltaTable(os.path.join(root, "tables", TABLE)).to_pandas()
    top = frame.sort_values(["value", "window_start"], ascending=[False, True]).head(5)
    print(top[["key", "window_start", "window_end", "value"]].to_string(index=False))


if __name__ == "__main__":
    main()
