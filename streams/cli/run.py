"""``streams-eos run FILE``: run a topology file on Spark.

FILE is a Python file that defines ``build_topology()`` and may define:

* ``CONFIG``: a mapping of dotted configuration keys (``--properties`` and ``--config``
  override it, in that order);
* ``TOPICS``: ``{topic: partitions}`` created when missing (inputs and outputs);
* ``INPUT`` and ``generate(n)``: sample input produced before the run with ``--generate
  N``. ``generate(n)`` returns ``(key, value)`` or ``(key, value, timestamp)`` records for
  the topic ``INPUT``, or, for several input topics, a mapping ``{topic: records}``
  produced (and committed) topic by topic in its order. Keys and values may be ``str``
  (UTF-8), ``bytes``, ``None``, or ``dict``/``list`` (written as JSON); a missing
  timestamp is the time of sending (see :func:`generated_records`);
* ``build_sources(spark)``: ``{topic: streaming DataFrame}``, the DataFrames the
  topology reads instead of those topics (``StreamsApp(..., sources=...)``).

The same FILE runs under ``spark-submit FILE`` when it ends with
``if __name__ == "__main__": streams.cli.run.main_for(__file__)``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from common.config import StreamsConfig
from common.errors import ConfigError, StreamsError, StreamsProcessingError
from runtime.app.app import StreamsApp
from runtime.app.topology_file import (
    RawRecord,
    build_config,
    build_topology_of,
    generated_records,
    load_topology_file,
)
from runtime.spark.session import get_or_create_session
from runtime.storage.producer import Producer
from runtime.storage.topics import TopicAdmin
from streams.cli import COMMANDS, main
from streams.cli.progress import BatchLines, ProgressBar, RestoreWatch, log_to_file
from topology.graph.topology import Topology

#: The log file of a run, under ``state.dir/<application.id>/logs/``.
LOG_NAME = "streams-eos.log"


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``run`` subcommand."""
    run = sub.add_parser(
        "run",
        parents=[common],
        help=COMMANDS["run"][1],
        description="Run FILE's build_topology() as a streams application on Spark.",
    )
    run.add_argument("file", metavar="FILE", help="a Python file defining build_topology()")
    run.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a configuration key (repeatable); wins over FILE's CONFIG and --properties",
    )
    run.add_argument("--properties", metavar="F", help="a .properties or .yaml config file")
    run.add_argument(
        "--until-idle",
        action="store_true",
        help="stop cleanly once every input is consumed and committed",
    )
    run.add_argument(
        "--generate",
        type=int,
        metavar="N",
        help="first produce FILE's generate(N) to its input topic(s)",
    )
    run.add_argument(
        "--progress-interval",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="a progress line per SECONDS instead of per batch",
    )
    run.add_argument("--no-progress", action="store_true", help="no progress lines")
    run.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting of the session the run builds (repeatable), e.g. "
        "spark.ui.enabled=true; under spark-submit, its --conf wins",
    )
    run.add_argument(
        "--from-savepoint",
        metavar="N",
        help="start from savepoint N of the application: rewound to it, or with "
        "--application-id a new application forked from it",
    )
    run.add_argument(
        "--application-id",
        metavar="ID",
        help="run under this application.id (with --from-savepoint: a fork of FILE's "
        "application from that savepoint, with its own internal topics and state)",
    )
    run.set_defaults(handler=_run, needs_root=False, creates_root=True)


def _run(args: argparse.Namespace) -> int:
    module = load_topology_file(args.file)
    config = build_config(module, root=args.root, properties=args.properties, overrides=args.config)
    owner = config.application_id
    if args.application_id:
        overrides = [*args.config, f"application.id={args.application_id}"]
        config = build_config(
            module, root=args.root, properties=args.properties, overrides=overrides
        )
    args.savepoint_source = args.from_savepoint
    if args.from_savepoint and owner != config.application_id:
        args.savepoint_source = f"{owner}/{args.from_savepoint}"
    topology = build_topology_of(module, args.file)
    log_path = None
    if not args.verbose:
        log_path = os.path.join(config.state_dir, config.application_id, "logs", LOG_NAME)
        try:
            log_to_file(log_path)
        except OSError as exc:
            raise ConfigError(
                f"state.dir: cannot write the log file {log_path} ({exc.strerror}); choose a "
                "writable directory (--config state.dir=PATH)"
            ) from exc
        print(f"log: {log_path} (--verbose: logs on the terminal)", file=sys.stderr)
    try:
        return _run_app(args, module, config, topology)
    except (KeyboardInterrupt, ConfigError):
        raise
    except Exception as exc:
        line = one_line(exc)
        print(f"error: {line}", file=sys.stderr)  # first: before anything else is printed
        if log_path is not None:
            print(f"details (tracebacks): {log_path}", file=sys.stderr)
        raise RunFailedError(line) from exc


class RunFailedError(StreamsError):
    """The application stopped with an error (its one line; the details are logged)."""


def one_line(exc: BaseException) -> str:
    """The first line of an error, after its type (Kafka's names: ``TaskMigratedError:
    ...``) unless the type says nothing the line does not (a processing or configuration
    error, whose line names the processor or the key)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if type(exc) is StreamsError or isinstance(exc, ConfigError | StreamsProcessingError):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _run_app(
    args: argparse.Namespace, module: ModuleType, config: StreamsConfig, topology: Topology
) -> int:
    admin = TopicAdmin(config.topics_root)
    for topic, partitions in dict(getattr(module, "TOPICS", {}) or {}).items():
        admin.create(topic, int(partitions), if_not_exists=True)
    if args.generate:
        _generate(module, Producer(admin), args.generate)
    spark, sources = None, None
    build_sources = getattr(module, "build_sources", None)
    spark_conf = _spark_conf(args.spark_conf)
    if callable(build_sources) or spark_conf:  # the session first: DataFrames, settings
        spark = get_or_create_session(f"streams-{config.application_id}", conf=spark_conf)
        if spark_conf.get("spark.ui.enabled", "").lower() == "true":
            url = spark.sparkContext.uiWebUrl
            print(f"Spark UI: {url} (Structured Streaming tab)", file=sys.stderr)
    if callable(build_sources):
        sources = build_sources(spark)
    app = StreamsApp(
        topology, config, spark=spark, sources=sources, from_savepoint=args.savepoint_source
    )
    lines = None
    if not args.no_progress:
        lines = BatchLines(args.progress_interval)
        app.add_progress_listener(lines)
    watch = None
    if not args.no_progress:
        watch = RestoreWatch(config.state_dir, config.application_id)
        watch.start()
    started = time.perf_counter()
    try:
        _run_until_stopped(app, args)
    finally:
        if watch is not None:
            watch.stop()
    if lines is not None:
        lines.flush()
    thread = app.thread
    if thread is not None:
        summary: dict[str, Any] = {
            "application.id": config.application_id,
            "processing.guarantee": config.processing_guarantee,
            "master": app.spark.sparkContext.master,
            "batches": thread.batches,
            "seconds": round(time.perf_counter() - started, 2),
        }
        executors: dict[str, list[str]] = {}
        for each in app.threads:
            for executor, tasks in each.placement.by_executor().items():
                executors.setdefault(executor, []).extend(tasks)
        if executors:  # on a cluster: where the tasks live
            summary["executors"] = executors
        print(json.dumps(summary), file=sys.stderr)
    master = str(app.spark.sparkContext.master)
    if not master.startswith("local["):
        # a cluster's executors are released before the driver exits, not lost with it
        app.spark.stop()
    return 0


def _run_until_stopped(app: Any, args: argparse.Namespace) -> None:
    if args.until_idle:
        app.run_until_idle()
        return
    app.start()
    try:
        app.await_termination()
    except KeyboardInterrupt:
        app.close()


def _spark_conf(items: Sequence[str]) -> dict[str, str]:
    """``--spark-conf KEY=VALUE`` pairs."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip().startswith("spark."):
            raise ConfigError(
                f"--spark-conf {item!r}: expected KEY=VALUE with a Spark key "
                "(spark.ui.enabled=true)"
            )
        out[key.strip()] = value.strip()
    return out


def _generate(module: ModuleType, producer: Any, n: int) -> None:
    for topic, records in generated_records(module, n).items():
        _send_all(producer, topic, records)
        producer.flush()  # one topic committed before the next: tables before streams
        print(f"produced {len(records)} records to {topic}", file=sys.stderr)


def _send_all(producer: Any, topic: str, records: Sequence[RawRecord]) -> None:
    with ProgressBar(f"producing to {topic}", len(records)) as bar:
        for i, (key, value, timestamp) in enumerate(records, 1):
            producer.send(topic, key, value, timestamp=timestamp)
            if i % 1000 == 0:
                bar.update(i - bar.done)
        producer.flush()  # the records are in the topic when the bar is full
        bar.update(len(records) - bar.done)


def main_for(file: str, argv: Sequence[str] | None = None) -> int:
    """Run FILE as ``streams-eos run FILE`` would (the ``spark-submit FILE`` entry)."""
    return main(["run", file, *(sys.argv[1:] if argv is None else argv)])
