"""Load and validate the configuration of a spark-streams-eos application.

:class:`StreamsConfig` holds every key, named as in Kafka Streams (``application.id``,
``processing.guarantee``, ...). Every loader (a mapping, a ``.properties`` file, a YAML file,
``STREAMS_CONFIG_*`` environment variables, or :meth:`StreamsConfig.load` merging them) goes
through the same validation; every problem is reported in one
:class:`~common.errors.ConfigError`, one line per problem naming the key, the value and what
is allowed.

This module holds the model's rules across keys, its deprecated names and its loaders; the
keys themselves are declared in :mod:`common.config_keys`, the checks of single values in
:mod:`common.config_checks`, the readers of files and variables in
:mod:`common.config_sources`. Every public name is importable from here.
"""

from __future__ import annotations

import inspect
import logging
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pydantic import (
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from common.config_checks import BUILTIN_SERDES, describe_errors, invalid, unknown_key
from common.config_keys import (
    ALLOWED,
    EOS,
    FIELD_BY_KEY,
    TOPOLOGY_KEYS,
    AutoOffsetReset,
    ConfigKeys,
    ProcessingGuarantee,
    TopologyConfigKeys,
)
from common.config_sources import (
    ENV_PREFIX,
    ROOT_ENV_VAR,
    STORAGE_OPTION_PREFIX,
    Source,
    check_keys,
    env_mapping,
    gather_storage_options,
    parse_properties,
    read_properties,
    read_source,
    read_yaml,
    root_from_env,
)
from common.errors import ConfigError

__all__ = [
    "BUILTIN_SERDES",
    "ENV_PREFIX",
    "ROOT_ENV_VAR",
    "STORAGE_OPTION_PREFIX",
    "AutoOffsetReset",
    "ProcessingGuarantee",
    "StreamsConfig",
    "StreamsDeprecationWarning",
    "TopologyConfigKeys",
    "parse_properties",
    "topology_config",
]

_LOG = logging.getLogger(__name__)

# deprecated processing.guarantee -> (value kept, value to use instead)
_DEPRECATED: Final = {
    "exactly_once": ("exactly_once", "exactly_once_v2"),
    "exactly_once_beta": ("exactly_once_v2", "exactly_once_v2"),
}
# Deprecated key -> its new name; the old names still work, the new one wins when both are
# set. Kafka 4.0 (KIP-1056) dropped the "default." prefix of the handlers' keys; Kafka 3.4
# (KIP-770) renamed cache.max.bytes.buffering.
_DEPRECATED_KEYS: Final = {
    "default.deserialization.exception.handler": "deserialization.exception.handler",
    "default.production.exception.handler": "production.exception.handler",
    "cache.max.bytes.buffering": "statestore.cache.max.bytes",
}


class StreamsDeprecationWarning(FutureWarning):
    """A configuration value is deprecated; the message names the value to use instead."""


def _user_stacklevel() -> int:
    """Return the warnings stacklevel, seen from the caller, of the first frame outside this
    module and pydantic, so that a warning points at the user's code."""
    frame, level = inspect.currentframe(), 0
    while frame is not None and (
        frame.f_code.co_filename == __file__
        or f"{os.sep}pydantic{os.sep}" in frame.f_code.co_filename
    ):
        frame, level = frame.f_back, level + 1
    return max(level, 1)


def _warn_deprecated(value: str, kept: str, replacement: str) -> None:
    treated = f" and is treated as {kept}" if value != kept else ""
    message = (
        f"processing.guarantee={value} is deprecated{treated}; "
        f"use processing.guarantee={replacement} instead"
    )
    _LOG.warning("%s", message)
    warnings.warn(message, StreamsDeprecationWarning, stacklevel=_user_stacklevel())


def _warn_deprecated_key(old: str, new: str, ignored: bool) -> None:
    outcome = f"ignored, {new} is set" if ignored else f"read as {new}"
    message = f"{old} is deprecated ({outcome}); use {new} instead"
    _LOG.warning("%s", message)
    warnings.warn(message, StreamsDeprecationWarning, stacklevel=_user_stacklevel())


#: Kafka's internal keys this project reads (``StreamsConfig.InternalConfig``), each with
#: what it allows: how often (wall-clock ms) an emit-on-close windowed aggregation looks
#: for closed windows (0: after every record; Kafka's tests set it to 0).
INTERNAL_KEYS: Final = {
    "__emit.interval.ms.kstreams.windowed.aggregation__": "an integer >= 0 (ms; default 1000)",
}


def _internal_values(given: Mapping[str, object]) -> dict[str, int]:
    """Return the internal keys' values as ints; raise ConfigError naming a bad one."""
    out: dict[str, int] = {}
    for key, value in given.items():
        try:
            number = int(str(value).strip()) if not isinstance(value, bool) else -1
        except ValueError:
            number = -1
        if number < 0:
            raise ConfigError(f"{key}: got {value!r}; allowed: {INTERNAL_KEYS[key]}")
        out[key] = number
    return out


class StreamsConfig(ConfigKeys):
    """Validated, immutable configuration of a streams application.

    Attributes are the Kafka Streams keys in snake_case; the dotted keys are the aliases
    used by every loader (``application_id`` is ``application.id``). Build one with
    :meth:`from_dict`, :meth:`from_properties`, :meth:`from_yaml`, :meth:`from_env` or
    :meth:`load`; invalid input raises :class:`~common.errors.ConfigError`.
    """

    #: Kafka's internal keys (``__name__``) given, validated: not public keys, not listed
    #: in the defaults file, read by the nodes they tune through the task's configuration.
    _internal: dict[str, int] = PrivateAttr(default_factory=dict)

    def __init__(self, /, **data: Any) -> None:
        """Validate ``data`` (dotted keys); raise ConfigError listing every problem."""
        internal = {key: data.pop(key) for key in list(data) if key in INTERNAL_KEYS}
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigError(describe_errors(exc, ALLOWED)) from None
        self.__pydantic_private__["_internal"] = _internal_values(internal)  # type: ignore[index]

    @model_serializer(mode="wrap")
    def _dump_internal(self, handler: SerializerFunctionWrapHandler, info: Any) -> Any:
        """Dump the internal keys given with the dotted keys (``by_alias``)."""
        out = handler(self)
        if info.by_alias and self._internal:
            out.update(self._internal)
        return out

    def __setattr__(self, name: str, value: object) -> None:
        """Refuse assignment with a ConfigError: a configuration is frozen."""
        raise ConfigError(
            f"{_alias_of(name)}: StreamsConfig is frozen; "
            "set the value when loading (StreamsConfig.load(..., overrides={...}))"
        )

    def __delattr__(self, name: str) -> None:
        """Refuse deletion with a ConfigError: a configuration is frozen."""
        self.__setattr__(name, None)

    @model_validator(mode="before")
    @classmethod
    def _topics_root_from_env(cls, data: Any) -> Any:
        return root_from_env(data)

    @model_validator(mode="before")
    @classmethod
    def _gather_storage_options(cls, data: Any) -> Any:
        return gather_storage_options(data)

    @model_validator(mode="before")
    @classmethod
    def _rename_deprecated_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not _DEPRECATED_KEYS.keys() & data.keys():
            return data
        renamed = dict(data)
        for old, new in _DEPRECATED_KEYS.items():
            if old in renamed:
                value = renamed.pop(old)
                ignored = new in renamed
                renamed.setdefault(new, value)
                _warn_deprecated_key(old, new, ignored)
        return renamed

    @field_validator("processing_guarantee", "auto_offset_reset", mode="before")
    @classmethod
    def _normalize_choice(cls, value: object, info: ValidationInfo) -> object:
        text = value.strip() if isinstance(value, str) else value  # as for the str keys
        if (
            info.field_name == "processing_guarantee"
            and isinstance(text, str)
            and text in _DEPRECATED
        ):
            kept, replacement = _DEPRECATED[text]
            _warn_deprecated(text, kept, replacement)
            return kept
        return text

    @model_validator(mode="after")
    def _check_timeouts(self) -> StreamsConfig:
        commit, timeout = self.commit_interval_ms, self.transaction_timeout_ms
        maximum = self.transaction_max_timeout_ms
        problems = []
        if commit >= timeout:
            problems.append(
                f"commit.interval.ms: must be less than transaction.timeout.ms (got {commit}, "
                f"transaction.timeout.ms is {timeout}); allowed: 1 to {timeout - 1}; "
                "lower commit.interval.ms or raise transaction.timeout.ms"
            )
        if timeout > maximum:
            problems.append(
                f"transaction.timeout.ms: must not exceed transaction.max.timeout.ms (got "
                f"{timeout}, transaction.max.timeout.ms is {maximum}); allowed: 1 to {maximum}; "
                "lower transaction.timeout.ms or raise transaction.max.timeout.ms"
            )
        session, heartbeat = self.session_timeout_ms, self.heartbeat_interval_ms
        if heartbeat >= session:
            problems.append(
                f"heartbeat.interval.ms: must be less than session.timeout.ms (got {heartbeat}, "
                f"session.timeout.ms is {session}); Kafka advises at most a third of it; "
                "lower heartbeat.interval.ms or raise session.timeout.ms"
            )
        if problems:  # reported as they are, one line each
            raise invalid("\n".join(problems))
        return self

    @property
    def eos_enabled(self) -> bool:
        """Whether processing.guarantee is exactly_once or exactly_once_v2."""
        return self.processing_guarantee in EOS

    def get(self, key: str) -> str | int:
        """Return the value of a dotted key; raise ConfigError if the key is unknown."""
        key = _DEPRECATED_KEYS.get(key, key)
        if key not in ALLOWED:
            raise ConfigError(unknown_key(key, ALLOWED))
        value: str | int = getattr(self, FIELD_BY_KEY[key])
        return value

    def to_properties(self) -> dict[str, str]:
        """Return every dotted key with its value as a string, in declaration order (each
        storage option as its own ``storage.options.<NAME>`` key)."""
        out: dict[str, str] = {}
        for key, value in self.model_dump(by_alias=True).items():
            if key == "storage.options":
                out.update({f"{STORAGE_OPTION_PREFIX}{k}": str(v) for k, v in value.items()})
            elif isinstance(value, bool):
                out[key] = str(value).lower()
            else:
                out[key] = str(value)
        return out

    @classmethod
    def from_dict(cls, mapping: Mapping[str, object]) -> StreamsConfig:
        """Build a configuration from dotted keys, coercing strings ("100" -> 100).

        Every loader ends here. Raises ConfigError naming each unknown, missing or bad key.
        """
        return cls(**check_keys(mapping))

    @classmethod
    def from_properties(cls, path: str | os.PathLike[str]) -> StreamsConfig:
        """Build a configuration from a Java ``.properties`` file; raise ConfigError."""
        return cls.from_dict(read_properties(Path(path)))

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str]) -> StreamsConfig:
        """Build a configuration from a YAML mapping of dotted or nested keys (or both).

        Raises ConfigError if the file cannot be read, is not a mapping, or a key is bad.
        """
        return cls.from_dict(read_yaml(Path(path)))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> StreamsConfig:
        """Build a configuration from ``STREAMS_CONFIG_*`` variables (default: os.environ).

        After the prefix the name is lower-cased, then ``___`` becomes ``-``, ``__`` becomes
        ``_`` and ``_`` becomes ``.``: ``STREAMS_CONFIG_APPLICATION_ID`` is ``application.id``.
        The ``STREAMS_ROOT`` fallback for ``topics.root`` always reads os.environ.
        """
        return cls.from_dict(env_mapping(os.environ if environ is None else environ))

    @classmethod
    def load(
        cls, *sources: Source, env: bool = True, overrides: Mapping[str, object] | None = None
    ) -> StreamsConfig:
        """Merge the sources in order, then env variables, then overrides; later keys win.

        Args:
            sources: mappings of dotted keys, or ``.properties``/``.yaml``/``.yml`` paths.
            env: apply ``STREAMS_CONFIG_*`` variables (see :meth:`from_env`).
            overrides: dotted keys applied last.

        Raises:
            ConfigError: a file cannot be read or has another suffix, or the merged
                configuration is invalid.
        """
        merged: dict[str, object] = {}
        for source in sources:
            merged.update(read_source(source))
        if env:
            merged.update(env_mapping(os.environ))
        merged.update(check_keys(overrides or {}))
        return cls.from_dict(merged)


def _alias_of(name: str) -> str:
    field = StreamsConfig.model_fields.get(name)
    return (field.alias or name) if field is not None else name


def topology_config(config: StreamsConfig | Mapping[str, object] | None) -> TopologyConfigKeys:
    """Return the keys a ``StreamsBuilder`` reads from ``config`` (Kafka's ``TopologyConfig``).

    ``config`` is the application's :class:`StreamsConfig`, or a mapping of dotted keys:
    only the topology's, or the whole application's. Every key must be known; the
    topology's are validated, the others are the application's to check.

    Raises:
        ConfigError: a key is unknown or a value is bad; the message names the key, the
            value and what is allowed.
    """
    if isinstance(config, StreamsConfig):
        return TopologyConfigKeys.model_validate({key: config.get(key) for key in TOPOLOGY_KEYS})
    mapping = check_keys(config or {})
    unknown = [
        unknown_key(key, ALLOWED)
        for key in mapping
        if key not in ALLOWED
        and key not in _DEPRECATED_KEYS
        and not key.startswith(STORAGE_OPTION_PREFIX)
    ]
    if unknown:
        raise ConfigError("\n".join(unknown))
    try:
        return TopologyConfigKeys.model_validate(mapping)
    except ValidationError as exc:
        raise ConfigError(describe_errors(exc, ALLOWED)) from None
