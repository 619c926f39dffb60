"""The names a handler key accepts, and the handler each name builds.

A value is a short name (``log-and-fail``, ``log-and-continue``; ``default`` for
production), Kafka's class name (``LogAndContinueExceptionHandler``, also fully qualified),
or the import path of a user class (``pkg.module.Name`` or ``pkg.module:Name``):
:func:`check_handler` checks it when the configuration loads, :func:`load_handler` builds
the handler when a task starts.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Final

from common.errors import ConfigError
from common.handlers_api import Kind
from common.handlers_builtin import (
    BuiltInHandler,
    DefaultProductionExceptionHandler,
    LogAndContinueExceptionHandler,
    LogAndContinueProcessingExceptionHandler,
    LogAndContinueProductionExceptionHandler,
    LogAndFailExceptionHandler,
    LogAndFailProcessingExceptionHandler,
)

_KAFKA: Final = "org.apache.kafka.streams.errors."
_BUILT_INS: Final[dict[Kind, dict[str, type[BuiltInHandler]]]] = {
    "deserialization": {
        "log-and-fail": LogAndFailExceptionHandler,
        "log-and-continue": LogAndContinueExceptionHandler,
    },
    "processing": {
        "log-and-fail": LogAndFailProcessingExceptionHandler,
        "log-and-continue": LogAndContinueProcessingExceptionHandler,
    },
    "production": {
        "log-and-fail": DefaultProductionExceptionHandler,
        "log-and-continue": LogAndContinueProductionExceptionHandler,
    },
}
_METHODS: Final[dict[Kind, tuple[str, ...]]] = {
    "deserialization": ("handle_error",),
    "processing": ("handle_error",),
    "production": ("handle_error", "handle_serialization_error"),
}
#: What each handler key allows, for configuration errors.
ALLOWED: Final = {
    kind: "log-and-fail, log-and-continue"
    + (" (log-and-fail is also called default)" if kind == "production" else "")
    + f", Kafka's class names ({', '.join(c.__name__ for c in names.values())}), or the "
    f"import path (pkg.module.Name or pkg.module:Name) of a class with "
    f"{' and/or '.join(_METHODS[kind])}"
    for kind, names in _BUILT_INS.items()
}


def short_name(kind: Kind, value: str) -> str | None:
    """Return the built-in short name ``value`` stands for, or None for a user path."""
    text = value.strip()
    short = text.lower().replace("_", "-")
    names = _BUILT_INS[kind]
    if short in names:
        return short
    if kind == "production" and short == "default":
        return "log-and-fail"
    simple = text.removeprefix(_KAFKA)
    for name, cls in names.items():
        if simple == cls.__name__:
            return name
    return None


def _import(path: str) -> Any:
    module_name, sep, attr_path = path.partition(":") if ":" in path else path.rpartition(".")
    if not module_name or not sep or not attr_path:
        raise ValueError("not a built-in name nor an import path")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise ValueError(f"cannot import {module_name} ({type(exc).__name__}: {exc})") from exc
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{module_name} has no attribute {attr_path}")
        obj = getattr(obj, part)
    return obj


def _instantiate(kind: Kind, obj: Any, path: str) -> Any:
    methods = _METHODS[kind]
    has_method = any(callable(getattr(obj, m, None)) for m in methods)
    if isinstance(obj, type) or (callable(obj) and not has_method):
        try:
            obj = obj()
        except Exception as exc:
            raise ValueError(
                f"calling {path} with no arguments failed ({type(exc).__name__}: {exc})"
            ) from exc
    if not any(callable(getattr(obj, m, None)) for m in methods):
        raise ValueError(
            f"{path} gives a {type(obj).__name__}, which has no {' or '.join(methods)}"
        )
    return obj


def check_handler(kind: Kind, value: str) -> str:
    """Return the canonical form of a handler key's value (a short name, or the import path
    unchanged); raise ValueError saying why the value is refused (its class cannot be
    imported, cannot be built with no arguments, or lacks the handler method)."""
    short = short_name(kind, value)
    if short is not None:
        return short
    path = value.strip()
    _instantiate(kind, _import(path), path)
    return path


def load_handler(kind: Kind, value: str, configs: Mapping[str, Any]) -> Any:
    """Build the handler a configuration value names and ``configure(configs)`` it.

    Raises:
        ConfigError: the value is refused (see :func:`check_handler`).
    """
    short = short_name(kind, value)
    try:
        handler = (
            _BUILT_INS[kind][short]()
            if short is not None
            else _instantiate(kind, _import(value.strip()), value.strip())
        )
    except ValueError as exc:
        raise ConfigError(f"{kind}.exception.handler: {exc} (got {value!r})") from exc
    configure = getattr(handler, "configure", None)
    if callable(configure):
        configure(configs)
    return handler
