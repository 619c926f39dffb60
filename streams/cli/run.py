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
  timestamp is the time of sending (see :func:`generated_records`).

The same FILE runs under ``spark-submit FILE`` when it ends with
``if __name__ == "__main__": streams.cli.run.main_for(__file__)``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from streams.config import StreamsConfig
from streams.errors import ConfigError
from streams.serdes import JsonSerde


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
        # PySpark pickles with its own vendored copy: registering with a separately
        # installed cloudpickle would not reach it, and the workers, which cannot import
        # FILE, would fail on its top-level classes and functions.
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
    except ImportError:  # pragma: no cover - a dependency of the project
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


#: A generated record ready to send: key, value, timestamp (None: the time of sending).
RawRecord = tuple[bytes | None, bytes | None, int | None]


def generated_records(module: ModuleType, n: int) -> dict[str, list[RawRecord]]:
    """Return FILE's ``generate(n)`` as serialized records per input topic, in produce order.

    Raises:
        ConfigError: FILE defines no ``generate(n)``, returns records without defining
            ``INPUT``, or a record is not ``(key, value)`` or ``(key, value, timestamp)``.
    """
    generate = getattr(module, "generate", None)
    if not callable(generate):
        raise ConfigError(
            f"--generate needs {module.__file__} to define generate(n) (and INPUT, the topic "
            "its records go to, unless it returns {topic: records})"
        )
    generated = generate(n)
    if isinstance(generated, Mapping):
        per_topic: Mapping[Any, Any] = generated
    else:
        topic = getattr(module, "INPUT", None)
        if not isinstance(topic, str):
            raise ConfigError(
                f"--generate needs {module.__file__} to define INPUT (a topic) for the records "
                "generate(n) returns, or generate(n) to return {topic: records}"
            )
        per_topic = {topic: generated}
    return {str(t): [_raw(str(t), r) for r in records] for t, records in per_topic.items()}


def _raw(topic: str, record: Any) -> RawRecord:
    if not isinstance(record, tuple | list) or len(record) not in (2, 3):
        raise ConfigError(
            f"generate(n) gave {record!r} for topic {topic!r}; expected (key, value) or "
            "(key, value, timestamp)"
        )
    timestamp = record[2] if len(record) == 3 else None
    key, value = _encode(topic, record[0]), _encode(topic, record[1])
    return key, value, None if timestamp is None else int(timestamp)


def _encode(topic: str, data: object) -> bytes | None:
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, dict | list):
        return JsonSerde().serialize(topic, data)  # the json serde's bytes
    return str(data).encode()


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
    print(module.build_topology().describe(), end="")
    return 0


def main_for(file: str, argv: Sequence[str] | None = None) -> int:
    """Run FILE as ``streams-eos run FILE`` would (the ``spark-submit FILE`` entry)."""
    from streams.cli import main

    return main(["run", file, *(sys.argv[1:] if argv is None else argv)])
