"""Every configuration key: its type, its default and the values it allows.

:class:`ConfigKeys` declares each key of :class:`~common.config.StreamsConfig` as a field:
the snake_case attribute, the dotted key (its alias), the text saying what is allowed (its
description, quoted by every error about it), the default and the check of a single value
(:mod:`common.config_checks`). The rules across keys, the loaders and the deprecated names
are :class:`~common.config.StreamsConfig`'s.
"""

from __future__ import annotations

import os
import tempfile
from typing import Annotated, Any, Final, Literal, TypeAlias

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from common.config_checks import (
    check_application_id,
    check_byte_bound,
    check_optional_import_path,
    check_optional_topic_name,
    check_serde_name,
    handler_check,
    reject_bool,
    strict_boolean,
    upper_stripped,
)
from common.config_sources import STORAGE_OPTION_PREFIX
from common.handlers_names import ALLOWED as HANDLERS_ALLOWED

ProcessingGuarantee: TypeAlias = Literal["at_least_once", "exactly_once", "exactly_once_v2"]
AutoOffsetReset: TypeAlias = Literal["earliest", "latest", "none"]
DslStore: TypeAlias = Literal["rocksDB", "in_memory"]
ProcessingEngine: TypeAlias = Literal["columnar", "record"]
RecordingLevelName: TypeAlias = Literal["INFO", "DEBUG", "TRACE"]

#: The keys of a topology's configuration (:class:`TopologyConfigKeys`), also the app's.
TOPOLOGY_KEYS: Final = ("ensure.explicit.internal.resource.naming",)

#: The processing.guarantee values of exactly-once.
EOS: Final = frozenset({"exactly_once", "exactly_once_v2"})

Int = Annotated[int, BeforeValidator(reject_bool)]
Boolean = Annotated[bool, BeforeValidator(strict_boolean)]
_ApplicationId = Annotated[str, AfterValidator(check_application_id)]
_SerdeName = Annotated[str, AfterValidator(check_serde_name)]
_ByteBound = Annotated[Int, AfterValidator(check_byte_bound)]
_OptionalImportPath = Annotated[str, AfterValidator(check_optional_import_path)]
_OptionalTopicName = Annotated[str, AfterValidator(check_optional_topic_name)]
_RecordingLevel = Annotated[RecordingLevelName, BeforeValidator(upper_stripped)]
_DeserializationHandler = Annotated[str, AfterValidator(handler_check("deserialization"))]
_ProcessingHandler = Annotated[str, AfterValidator(handler_check("processing"))]
_ProductionHandler = Annotated[str, AfterValidator(handler_check("production"))]

_POSITIVE: Final = "an integer > 0"
_GUARANTEES: Final = "at_least_once, exactly_once_v2 (deprecated: exactly_once, exactly_once_beta)"
_COMMIT: Final = f"{_POSITIVE}, below transaction.timeout.ms"
_TXN: Final = f"{_POSITIVE}, above commit.interval.ms, at most transaction.max.timeout.ms"
_TXN_MAX: Final = f"{_POSITIVE}, at least transaction.timeout.ms"
_AT_LEAST_ONE: Final = "an integer >= 1"
_SERDES: Final = "bytes, string, int, long, double, json, or pkg.module.Name or pkg.module:Name"
_DLQ: Final = "empty (none), or a topic name: 1 to 249 characters from [a-zA-Z0-9._-]"
_EXTRACTORS: Final = (
    "fail_on_invalid, log_and_skip, use_partition_time, wallclock, "
    "or pkg.module.Name or pkg.module:Name"
)


def _default_commit_interval(data: dict[str, Any]) -> int:
    return 100 if data.get("processing_guarantee") in EOS else 30000


def _default_state_dir() -> str:
    return os.path.join(tempfile.gettempdir(), "spark-streams-eos")


def _key(alias: str, allowed: str, **constraints: Any) -> Any:
    """Declare a field: its dotted key, the text saying what is allowed, its constraints."""
    return Field(alias=alias, description=allowed, **constraints)


class ConfigKeys(BaseModel):
    """The keys of a streams application's configuration, each with its default and the
    values it allows (the fields of :class:`~common.config.StreamsConfig`)."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", str_strip_whitespace=True, coerce_numbers_to_str=True
    )

    application_id: _ApplicationId = _key(
        "application.id", "1 to 249 characters from [a-zA-Z0-9._-]"
    )
    processing_guarantee: ProcessingGuarantee = _key(
        "processing.guarantee", _GUARANTEES, default="at_least_once"
    )
    commit_interval_ms: Int = _key(
        "commit.interval.ms", _COMMIT, default_factory=_default_commit_interval, gt=0
    )
    transaction_timeout_ms: Int = _key("transaction.timeout.ms", _TXN, default=60000, gt=0)
    transaction_max_timeout_ms: Int = _key(
        "transaction.max.timeout.ms", _TXN_MAX, default=900000, gt=0
    )
    num_stream_threads: Int = _key("num.stream.threads", _AT_LEAST_ONE, default=1, ge=1)
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
    default_key_serde: _SerdeName = _key("default.key.serde", _SERDES, default="bytes")
    default_value_serde: _SerdeName = _key("default.value.serde", _SERDES, default="bytes")
    num_partitions: Int = _key("num.partitions", _AT_LEAST_ONE, default=1, ge=1)
    statestore_uncommitted_max_bytes: _ByteBound = _key(
        "statestore.uncommitted.max.bytes", f"-1 (unbounded) or {_POSITIVE}", default=64 << 20
    )
    max_poll_records: Int = _key("max.poll.records", _AT_LEAST_ONE, default=1000, ge=1)
    # the most Spark tasks a level of a batch runs: tasks beyond it share one, one after
    # another (a Python Spark task has a fixed cost); 0: the executors' cores (a
    # local-cluster's; else Spark's default parallelism)
    batch_spark_partitions: Int = _key(
        "batch.spark.partitions",
        "an integer >= 0 (0: the executors' cores, Spark's default parallelism)",
        default=0,
        ge=0,
    )
    # the most task host processes an application keeps on one executor: tasks beyond it
    # share hosts (a host runs its tasks' visits one after another); 0: one host per task
    task_hosts_max: Int = _key(
        "task.hosts.max",
        "an integer >= 0 (0: one host process per task)",
        default=64,
        ge=0,
    )
    # how long a batch waits for a task that restores in the background of its host before
    # it goes on without it (the task's records wait for a later batch, once restored),
    # from the host's first visit of the batch; while no task of the thread runs or the
    # batch reads nothing, up to the batch's target time instead; 0: never waits
    restore_wait_ms: Int = _key(
        "restore.wait.ms", "an integer >= 0 (0: a batch never waits)", default=2000, ge=0
    )
    metadata_max_age_ms: Int = _key("metadata.max.age.ms", _POSITIVE, default=300000, gt=0)
    # how often a stream thread looks for new records in its topics (Kafka's poll.ms: how
    # long a poll waits for input)
    poll_ms: Int = _key("poll.ms", _POSITIVE, default=100, gt=0)
    # how long a stream thread may go without a batch while records wait for it before its
    # watchdog warns, counts stalled-total and wakes its query; 0: ten times the larger of
    # poll.ms and the query's trigger interval (commit.interval.ms under exactly-once)
    stall_timeout_ms: Int = _key(
        "stall.timeout.ms", "0 (automatic) or an integer > 0", default=0, ge=0
    )
    max_task_idle_ms: Int = _key(
        "max.task.idle.ms",
        "-1 (never wait) or an integer >= 0",
        default=0,
        ge=-1,
    )
    session_timeout_ms: Int = _key("session.timeout.ms", _POSITIVE, default=45000, gt=0)
    heartbeat_interval_ms: Int = _key("heartbeat.interval.ms", _POSITIVE, default=3000, gt=0)
    max_poll_interval_ms: Int = _key("max.poll.interval.ms", _POSITIVE, default=300000, gt=0)
    group_initial_rebalance_delay_ms: Int = _key(
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
    # Kafka's statestore.cache.max.bytes (KIP-770; cache.max.bytes.buffering is its
    # deprecated name): 0 strips the caching layer from every store, as Kafka does
    statestore_cache_max_bytes: Int = _key(
        "statestore.cache.max.bytes",
        "an integer >= 0 (0 disables caching)",
        default=10485760,
        ge=0,
    )
    # 100 batches: a snapshot every ~10-30 s of processing while input waits (a batch is a
    # transaction under exactly-once; at_least_once runs batches back to back too), so a
    # task that moves replays at most 100 batches of changelog; uploads are incremental
    # (new SST files only).
    statestore_snapshot_interval: Int = _key(
        "statestore.snapshot.interval", "an integer >= 0 (batches; 0 disables)", default=100, ge=0
    )
    # every block of a persistent store is read once after it opens, by another process
    # over a checkpoint (statestores.verify): a damage no read has met fails the next
    # commit; opening costs nothing whatever the store's size
    statestore_verify_on_open: bool = _key(
        "statestore.verify.on.open", "true or false", default=True
    )
    state_cleanup_delay_ms: Int = _key(
        "state.cleanup.delay.ms", "an integer >= 0", default=600000, ge=0
    )
    rocksdb_config_setter: _OptionalImportPath = _key(
        "rocksdb.config.setter", "empty, or pkg.module.Name or pkg.module:Name", default=""
    )
    delete_retention_ms: Int = _key(
        "delete.retention.ms", "an integer >= 0", default=86400000, ge=0
    )
    statestore_snapshots_kept: Int = _key(
        "statestore.snapshots.kept", _AT_LEAST_ONE, default=2, ge=1
    )
    # The log cleaner (Kafka's log manager and log cleaner, Kafka Streams' repartition
    # purge), run by each instance on the topics its application reads and writes.
    log_cleaner_enable: bool = _key("log.cleaner.enable", "true or false", default=True)
    log_retention_check_interval_ms: Int = _key(
        "log.retention.check.interval.ms", _POSITIVE, default=300000, gt=0
    )
    log_cleaner_backoff_ms: Int = _key("log.cleaner.backoff.ms", _POSITIVE, default=15000, gt=0)
    repartition_purge_interval_ms: Int = _key(
        "repartition.purge.interval.ms", _POSITIVE, default=30000, gt=0
    )
    # Topic settings where a topic sets none (Kafka's broker log.* defaults).
    log_retention_ms: Int = _key(
        "log.retention.ms", "-1 (unbounded) or an integer >= 0", default=604800000, ge=-1
    )
    log_retention_bytes: Int = _key(
        "log.retention.bytes", "-1 (unbounded) or an integer >= 0", default=-1, ge=-1
    )
    log_segment_bytes: Int = _key(
        "log.segment.bytes", "an integer >= 1024", default=67108864, ge=1024
    )
    log_roll_ms: Int = _key("log.roll.ms", "an integer >= 1", default=604800000, ge=1)
    log_segment_delete_delay_ms: Int = _key(
        "log.segment.delete.delay.ms", "an integer >= 0", default=60000, ge=0
    )
    log_cleaner_min_compaction_lag_ms: Int = _key(
        "log.cleaner.min.compaction.lag.ms", "an integer >= 0", default=0, ge=0
    )
    # at least a minute: a reader that refreshes a topic's offset index more often never
    # misses a cleaned-up commit (an idler checks, see runtime.storage.topic_log)
    log_delta_retention_ms: Int = _key(
        "log.delta.retention.ms", "an integer >= 60000", default=86400000, ge=60000
    )
    # Kafka's metrics settings; metrics.port serves them in Prometheus' text format
    metrics_recording_level: _RecordingLevel = _key(
        "metrics.recording.level", "INFO, DEBUG or TRACE", default="INFO"
    )
    metrics_sample_window_ms: Int = _key("metrics.sample.window.ms", _POSITIVE, default=30000, gt=0)
    metrics_num_samples: Int = _key("metrics.num.samples", _AT_LEAST_ONE, default=2, ge=1)
    metrics_port: Int = _key(
        "metrics.port",
        "0 (no HTTP endpoint) or a TCP port from 1 to 65535",
        default=0,
        ge=0,
        le=65535,
    )
    deserialization_exception_handler: _DeserializationHandler = _key(
        "deserialization.exception.handler",
        HANDLERS_ALLOWED["deserialization"],
        default="log-and-fail",
    )
    processing_exception_handler: _ProcessingHandler = _key(
        "processing.exception.handler", HANDLERS_ALLOWED["processing"], default="log-and-fail"
    )
    production_exception_handler: _ProductionHandler = _key(
        "production.exception.handler", HANDLERS_ALLOWED["production"], default="log-and-fail"
    )
    errors_dead_letter_queue_topic_name: _OptionalTopicName = _key(
        "errors.dead.letter.queue.topic.name", _DLQ, default=""
    )
    # KIP-1111: true refuses a topology whose state stores, changelog or repartition
    # topics have generated names (StreamsBuilder(config).build(), or the app or test
    # driver starting); false (Kafka's default) only warns when the topology is built
    ensure_explicit_internal_resource_naming: Boolean = _key(
        TOPOLOGY_KEYS[0], "true or false", default=False
    )


class TopologyConfigKeys(BaseModel):
    """The keys a ``StreamsBuilder`` reads when it builds (Kafka's ``TopologyConfig``):
    each declared as in :class:`ConfigKeys`; the application's other keys are ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    ensure_explicit_internal_resource_naming: Boolean = _key(
        TOPOLOGY_KEYS[0], "true or false", default=False
    )


#: dotted key -> attribute name, and dotted key -> what it allows (for errors).
FIELD_BY_KEY: Final = {f.alias or n: n for n, f in ConfigKeys.model_fields.items()}
ALLOWED: Final = {f.alias or n: f.description or "" for n, f in ConfigKeys.model_fields.items()}
