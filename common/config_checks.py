"""The checks of single configuration values, and the wording of every problem found.

A check takes a value pydantic has parsed and returns it (normalized) or raises
:func:`invalid` with the reason; :mod:`common.config_keys` attaches each check to its key.
:func:`describe_errors` turns pydantic's errors into the lines of one
:class:`~common.errors.ConfigError`: each names the key, the value and what is allowed, an
unknown key the nearest known one.
"""

from __future__ import annotations

import difflib
import keyword
import re
from collections.abc import Callable, Mapping
from typing import Final

from pydantic import ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

from common.config_sources import ROOT_ENV_VAR
from common.handlers_api import Kind
from common.handlers_names import check_handler

BUILTIN_SERDES: Final = ("bytes", "string", "int", "long", "double", "json")

_APP_ID_CHAR: Final = re.compile(r"[a-zA-Z0-9._-]")
_MAX_APP_ID: Final = 249
_TOPIC_NAME: Final = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def invalid(reason: str) -> PydanticCustomError:
    """Return the error of a value refused for ``reason`` (worded by :func:`describe_errors`)."""
    return PydanticCustomError("streams_invalid", "{reason}", {"reason": reason})


def reject_bool(value: object) -> object:
    """Refuse a boolean where an integer is expected (pydantic would take it as 0 or 1)."""
    if isinstance(value, bool):
        raise invalid("must be an integer, not a boolean")
    return value


def strict_boolean(value: object) -> object:
    """Take a boolean as Kafka's ``ConfigDef`` does: ``True``/``False`` or the strings
    ``true``/``false`` (any case); refuse anything else (``1``, ``yes``)."""
    if isinstance(value, bool):
        return value
    text = value.strip().lower() if isinstance(value, str) else None
    if text not in ("true", "false"):
        raise invalid("must be true or false")
    return text == "true"


def upper_stripped(value: object) -> object:
    """Return a string stripped and upper-cased (a level name), anything else unchanged."""
    return value.strip().upper() if isinstance(value, str) else value


def is_import_path(text: str) -> bool:
    """Whether ``text`` reads as ``pkg.module.Name`` or ``pkg.module:Name``."""
    module, colon, attribute = text.partition(":")
    parts = module.split(".") + (attribute.split(".") if colon else [])
    if not colon and len(parts) < 2:
        return False
    return all(part.isidentifier() and not keyword.iskeyword(part) for part in parts)


def check_application_id(value: str) -> str:
    """Check ``application.id``: 1 to 249 characters allowed in topic names."""
    bad = "".join(sorted({char for char in value if not _APP_ID_CHAR.fullmatch(char)}))
    if not value:
        raise invalid("must not be empty")
    if len(value) > _MAX_APP_ID:
        raise invalid(f"is {len(value)} characters long, more than {_MAX_APP_ID}")
    if bad:
        raise invalid(f"contains characters not allowed in topic names: {bad!r}")
    return value


def check_serde_name(value: str) -> str:
    """Check a serde key: a built-in name (lower-cased) or an import path."""
    if value.lower() in BUILTIN_SERDES:  # as common.serdes.serde_from_name
        return value.lower()
    if is_import_path(value):
        return value
    raise invalid("neither a built-in serde name nor a dotted import path")


def check_optional_import_path(value: str) -> str:
    """Check a key that is empty or an import path (``rocksdb.config.setter``)."""
    if value and not is_import_path(value):
        raise invalid("not a dotted import path (pkg.module.Name or pkg.module:Name)")
    return value


def check_optional_topic_name(value: str) -> str:
    """Check a key that is empty or a topic name (the dead-letter queue's)."""
    if value and (not _TOPIC_NAME.fullmatch(value) or value in {".", ".."}):
        raise invalid("not a valid topic name")
    return value


def check_byte_bound(value: int) -> int:
    """Check a size that is -1 (unbounded) or greater than 0."""
    if value != -1 and value <= 0:
        raise invalid("must be -1 or greater than 0")
    return value


def handler_check(kind: Kind) -> Callable[[str], str]:
    """Return the check of the ``<kind>.exception.handler`` key (see
    :func:`common.handlers_names.check_handler`)."""

    def check(value: str) -> str:
        try:
            return check_handler(kind, value)
        except ValueError as exc:
            raise invalid(str(exc)) from None

    return check


def unknown_key(key: str, allowed: Mapping[str, str]) -> str:
    """Return the problem of an unknown key, naming the nearest of ``allowed`` keys."""
    close = difflib.get_close_matches(key, list(allowed), n=1)
    return f"{key}: unknown configuration key" + (f"; did you mean {close[0]}?" if close else "")


def describe_errors(exc: ValidationError, allowed: Mapping[str, str]) -> str:
    """Return one line per problem of ``exc``; ``allowed`` maps each key to its allowed
    values."""
    errors = exc.errors(include_url=False)
    # a factory depending on a field that failed reports nothing the user can fix
    return "\n".join(
        _describe_one(e, allowed) for e in errors if e["type"] != "default_factory_not_called"
    )


def _describe_one(error: ErrorDetails, allowed: Mapping[str, str]) -> str:
    if not error["loc"]:  # cross-key problems come fully worded
        return error["msg"]
    key = str(error["loc"][0])
    values = allowed.get(key, "")
    if error["type"] == "extra_forbidden":
        return unknown_key(key, allowed)
    if error["type"] == "missing" and key == "topics.root":
        return f"{key}: missing; set {key} or the {ROOT_ENV_VAR} variable; allowed: {values}"
    if error["type"] == "missing":
        return f"{key}: missing (required, no default); allowed: {values}"
    return f"{key}: {_reason(error)} (got {error['input']!r}); allowed: {values}"


def _reason(error: ErrorDetails) -> str:
    ctx = error.get("ctx", {})
    reasons = {
        "greater_than": f"must be greater than {ctx.get('gt')}",
        "greater_than_equal": f"must be at least {ctx.get('ge')}",
        "int_parsing": "not an integer",
        "int_type": "not an integer",
        "int_from_float": "not a whole number",
        "string_type": "not a string",
        "string_too_short": "must not be empty",
        "literal_error": "not an allowed value",
    }
    return reasons.get(error["type"], error["msg"])
