"""``streams-eos run FILE`` and ``streams-eos describe FILE``: run or print a topology file.

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
import sys
import time
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import Any

from runtime.app.topology_file import RawRecord, build_config, generated_records, load_topology_file
from topology.engine.processing import describe_processing


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``run`` and ``describe`` subcommands."""
    run = sub.add_parser(
        "run",
        parents=[common],
        help="run a topology file on Spark",
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
    run.set_defaults(handler=_run, needs_root=False)
    desc = sub.add_parser(
        "describe",
        parents=[common],
        help="print a topology file's topology",
        description=(
            "Print FILE's topology in Kafka's TopologyDescription format, then how its "
            "records run under FILE's CONFIG: which sources and nodes take batches "
            "(processing.engine=columnar) and which take one record at a time."
        ),
    )
    desc.add_argument("file", metavar="FILE")
    desc.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a configuration key (repeatable); wins over FILE's CONFIG",
    )
    desc.set_defaults(handler=_describe, needs_root=False)


def _run(args: argparse.Namespace) -> int:
    from runtime.app.app import StreamsApp
    from runtime.storage.producer import Producer
    from runtime.storage.topics import TopicAdmin

    module = load_topology_file(args.file)
    config = build_config(module, root=args.root, properties=args.properties, overrides=args.config)
    admin = TopicAdmin(config.topics_root)
    for topic, partitions in dict(getattr(module, "TOPICS", {}) or {}).items():
        admin.create(topic, int(partitions), if_not_exists=True)
    if args.generate:
        _generate(module, Producer(admin), args.generate)
    spark, sources = None, None
    build_sources = getattr(module, "build_sources", None)
    if callable(build_sources):  # DataFrames need their session first
        from runtime.spark.session import get_or_create_session

        spark = get_or_create_session(f"streams-{config.application_id}")
        sources = build_sources(spark)
    app = StreamsApp(module.build_topology(), config, spark=spark, sources=sources)
    started = time.perf_counter()
    if args.until_idle:
        app.run_until_idle()
    else:
        app.start()
        try:
            app.await_termination()
        except KeyboardInterrupt:
            app.close()
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


def _generate(module: ModuleType, producer: Any, n: int) -> None:
    for topic, records in generated_records(module, n).items():
        _send_all(producer, topic, records)
        producer.flush()  # one topic committed before the next: tables before streams
        print(f"produced {len(records)} records to {topic}", file=sys.stderr)


def _send_all(producer: Any, topic: str, records: Iterable[RawRecord]) -> None:
    for key, value, timestamp in records:
        producer.send(topic, key, value, timestamp=timestamp)


def _describe(args: argparse.Namespace) -> int:
    module = load_topology_file(args.file)
    topology = module.build_topology()
    print(topology.describe(), end="")
    config = build_config(module, root="memory://describe", properties=None, overrides=args.config)
    print(describe_processing(topology, config), end="")
    return 0


def main_for(file: str, argv: Sequence[str] | None = None) -> int:
    """Run FILE as ``streams-eos run FILE`` would (the ``spark-submit FILE`` entry)."""
    from streams.cli import main

    return main(["run", file, *(sys.argv[1:] if argv is None else argv)])
