"""``streams-eos run FILE`` and ``streams-eos describe FILE``: run or print a topology file.

FILE is a Python file that defines ``build_topology()`` and may define:

* ``CONFIG``: a mapping of dotted configuration keys (``--properties`` and ``--config``
  override it, in that order);
* ``TOPICS``: ``{topic: partitions}`` created when missing (inputs and outputs);
* ``INPUT`` and ``generate(n)``: a topic and a generator of ``(key, value)`` string pairs,
  produced before the run with ``--generate N``.

The same FILE runs under ``spark-submit FILE`` when it ends with
``if __name__ == "__main__": streams.cli.run.main_for(__file__)``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from streams.config import StreamsConfig
from streams.errors import ConfigError


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
        help="first produce N records from FILE's generate(n) to its INPUT topic",
    )
    run.set_defaults(handler=_run, needs_root=False)
    desc = sub.add_parser(
        "describe",
        parents=[common],
        help="print a topology file's topology",
        description="Print FILE's topology in Kafka's TopologyDescription format.",
    )
    desc.add_argument("file", metavar="FILE")
    desc.set_defaults(handler=_describe, needs_root=False)


def load_topology_file(path: str) -> ModuleType:
    """Import FILE as a module whose functions Spark ships by value to its workers.

    Raises:
        ConfigError: FILE does not exist or defines no ``build_topology()``.
    """
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"topology file {path} does not exist")
    name = f"streams_topology_{file.stem}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ConfigError(f"topology file {path} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    if not callable(getattr(module, "build_topology", None)):
        raise ConfigError(
            f"topology file {path} defines no build_topology() function; add one that "
            "returns StreamsBuilder().build()"
        )
    try:
        import cloudpickle  # shipped with pyspark

        cloudpickle.register_pickle_by_value(module)
    except ImportError:  # pragma: no cover - pyspark brings it
        pass
    return module


def build_config(
    module: ModuleType,
    *,
    root: str | None,
    properties: str | None,
    overrides: Sequence[str],
) -> StreamsConfig:
    """Merge FILE's CONFIG, the properties file, ``--config`` pairs and ``--root``."""
    base: dict[str, object] = dict(getattr(module, "CONFIG", {}) or {})
    extra: dict[str, object] = {}
    for pair in overrides:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--config {pair!r}: expected KEY=VALUE")
        extra[key.strip()] = value.strip()
    if root:
        extra.setdefault("topics.root", root)
    sources: list[Any] = [base]
    if properties:
        sources.append(properties)
    return StreamsConfig.load(*sources, overrides=extra)


def _run(args: argparse.Namespace) -> int:
    from runtime.app import StreamsApp
    from runtime.storage.producer import Producer
    from runtime.storage.topics import TopicAdmin

    module = load_topology_file(args.file)
    config = build_config(module, root=args.root, properties=args.properties, overrides=args.config)
    admin = TopicAdmin(config.topics_root)
    for topic, partitions in dict(getattr(module, "TOPICS", {}) or {}).items():
        admin.create(topic, int(partitions), if_not_exists=True)
    if args.generate:
        _generate(module, Producer(admin), args.generate)
    app = StreamsApp(module.build_topology(), config)
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
        summary = {
            "application.id": config.application_id,
            "processing.guarantee": config.processing_guarantee,
            "batches": thread.batches,
            "seconds": round(time.perf_counter() - started, 2),
        }
        print(json.dumps(summary), file=sys.stderr)
    return 0


def _generate(module: ModuleType, producer: Any, n: int) -> None:
    generate = getattr(module, "generate", None)
    topic = getattr(module, "INPUT", None)
    if not callable(generate) or not isinstance(topic, str):
        raise ConfigError(
            f"--generate needs {module.__file__} to define INPUT (a topic) and generate(n)"
        )
    for key, value in generate(n):
        producer.send(
            topic,
            None if key is None else str(key).encode(),
            None if value is None else str(value).encode(),
        )
    producer.flush()
    print(f"produced {n} records to {topic}", file=sys.stderr)


def _describe(args: argparse.Namespace) -> int:
    module = load_topology_file(args.file)
    print(module.build_topology().describe(), end="")
    return 0


def main_for(file: str, argv: Sequence[str] | None = None) -> int:
    """Run FILE as ``streams-eos run FILE`` would (the ``spark-submit FILE`` entry)."""
    from streams.cli import main

    return main(["run", file, *(sys.argv[1:] if argv is None else argv)])
