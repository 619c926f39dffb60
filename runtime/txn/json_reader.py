"""Strict reading of the transaction log's JSON: every field checked, every error placed.

The helpers read a decoded document field by field and raise
:class:`~common.errors.CoordinatorError` naming the first missing, unknown or invalid
field by its path (``staged.t[0].size``), so a corrupt or foreign transaction log is
reported where it is wrong. Integer fields are at least -1 unless ``_BOUNDS`` bounds them
otherwise; the fields named in ``_STRINGS`` are strings.
:meth:`~runtime.txn.metadata.TransactionMetadata.from_json` is built on them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from common.errors import CoordinatorError
from runtime.txn.state import MAX_EPOCH

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

# Int fields are >= -1 unless bounded here; _STRINGS are str.
_BOUNDS: dict[str, tuple[int, int | None]] = {
    **dict.fromkeys(("txn_sequence", "partition", "offset", "count", "size"), (0, None)),
    **dict.fromkeys(("producer_epoch", "last_producer_epoch"), (-1, MAX_EPOCH)),
    "txn_timeout_ms": (1, None),
}
_STRINGS = frozenset({"transactional_id", "member_id", "group", "topic", "metadata", "path"})
_Flat = TypeVar("_Flat", bound="DataclassInstance")


def invalid(where: str, problem: str) -> CoordinatorError:
    """Return the error that field ``where`` has ``problem`` (for the caller to raise)."""
    return CoordinatorError(f"Invalid transaction metadata: field {where!r} {problem}")


def read_object(value: object, where: str, keys: frozenset[str] | None) -> dict[str, Any]:
    """Return ``value`` as a dict with str keys, exactly ``keys`` if given."""
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise invalid(where or "<root>", f"must be an object, got {value!r}")
    if keys is not None:
        prefix = f"{where}." if where else ""
        missing, unknown = sorted(keys - value.keys()), sorted(value.keys() - keys)
        if missing:
            raise invalid(prefix + missing[0], "is missing")
        if unknown:
            raise invalid(prefix + unknown[0], "is unknown")
    return dict(value)


def read_list(d: Mapping[str, Any], key: str, prefix: str = "") -> list[tuple[object, str]]:
    """Return the elements of the list ``d[key]``, each with its field path."""
    value = d[key]
    if not isinstance(value, list):
        raise invalid(prefix + key, f"must be a list, got {value!r}")
    return [(item, f"{prefix}{key}[{i}]") for i, item in enumerate(value)]


def _int(value: object, where: str, minimum: int, maximum: int | None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise invalid(where, f"must be an integer, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        raise invalid(where, f"must be in [{minimum}, {maximum or 'inf'}], got {value}")
    return value


def read_str(value: object, where: str) -> str:
    """Return ``value``, the field ``where``, if it is a string."""
    if not isinstance(value, str):
        raise invalid(where, f"must be a string, got {value!r}")
    return value


def read_scalars(d: Mapping[str, Any], where: str, names: Iterable[str]) -> dict[str, Any]:
    """Return the validated int and str fields ``names`` of ``d``."""
    out: dict[str, Any] = {}
    for name in names:
        path = f"{where}.{name}" if where else name
        if name in _STRINGS:
            out[name] = read_str(d[name], path)
        else:
            out[name] = _int(d[name], path, *_BOUNDS.get(name, (-1, None)))
    return out


def read_flat(cls: type[_Flat], value: object, where: str) -> _Flat:
    """Return the flat record ``cls`` read from ``value``."""
    names = [f.name for f in dataclasses.fields(cls)]
    return cls(**read_scalars(read_object(value, where, frozenset(names)), where, names))
