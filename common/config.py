"""Load and validate the configuration of a spark-streams-eos application.

:class:`StreamsConfig` holds every key, named as in Kafka Streams (``application.id``,
``processing.guarantee``, ...). Every loader (a mapping, a ``.properties`` file, a YAML file,
``STREAMS_CONFIG_*`` environment variables, or :meth:`StreamsConfig.load` merging them) goes
through the same validation; every problem is reported in one
:class:`~common.errors.ConfigError`, one line per problem naming the key, the value and what
is allowed.
"""

from __future__ import annotations

import difflib
import inspect
import keyword
import logging
import os
import re
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal, TypeAlias

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from common.errors import ConfigError
from common.handlers import ALLOWED as _HANDLERS
from common.handlers import Kind, check_handler

__all__ = [
    "BUILTIN_SERDES",
    "ENV_PREFIX",
    "ROOT_ENV_VAR",
    "STORAGE_OPTION_PREFIX",
    "AutoOffsetReset",
    "ProcessingGuarantee",
    "StreamsConfig",
    "StreamsDeprecationWarning",
    "parse_properties",
]

_LOG = logging.getLogger(__name__)

ENV_PREFIX: Final = "STREAMS_CONFIG_"  # environment variables read as configuration keys
STORAGE_OPTION_PREFIX: Final = "storage.options."  # storage.options.<NAME>=<value>
ROOT_ENV_VAR: Final = "STREAMS_ROOT"  # fallback for topics.root when no source sets it
BUILTIN_SERDES: Final = ("bytes", "string", "int", "long", "double", "json")

ProcessingGuarantee: TypeAlias = Literal["at_least_once", "exactly_once", "exactly_once_v2"]
AutoOffsetReset: TypeAlias = Literal["earliest", "latest", "none"]
DslStore: TypeAlias = Literal["rocksDB", "in_memory"]
ProcessingEngine: TypeAlias = Literal["columnar", "record"]
RecordingLevelName: TypeAlias = Literal["INFO", "DEBUG", "TRACE"]
_Source: TypeAlias = Mapping[str, object] | str | os.PathLike[str]

_EOS: Final = frozenset({"exactly_once", "exactly_once_v2"})
# deprecated processing.guarantee -> (value kept, value to use instead)
_DEPRECATED: Final = {
    "exactly_once": ("exactly_once", "exactly_once_v2"),
    "exactly_once_beta": ("exactly_once_v2", "exactly_once_v2"),
}
_APP_ID_CHAR: Final = re.compile(r"[a-zA-Z0-9._-]")
_MAX_APP_ID: Final = 249
_WS: Final = " \t\f"
_ESCAPE: Final = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)
_ESCAPED: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class StreamsDeprecationWarning(FutureWarning):
    """A configuration value is deprecated; the message names the value to use instead."""


def _invalid(reason: str) -> PydanticCustomError:
    return PydanticCustomError("streams_invalid", "{reason}", {"reason": reason})


def _reject_bool(value: object) -> object:
    if isinstance(value, bool):
        raise _invalid("must be an integer, not a boolean")
    return value


def _default_commit_interval(data: dict[str, Any]) -> int:
    return 100 if data.get("processing_guarantee") in _EOS else 30000


def _default_state_dir() -> str:
    return os.path.join(tempfile.gettempdir(), "spark-streams-eos")


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


def _is_import_path(text: str) -> bool:
    module, colon, attribute = text.partition(":")
    parts = module.split(".") + (attribute.split(".") if colon else [])
    if not colon and len(parts) < 2:
        return False
    return all(part.isidentifier() and not keyword.iskeyword(part) for part in parts)


def _key(alias: str, allowed: str, **constraints: Any) -> Any:
    """Declare a field: its dotted key, the text saying what is allowed, its constraints."""
    return Field(alias=alias, description=allowed, **constraints)


_Int = Annotated[int, BeforeValidator(_reject_bool)]
_POSITIVE: Final = "an integer > 0"
_GUARANTEES: Final = "at_least_once, exactly_once_v2 (deprecated: exactly_once, exactly_once_beta)"
_COMMIT: Final = f"{_POSITIVE}, below transaction.timeout.ms"
_TXN: Final = f"{_POSITIVE}, above commit.interval.ms, at most transaction.max.timeout.ms"
_TXN_MAX: Final = f"{_POSITIVE}, at least transaction.timeout.ms"
_AT_LEAST_ONE: Final = "an integer >= 1"
_SERDES: Final = "bytes, string, int, long, double, json, or pkg.module.Name or pkg.module:Name"
_TOPIC_NAME: Final = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_DLQ: Final = "empty (none), or a topic name: 1 to 249 characters from [a-zA-Z0-9._-]"
# Kafka 4.0 (KIP-1056) dropped the "default." prefix of these keys; the old names still work.
_DEPRECATED_KEYS: Final = {
    "default.deserialization.exception.handler": "deserialization.exception.handler",
    "default.production.exception.handler": "production.exception.handler",
}
_HANDLER_KINDS: Final[dict[str, Kind]] = {
    "deserialization_exception_handler": "deserialization",
    "processing_exception_handler": "processing",
    "production_exception_handler": "production",
}
_EXTRACTORS: Final = (
    "fail_on_invalid, log_and_skip, use_partition_time, wallclock, "
    "or pkg.module.Name or pkg.module:Name"
)


class StreamsConfig(BaseModel):
    """Validated, immutable configuration of a streams application.

    Attributes are the Kafka Streams keys in snake_case; the dotted keys are the aliases
    used by every loader (``application_id`` is ``application.id``). Build one with
    :meth:`from_dict`, :meth:`from_properties`, :meth:`from_yaml`, :meth:`from_env` or
    :meth:`load`; invalid input raises :class:`~common.errors.ConfigError`.
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", str_strip_whitespace=True, coerce_numbers_to_str=True
    )

    application_id: str = _key("application.id", "1 to 249 characters from [a-zA-Z0-9._-]")
    processing_guarantee: ProcessingGuarantee = _key(
        "processing.guarantee", _GUARANTEES, default="at_least_once"
    )
    commit_interval_ms: _Int = _key(
        "commit.interval.ms", _COMMIT, default_factory=_default_commit_interval, gt=0
    )
    transaction_timeout_ms: _Int = _key("transaction.timeout.ms", _TXN, default=60000, gt=0)
    transaction_max_timeout_ms: _Int = _key(
        "transaction.max.timeout.ms", _TXN_MAX, default=900000, gt=0
    )
    num_stream_threads: _Int = _key("num.stream.threads", _AT_LEAST_ONE, default=1, ge=1)
    state_dir: str = _key(
        "state.dir", "a non-empty path", default_factory=_default_state_dir, min_length=1
    )
    topics_root: str = _key(
        "topics.root", "a local path or URI such as s3://bucket/prefix", min_length=1
    )
    # storage.options.<NAME>=<value> keys, gathered: delta-rs takes them as they are
    # (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...), pyarrow's S3 filesystem translated
    storage_options: dict[str, str] = _key(
        "storage.options",
        f"keys {STORAGE_OPTION_PREFIX}<NAME> with string values (delta-rs storage options)",
        default_factory=dict,
    )
    # Spark's checkpoint of the application's queries: disposable (positions come from
    # __consumer_offsets); empty: under topics.root when it is local, else under state.dir
    checkpoint_location: str = _key(
        "checkpoint.location", "empty (automatic), or a path or URI Spark can write", default=""
    )
    default_key_serde: str = _key("default.key.serde", _SERDES, default="bytes")
    default_value_serde: str = _key("default.value.serde", _SERDES, default="bytes")
    num_partitions: _Int = _key("num.partitions", _AT_LEAST_ONE, default=1, ge=1)
    statestore_uncommitted_max_bytes: _Int = _key(
        "statestore.uncommitted.max.bytes", f"-1 (unbounded) or {_POSITIVE}", default=64 << 20
    )
    max_poll_records: _Int = _key("max.poll.records", _AT_LEAST_ONE, default=1000, ge=1)
    # the most Spark tasks a level of a batch runs: tasks beyond it share one, one after
    # another (a Python Spark task has a fixed cost); 0: Spark's default parallelism
    batch_spark_partitions: _Int = _key(
        "batch.spark.partitions",
        "an integer >= 0 (0: Spark's default parallelism, its cores)",
        default=0,
        ge=0,
    )
    metadata_max_age_ms: _Int = _key("metadata.max.age.ms", _POSITIVE, default=300000, gt=0)
    # how often a stream thread looks for new records in its topics (Kafka's poll.ms: how
    # long a poll waits for input)
    poll_ms: _Int = _key("poll.ms", _POSITIVE, default=100, gt=0)
    # how long a stream thread may go without a batch while records wait for it before its
    # watchdog warns, counts stalled-total and wakes its query; 0: ten times the larger of
    # poll.ms and the query's trigger interval (commit.interval.ms under exactly-once)
    stall_timeout_ms: _Int = _key(
        "stall.timeout.ms", "0 (automatic) or an integer > 0", default=0, ge=0
    )
    max_task_idle_ms: _Int = _key(
        "max.task.idle.ms",
        "-1 (never wait) or an integer >= 0",
        default=0,
        ge=-1,
    )
    session_timeout_ms: _Int = _key("session.timeout.ms", _POSITIVE, default=45000, gt=0)
    heartbeat_interval_ms: _Int = _key("heartbeat.interval.ms", _POSITIVE, default=3000, gt=0)
    max_poll_interval_ms: _Int = _key("max.poll.interval.ms", _POSITIVE, default=300000, gt=0)
    group_initial_rebalance_delay_ms: _Int = _key(
        "group.initial.rebalance.delay.ms", "an integer >= 0", default=3000, ge=0
    )
    auto_offset_reset: AutoOffsetReset = _key(
        "auto.offset.reset", "earliest, latest, none", default="earliest"
    )
    default_dsl_store: DslStore = _key("default.dsl.store", "rocksDB, in_memory", default="rocksDB")
    # columnar: a node takes a poll's records of one partition as a batch where that
    # cannot change a result; record: every record through every node, one at a time
    processing_engine: ProcessingEngine = _key(
        "processing.engine", "columnar, record", default="columnar"
    )
    default_timestamp_extractor: str = _key(
        "default.timestamp.extractor", _EXTRACTORS, default="fail_on_invalid", min_length=1
    )
    cache_max_bytes_buffering: _Int = _key(
        "cache.max.bytes.buffering", "an integer >= 0 (0 disables caching)", default=10485760, ge=0
    )
    # 100 batches: a snapshot every ~10-30 s of processing while input waits (a batch is a
    # transaction under exactly-once; at_least_once runs batches back to back too), so a
    # task that moves replays at most 100 batches of changelog; uploads are incremental
    # (new SST files only).
    statestore_snapshot_interval: _Int = _key(
        "statestore.snapshot.interval", "an integer >= 0 (batches; 0 disables)", default=100, ge=0
    )
    # RocksDB's iterators end early, without an error, at a block whose checksum fails:
    # reading every block once at open finds a corrupted local store before it is used
    # (or snapshotted); about 1.5 s per million entries
    statestore_verify_on_open: bool = _key(
        "statestore.verify.on.open", "true or false", default=True
    )
    state_cleanup_delay_ms: _Int = _key(
        "state.cleanup.delay.ms", "an integer >= 0", default=600000, ge=0
    )
    rocksdb_config_setter: str = _key(
        "rocksdb.config.setter", "empty, or pkg.module.Name or pkg.module:Name", default=""
    )
    delete_retention_ms: _Int = _key(
        "delete.retention.ms", "an integer >= 0", default=86400000, ge=0
    )
    statestore_snapshots_kept: _Int = _key(
        "statestore.snapshots.kept", _AT_LEAST_ONE, default=2, ge=1
    )
    # The log cleaner (Kafka's log manager and log cleaner, Kafka Streams' repartition
    # purge), run by each instance on the topics its application reads and writes.
    log_cleaner_enable: bool = _key("log.cleaner.enable", "true or false", default=True)
    log_retention_check_interval_ms: _Int = _key(
        "log.retention.check.interval.ms", _POSITIVE, default=300000, gt=0
    )
    log_cleaner_backoff_ms: _Int = _key("log.cleaner.backoff.ms", _POSITIVE, default=15000, gt=0)
    repartition_purge_interval_ms: _Int = _key(
        "repartition.purge.interval.ms", _POSITIVE, default=30000, gt=0
    )
    # Topic settings where a topic sets none (Kafka's broker log.* defaults).
    log_retention_ms: _Int = _key(
        "log.retention.ms", "-1 (unbounded) or an integer >= 0", default=604800000, ge=-1
    )
    log_retention_bytes: _Int = _key(
        "log.retention.bytes", "-1 (unbounded) or an integer >= 0", default=-1, ge=-1
    )
    log_segment_bytes: _Int = _key(
        "log.segment.bytes", "an integer >= 1024", default=67108864, ge=1024
    )
    log_roll_ms: _Int = _key("log.roll.ms", "an integer >= 1", default=604800000, ge=1)
    log_segment_delete_delay_ms: _Int = _key(
        "log.segment.delete.delay.ms", "an integer >= 0", default=60000, ge=0
    )
    log_cleaner_min_compaction_lag_ms: _Int = _key(
        "log.cleaner.min.compaction.lag.ms", "an integer >= 0", default=0, ge=0
    )
    # at least a minute: a reader that refreshes a topic's offset index more often never
    # misses a cleaned-up commit (an idler checks, see runtime.storage.topic_log)
    log_delta_retention_ms: _Int = _key(
        "log.delta.retention.ms", "an integer >= 60000", default=86400000, ge=60000
    )
    # Kafka's metrics settings; metrics.port serves them in Prometheus' text format
    metrics_recording_level: RecordingLevelName = _key(
        "metrics.recording.level", "INFO, DEBUG or TRACE", default="INFO"
    )
    metrics_sample_window_ms: _Int = _key(
        "metrics.sample.window.ms", _POSITIVE, default=30000, gt=0
    )
    metrics_num_samples: _Int = _key("metrics.num.samples", _AT_LEAST_ONE, default=2, ge=1)
    metrics_port: _Int = _key(
        "metrics.port",
        "0 (no HTTP endpoint) or a TCP port from 1 to 65535",
        default=0,
        ge=0,
        le=65535,
    )
    deserialization_exception_handler: str = _key(
        "deserialization.exception.handler", _HANDLERS["deserialization"], default="log-and-fail"
    )
    processing_exception_handler: str = _key(
        "processing.exception.handler", _HANDLERS["processing"], default="log-and-fail"
    )
    production_exception_handler: str = _key(
        "production.exception.handler", _HANDLERS["production"], default="log-and-fail"
    )
    errors_dead_letter_queue_topic_name: str = _key(
        "errors.dead.letter.queue.topic.name", _DLQ, default=""
    )

    def __init__(self, /, **data: Any) -> None:
        """Validate ``data`` (dotted keys); raise ConfigError listing every problem."""
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigError(_describe(exc)) from None

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
        root = os.environ.get(ROOT_ENV_VAR)
        if isinstance(data, dict) and "topics.root" not in data and root:
            return {**data, "topics.root": root}
        return data

    @model_validator(mode="before")
    @classmethod
    def _gather_storage_options(cls, data: Any) -> Any:
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

    @field_validator("metrics_recording_level", mode="before")
    @classmethod
    def _upper_level(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("application_id")
    @classmethod
    def _check_application_id(cls, value: str) -> str:
        bad = "".join(sorted({char for char in value if not _APP_ID_CHAR.fullmatch(char)}))
        if not value:
            raise _invalid("must not be empty")
        if len(value) > _MAX_APP_ID:
            raise _invalid(f"is {len(value)} characters long, more than {_MAX_APP_ID}")
        if bad:
            raise _invalid(f"contains characters not allowed in topic names: {bad!r}")
        return value

    @field_validator("default_key_serde", "default_value_serde")
    @classmethod
    def _check_serde(cls, value: str) -> str:
        if value.lower() in BUILTIN_SERDES:  # as common.serdes.serde_from_name
            return value.lower()
        if _is_import_path(value):
            return value
        raise _invalid("neither a built-in serde name nor a dotted import path")

    @field_validator("rocksdb_config_setter")
    @classmethod
    def _check_config_setter(cls, value: str) -> str:
        if value and not _is_import_path(value):
            raise _invalid("not a dotted import path (pkg.module.Name or pkg.module:Name)")
        return value

    @field_validator(
        "deserialization_exception_handler",
        "processing_exception_handler",
        "production_exception_handler",
    )
    @classmethod
    def _check_handler(cls, value: str, info: ValidationInfo) -> str:
        kind = _HANDLER_KINDS[str(info.field_name)]
        try:
            return check_handler(kind, value)
        except ValueError as exc:
            raise _invalid(str(exc)) from None

    @field_validator("errors_dead_letter_queue_topic_name")
    @classmethod
    def _check_dead_letter_topic(cls, value: str) -> str:
        if value and (not _TOPIC_NAME.fullmatch(value) or value in {".", ".."}):
            raise _invalid("not a valid topic name")
        return value

    @field_validator("statestore_uncommitted_max_bytes")
    @classmethod
    def _check_uncommitted_bytes(cls, value: int) -> int:
        if value != -1 and value <= 0:
            raise _invalid("must be -1 or greater than 0")
        return value

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
            raise _invalid("\n".join(problems))
        return self

    @property
    def eos_enabled(self) -> bool:
        """Whether processing.guarantee is exactly_once or exactly_once_v2."""
        return self.processing_guarantee in _EOS

    def get(self, key: str) -> str | int:
        """Return the value of a dotted key; raise ConfigError if the key is unknown."""
        key = _DEPRECATED_KEYS.get(key, key)
        if key not in _ALLOWED:
            raise ConfigError(_unknown_key(key))
        value: str | int = getattr(self, _FIELD_BY_ALIAS[key])
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
        return cls(**_check_keys(mapping))

    @classmethod
    def from_properties(cls, path: str | os.PathLike[str]) -> StreamsConfig:
        """Build a configuration from a Java ``.properties`` file; raise ConfigError."""
        return cls.from_dict(_read_properties(Path(path)))

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str]) -> StreamsConfig:
        """Build a configuration from a YAML mapping of dotted or nested keys (or both).

        Raises ConfigError if the file cannot be read, is not a mapping, or a key is bad.
        """
        return cls.from_dict(_read_yaml(Path(path)))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> StreamsConfig:
        """Build a configuration from ``STREAMS_CONFIG_*`` variables (default: os.environ).

        After the prefix the name is lower-cased, then ``___`` becomes ``-``, ``__`` becomes
        ``_`` and ``_`` becomes ``.``: ``STREAMS_CONFIG_APPLICATION_ID`` is ``application.id``.
        The ``STREAMS_ROOT`` fallback for ``topics.root`` always reads os.environ.
        """
        return cls.from_dict(_env_mapping(os.environ if environ is None else environ))

    @classmethod
    def load(
        cls, *sources: _Source, env: bool = True, overrides: Mapping[str, object] | None = None
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
            merged.update(_read_source(source))
        if env:
            merged.update(_env_mapping(os.environ))
        merged.update(_check_keys(overrides or {}))
        return cls.from_dict(merged)


_FIELD_BY_ALIAS: Final = {f.alias or n: n for n, f in StreamsConfig.model_fields.items()}
_ALLOWED: Final = {f.alias or n: f.description or "" for n, f in StreamsConfig.model_fields.items()}


def _alias_of(name: str) -> str:
    field = StreamsConfig.model_fields.get(name)
    return (field.alias or name) if field is not None else name


def _unknown_key(key: str) -> str:
    close = difflib.get_close_matches(key, list(_ALLOWED), n=1)
    return f"{key}: unknown configuration key" + (f"; did you mean {close[0]}?" if close else "")


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


def _describe_one(error: ErrorDetails) -> str:
    if not error["loc"]:  # cross-key problems come fully worded
        return error["msg"]
    key = str(error["loc"][0])
    allowed = _ALLOWED.get(key, "")
    if error["type"] == "extra_forbidden":
        return _unknown_key(key)
    if error["type"] == "missing" and key == "topics.root":
        return f"{key}: missing; set {key} or the {ROOT_ENV_VAR} variable; allowed: {allowed}"
    if error["type"] == "missing":
        return f"{key}: missing (required, no default); allowed: {allowed}"
    return f"{key}: {_reason(error)} (got {error['input']!r}); allowed: {allowed}"


def _describe(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False)
    # a factory depending on a field that failed reports nothing the user can fix
    return "\n".join(_describe_one(e) for e in errors if e["type"] != "default_factory_not_called")


def _check_keys(mapping: Mapping[Any, object]) -> dict[str, object]:
    for key in mapping:
        if not isinstance(key, str):
            raise ConfigError(f"{key!r}: configuration keys must be strings")
    return dict(mapping)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read configuration file ({exc})") from exc


def _read_properties(path: Path) -> dict[str, str]:
    return parse_properties(_read_text(path), source=str(path))


def _read_yaml(path: Path) -> dict[str, object]:
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


def _read_source(source: _Source) -> Mapping[str, object]:
    if isinstance(source, Mapping):
        return _check_keys(source)
    path = Path(source)
    readers: dict[str, Callable[[Path], Mapping[str, object]]] = {
        ".properties": _read_properties,
        ".yaml": _read_yaml,
        ".yml": _read_yaml,
    }
    if path.suffix.lower() in readers:
        return readers[path.suffix.lower()](path)
    raise ConfigError(
        f"{path}: unsupported configuration file suffix {path.suffix!r}; "
        "allowed: .properties, .yaml, .yml"
    )


def _env_mapping(environ: Mapping[str, str]) -> dict[str, str]:
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
