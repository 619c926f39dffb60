"""Input of the crash harness: records from JSON-lines files or from FILE's generator.

An input file holds one JSON object per line: ``key`` and ``value`` (strings or null),
optional ``timestamp`` (epoch ms) and ``headers`` (an object of strings). Records without a
timestamp get consecutive ones from :data:`BASE_TIMESTAMP`, the same in the reference and
in the real runs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from common.errors import StreamsError
from runtime.app.topology_file import generated_records

BASE_TIMESTAMP = 1_700_000_000_000


@dataclass(frozen=True, slots=True)
class InputRecord:
    """One input record: key and value as text (UTF-8) or bytes, a timestamp in epoch ms."""

    topic: str
    key: str | bytes | None
    value: str | bytes | None
    timestamp: int
    headers: tuple[tuple[str, str | None], ...] = ()

    def raw(self) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        """Return key, value and headers as the bytes a producer writes."""
        headers = [(k, None if v is None else v.encode()) for k, v in self.headers]
        return _enc(self.key), _enc(self.value), headers


def _enc(data: str | bytes | None) -> bytes | None:
    return data.encode() if isinstance(data, str) else data


class CrashTestError(StreamsError):
    """The crash test could not be set up (a bad input file, an unknown topic). Fix the
    input or FILE and run it again; a violation of exactly-once is a report, not this."""


def load_jsonl(topic: str, path: str | os.PathLike[str], *, start: int = 0) -> list[InputRecord]:
    """Read an input file: one JSON object per line with ``key`` and ``value`` (strings or
    null), optional ``timestamp`` (epoch ms) and ``headers`` (object of strings).

    Raises:
        CrashTestError: the file is missing or a line is not such an object.
    """
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise CrashTestError(f"input file {path} cannot be read: {exc}") from exc
    out: list[InputRecord] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            out.append(_record(topic, obj, BASE_TIMESTAMP + start + len(out)))
        except (ValueError, TypeError) as exc:
            raise CrashTestError(
                f"{path}:{n}: expected a JSON object with string-or-null key and value, "
                f"optional integer timestamp and object headers ({exc})"
            ) from exc
    return out


def _record(topic: str, obj: Any, default_ts: int) -> InputRecord:
    if not isinstance(obj, dict) or "value" not in obj:
        raise ValueError("not an object with a value")
    key, value = obj.get("key"), obj["value"]
    for name, item in (("key", key), ("value", value)):
        if item is not None and not isinstance(item, str):
            raise TypeError(f"{name} is {type(item).__name__}, not a string or null")
    ts = obj.get("timestamp", default_ts)
    if not isinstance(ts, int):
        raise TypeError("timestamp is not an integer")
    headers = obj.get("headers") or {}
    if not isinstance(headers, dict):
        raise TypeError("headers is not an object")
    return InputRecord(topic, key, value, ts, tuple(sorted(headers.items())))


def generated(module: ModuleType, n: int) -> list[InputRecord]:
    """Return FILE's ``generate(n)`` (as ``streams-eos run --generate`` produces it)."""
    out: list[InputRecord] = []
    for topic, records in generated_records(module, n).items():
        for key, value, ts in records:
            stamp = BASE_TIMESTAMP + len(out) if ts is None else ts
            out.append(InputRecord(topic, key, value, stamp))
    return out
