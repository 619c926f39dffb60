"""Kafka's topic name rules."""

from __future__ import annotations

import re

from common.errors import InvalidTopicError

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> str:
    """Return ``name`` if it is a legal topic name, else raise.

    Raises:
        InvalidTopicError: empty, ``.`` or ``..``, longer than 249 characters, or holding a
            character outside ``[a-zA-Z0-9._-]`` (fatal; choose another name).
    """
    if not isinstance(name, str) or not name:
        raise InvalidTopicError("topic name is empty; give a name of [a-zA-Z0-9._-]")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed ('.' and '..' are reserved)")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name {name[:40]!r}... is {len(name)} characters long; "
            f"the limit is {MAX_NAME_LENGTH}"
        )
    if not _LEGAL.fullmatch(name):
        bad = sorted({c for c in name if not _LEGAL.fullmatch(c)})
        raise InvalidTopicError(
            f"topic name {name!r} holds illegal characters {''.join(bad)!r}; "
            "only ASCII letters, digits, '.', '_' and '-' are allowed"
        )
    return name


def collides(a: str, b: str) -> bool:
    """Return True when two different names map to the same metric name ('.' vs '_')."""
    return a != b and a.replace(".", "_") == b.replace(".", "_")
