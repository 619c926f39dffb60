"""Serialize and deserialize record keys and values, byte-compatible with Kafka's serdes.

A :class:`Serde` turns Python objects into record bytes and back. The built-in serdes write
exactly the bytes Kafka's Java serializers write (``IntegerSerializer``, ``LongSerializer``,
``DoubleSerializer``, ``StringSerializer``, ...), so topics can be shared with Java clients.
``None`` always maps to ``None`` in both directions, so tombstones pass through.

Failures raise :class:`~common.errors.SerializationError`; readers call
:func:`deserialize_record_field` so the error names the topic, partition and offset of the
bad record. :func:`serialize_many` and :func:`deserialize_many` are the batch forms used on
the hot path.

This module holds the :class:`Serdes` factory and :func:`serde_from_name`; the protocol is
:mod:`common.serdes_base`, the serdes :mod:`common.serdes_primitive` and
:mod:`common.serdes_json`, the record and batch forms :mod:`common.serdes_batch`. Every
public name is importable from here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from common.errors import ConfigError
from common.serdes_base import Serde
from common.serdes_batch import deserialize_many, deserialize_record_field, serialize_many
from common.serdes_json import JsonSerde, PydanticSerde
from common.serdes_primitive import BytesSerde, DoubleSerde, IntegerSerde, LongSerde, StringSerde

__all__ = [
    "BytesSerde",
    "DoubleSerde",
    "IntegerSerde",
    "JsonSerde",
    "LongSerde",
    "PydanticSerde",
    "Serde",
    "Serdes",
    "StringSerde",
    "deserialize_many",
    "deserialize_record_field",
    "serde_from_name",
    "serialize_many",
]


class Serdes:
    """Build serdes as Kafka does: ``Serdes.String()``, ``Serdes.Long()``, ...

    ``Serdes.String(encoding="latin-1")`` and ``Serdes.Pydantic(Model)`` take arguments.
    """

    Bytes = BytesSerde
    String = StringSerde
    Integer = IntegerSerde
    Long = LongSerde
    Double = DoubleSerde
    Json = JsonSerde
    Pydantic = PydanticSerde


_NAMED: dict[str, Callable[[], Serde[Any]]] = {
    "bytes": BytesSerde,
    "string": StringSerde,
    "int": IntegerSerde,
    "long": LongSerde,
    "double": DoubleSerde,
    "json": JsonSerde,
}
_ALLOWED = (
    f"one of {', '.join(_NAMED)}, or an import path 'pkg.module.Name' or 'pkg.module:Name' "
    "naming a Serde class, a zero-argument factory or a Serde instance"
)


def serde_from_name(name: str) -> Serde[Any]:
    """Return the serde a configuration string names.

    Args:
        name: ``"bytes"``, ``"string"``, ``"int"``, ``"long"``, ``"double"``, ``"json"``, or
            ``"pkg.module.Name"`` / ``"pkg.module:Name"`` naming a Serde class (called with
            no arguments), a zero-argument factory, or a Serde instance.

    Returns:
        The serde.

    Raises:
        ConfigError: The name is unknown, cannot be imported, or does not give a serde.
    """
    key = name.strip()
    if key.lower() in _NAMED:
        return _NAMED[key.lower()]()
    if ":" in key:
        module_name, _, attr_path = key.partition(":")
    else:
        module_name, _, attr_path = key.rpartition(".")
    if not module_name or not attr_path:
        raise ConfigError(f"unknown serde {name!r}: expected {_ALLOWED}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise ConfigError(f"serde {name!r}: module {module_name!r} not found") from exc
        raise ConfigError(f"serde {name!r}: importing {module_name!r} failed: {exc}") from exc
    except Exception as exc:
        raise ConfigError(
            f"serde {name!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    owner = module_name
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"serde {name!r}: {owner!r} has no attribute {part!r}")
        obj, owner = getattr(obj, part), f"{owner}.{part}"
    if isinstance(obj, type) or (callable(obj) and not isinstance(obj, Serde)):
        try:
            obj = obj()
        except Exception as exc:
            raise ConfigError(
                f"serde {name!r}: calling {owner!r} with no arguments failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    missing = [m for m in ("serialize", "deserialize") if not callable(getattr(obj, m, None))]
    if missing:
        raise ConfigError(
            f"serde {name!r}: {type(obj).__name__} object lacks {' and '.join(missing)}; "
            f"expected {_ALLOWED}"
        )
    return obj  # type: ignore[no-any-return]
