"""Where a configuration's keys come from: mappings, files, environment variables.

Each reader returns a mapping of dotted keys (``application.id``) that
:class:`~common.config.StreamsConfig` validates: :func:`parse_properties` for Java
``.properties`` text, :func:`read_source` for a mapping or a ``.properties``/``.yaml``/
``.yml`` file, :func:`env_mapping` for ``STREAMS_CONFIG_*`` variables. :func:`root_from_env`
and :func:`gather_storage_options` shape a raw mapping before its keys are checked. A
source that cannot be read raises :class:`~common.errors.ConfigError` naming it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final, TypeAlias

import yaml

from common.errors import ConfigError

ENV_PREFIX: Final = "STREAMS_CONFIG_"  # environment variables read as configuration keys
STORAGE_OPTION_PREFIX: Final = "storage.options."  # storage.options.<NAME>=<value>
ROOT_ENV_VAR: Final = "STREAMS_ROOT"  # fallback for topics.root when no source sets it

#: A source :meth:`~common.config.StreamsConfig.load` merges: dotted keys, or a file path.
Source: TypeAlias = Mapping[str, object] | str | os.PathLike[str]

_WS: Final = " \t\f"
_ESCAPE: Final = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)
_ESCAPED: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def root_from_env(data: Any) -> Any:
    """Return ``data`` with ``topics.root`` taken from ``STREAMS_ROOT`` when it sets none."""
    root = os.environ.get(ROOT_ENV_VAR)
    if isinstance(data, dict) and "topics.root" not in data and root:
        return {**data, "topics.root": root}
    return data


def gather_storage_options(data: Any) -> Any:
    """Return ``data`` with its ``storage.options.<NAME>`` keys gathered into one
    ``storage.options`` mapping (an empty ``storage.options``, the defaults file's, is none)."""
    if not isinstance(data, dict):
        return data
    if data.get("storage.options") == "":  # the defaults file's empty value: none
        data = {k: v for k, v in data.items() if k != "storage.options"}
    prefixed = [k for k in data if isinstance(k, str) and k.startswith(STORAGE_OPTION_PREFIX)]
    if not prefixed:
        return data
    gathered = dict(data)
    options = dict(gathered.pop("storage.options", None) or {})  # "" (the file's): none
    for key in prefixed:
        options[key[len(STORAGE_OPTION_PREFIX) :]] = str(gathered.pop(key))
    gathered["storage.options"] = options
    return gathered


def check_keys(mapping: Mapping[Any, object]) -> dict[str, object]:
    """Return ``mapping`` as a dict; raise ConfigError if a key is not a string."""
    for key in mapping:
        if not isinstance(key, str):
            raise ConfigError(f"{key!r}: configuration keys must be strings")
    return dict(mapping)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read configuration file ({exc})") from exc


def read_properties(path: Path) -> dict[str, str]:
    """Return the entries of a ``.properties`` file; raise ConfigError if it is unreadable."""
    return parse_properties(_read_text(path), source=str(path))


def read_yaml(path: Path) -> dict[str, object]:
    """Return a YAML file's keys, nested mappings flattened into dotted keys.

    Raises ConfigError if the file cannot be read, is not a mapping, or gives a key twice.
    """
    try:
        document = yaml.safe_load(_read_text(path))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from exc
    if not isinstance(document, Mapping | None):
        kind = type(document).__name__
        raise ConfigError(f"{path}: the top level must be a mapping of keys, not a {kind}")
    flat: dict[str, object] = {}
    _flatten(document or {}, "", flat, path)
    return flat


def _flatten(node: Mapping[Any, Any], prefix: str, out: dict[str, object], path: Path) -> None:
    for key, value in node.items():
        dotted = f"{prefix}{key}"
        if not isinstance(key, str):
            raise ConfigError(f"{dotted}: configuration keys must be strings (in {path})")
        if isinstance(value, Mapping):
            _flatten(value, dotted + ".", out, path)
        elif dotted in out:
            raise ConfigError(f"{dotted}: given twice in {path}")
        else:
            out[dotted] = value


def read_source(source: Source) -> Mapping[str, object]:
    """Return the keys of a mapping or of a ``.properties``/``.yaml``/``.yml`` file.

    Raises ConfigError if a key is not a string, or the file cannot be read or has another
    suffix.
    """
    if isinstance(source, Mapping):
        return check_keys(source)
    path = Path(source)
    readers: dict[str, Callable[[Path], Mapping[str, object]]] = {
        ".properties": read_properties,
        ".yaml": read_yaml,
        ".yml": read_yaml,
    }
    if path.suffix.lower() in readers:
        return readers[path.suffix.lower()](path)
    raise ConfigError(
        f"{path}: unsupported configuration file suffix {path.suffix!r}; "
        "allowed: .properties, .yaml, .yml"
    )


def env_mapping(environ: Mapping[str, str]) -> dict[str, str]:
    """Return the keys of the ``STREAMS_CONFIG_*`` variables of ``environ``, each name
    mapped to its key as :meth:`~common.config.StreamsConfig.from_env` says."""
    mapped: dict[str, str] = {}
    for name, value in environ.items():
        if name.startswith(ENV_PREFIX) and name != ENV_PREFIX:
            key = name[len(ENV_PREFIX) :].lower().replace("___", "\0").replace("__", "\1")
            mapped[key.replace("_", ".").replace("\0", "-").replace("\1", "_")] = value
    return mapped


def parse_properties(text: str, *, source: str = "<properties>") -> dict[str, str]:
    """Parse Java ``.properties`` text into a dict; a repeated key keeps its last value.

    Supports ``#`` and ``!`` comment lines, ``key=value``, ``key: value`` and ``key value``,
    backslash line continuation and the escapes ``\\t \\n \\r \\f \\\\ \\uXXXX`` (any other
    escaped character stands for itself). Whitespace around keys and values is trimmed.

    ``source`` (usually the file path) prefixes error messages. Raises ConfigError if a
    ``\\u`` escape is not followed by four hex digits.
    """
    entries: dict[str, str] = {}
    for lineno, line in _logical_lines(text):
        key, value = _split_entry(line)
        where = f"{source}:{lineno}"
        entries[_unescape(key, where)] = _unescape(value, where)
    return entries


def _odd_backslashes(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """Yield (first line number, text) of each entry, continuation lines joined."""
    lines = enumerate(re.split(r"\r\n|\r|\n", text), start=1)
    for lineno, physical in lines:
        line = physical.lstrip(_WS)
        if not line or line[0] in "#!":
            continue
        while _odd_backslashes(line):
            following = next(lines, None)
            line = line[:-1] + (following[1].lstrip(_WS) if following is not None else "")
        yield lineno, line


def _split_entry(line: str) -> tuple[str, str]:
    end = 0
    while end < len(line) and line[end] not in "=:" + _WS:
        end += 2 if line[end] == "\\" else 1
    rest = line[end:].lstrip(_WS)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_WS)
    value = rest.rstrip(_WS)
    if _odd_backslashes(value):  # the whitespace right after a final backslash is escaped
        value = rest[: len(value) + 1]
    return line[:end], value


def _unescape(text: str, where: str) -> str:
    def replace(match: re.Match[str]) -> str:
        code = match.group(1)
        if code == "u":
            raise ConfigError(f"{where}: malformed \\uXXXX escape in {text!r}")
        return chr(int(code[1:], 16)) if len(code) == 5 else _ESCAPED.get(code, code)

    # \uXXXX pairs may encode a surrogate pair (UTF-16, as in Java); join them
    return _ESCAPE.sub(replace, text).encode("utf-16", "surrogatepass").decode("utf-16")
