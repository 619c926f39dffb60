"""A user's topology file (``streams-eos run FILE``): load it, its CONFIG, its records."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from common.config import StreamsConfig
from common.errors import ConfigError
from common.serdes import JsonSerde
from runtime.storage.fs import register_storage_options


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
