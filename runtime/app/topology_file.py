"""A user's topology file (``streams-eos run FILE``): load it, its CONFIG, its records."""

from __future__ import annotations

import importlib.util
import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from pyspark import cloudpickle

from common.config import StreamsConfig
from common.errors import ConfigError, StreamsError
from common.serdes import JsonSerde
from runtime.storage.fs import register_storage_options
from topology.graph.topology import Topology


def load_topology_file(path: str) -> ModuleType:
    """Import FILE as a module whose functions Spark ships by value to its workers.

    Raises:
        ConfigError: FILE does not exist, is not valid Python, fails while it is imported
            (a missing module, an error at its top level: named with the file and line),
            or defines no ``build_topology()``.
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
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        where = f"{path}, line {exc.lineno}" if exc.lineno else path
        raise ConfigError(
            f"topology file {where}: {exc.msg} (a syntax error: fix the file)"
        ) from exc
    except ModuleNotFoundError as exc:
        sys.modules.pop(name, None)
        raise ConfigError(
            f"topology file {path}{_line_in(exc, file)}: imports {exc.name!r}, which is not "
            f"installed in this Python ({sys.executable}): install it, or fix the import"
        ) from exc
    except Exception as exc:
        sys.modules.pop(name, None)
        raise ConfigError(
            f"topology file {path}{_line_in(exc, file)} failed while it was loaded: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if not callable(getattr(module, "build_topology", None)):
        raise ConfigError(
            f"topology file {path} defines no build_topology() function; add one that "
            "returns StreamsBuilder().build()"
        )
    # PySpark pickles with its own vendored copy: registering with a separately installed
    # cloudpickle would not reach it, and the workers, which cannot import FILE, would fail
    # on its top-level classes and functions.
    cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
    return module


def _line_in(exc: BaseException, file: Path) -> str:
    """``, line N`` of the innermost frame of ``exc`` inside ``file`` (empty if none)."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename).resolve() == file.resolve():
            line = frame.lineno
    return "" if line is None else f", line {line}"


def build_topology_of(module: ModuleType, path: str) -> Topology:
    """Call FILE's ``build_topology()`` and check what it returns.

    Raises:
        ConfigError: it raised, or returned something other than a built topology.
    """
    try:
        topology = module.build_topology()
    except StreamsError:
        raise
    except Exception as exc:
        raise ConfigError(
            f"topology file {path}{_line_in(exc, Path(path))}: build_topology() raised "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(topology, Topology):
        hint = (
            "; did you return the builder? return builder.build()"
            if hasattr(topology, "build")
            else ""
        )
        raise ConfigError(
            f"topology file {path}: build_topology() returned {type(topology).__name__}, not "
            f"a Topology{hint}"
        )
    return topology


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
    config = StreamsConfig.load(*sources, overrides=extra)
    register_storage_options(config.topics_root, config.storage_options)
    return config


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
