"""The error tree of spark-streams-eos.

Every error the library raises on purpose derives from :class:`StreamsError`. Each class
says when it is raised and what the operator should do next. Errors from the storage layer
(delta-rs, pyarrow, the filesystem) are wrapped at the boundary with ``raise ... from exc``.

This module imports nothing from the project, so every layer may use it.
"""

from __future__ import annotations


class StreamsError(Exception):
    """Root of every error raised by spark-streams-eos."""


class ConfigError(StreamsError, ValueError):
    """A configuration key is unknown, or a value is invalid.

    Raised at start, before anything runs. Fix the named key; the message lists what is
    allowed.
    """


class TopicError(StreamsError):
    """A topic operation was refused; the message names the topic."""


class InvalidTopicError(TopicError, ValueError):
    """A topic name breaks Kafka's rules (``[a-zA-Z0-9._-]``, 1 to 249 characters, not ``.``
    or ``..``). Choose another name."""


class UnknownTopicError(TopicError):
    """The topic does not exist under the storage root. Create it first
    (``streams-eos topics --create``) or check ``topics.root``."""


class TopicExistsError(TopicError):
    """A topic with that name already exists. Use it, or delete it first."""


class InvalidPartitionsError(TopicError, ValueError):
    """A partition count or partition number is out of range (counts only grow; a partition
    number must be below the topic's count)."""


class OffsetOutOfRangeError(StreamsError):
    """A read asked for an offset below the partition's log-start offset or above its
    log-end offset. Seek to a valid offset (see ``get-offsets``) or reset the position."""


class SerializationError(StreamsError):
    """A record could not be serialized or deserialized.

    When raised while reading, the message names the topic, partition and offset of the bad
    record. Fix the producer or the serde; in a topology, a deserialization exception
    handler may skip such records instead.
    """

    def __init__(
        self,
        message: str,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        where = [
            f"{name}={value}"
            for name, value in (("topic", topic), ("partition", partition), ("offset", offset))
            if value is not None
        ]
        super().__init__(f"{message} ({' '.join(where)})" if where else message)
        self.topic = topic
        self.partition = partition
        self.offset = offset


class InvalidRecordError(StreamsError, ValueError):
    """A producer refused one record on ``send``: a field cannot be stored (a timestamp that
    is not a non-negative int, a header that is not a ``(str, bytes)`` pair, a record larger
    than ``max_request_size``). The message names the topic and the field. Only that record is
    refused: the records sent before it stay buffered. Fix the record and send it again."""

    def __init__(self, reason: str, *, topic: str, field: str) -> None:
        super().__init__(f"{reason} (topic={topic} field={field})")
        self.reason = reason
        self.topic = topic
        self.field = field


class StorageError(StreamsError):
    """The topic storage (Delta log, parquet files, filesystem) failed or holds something
    this library cannot interpret. Nothing committed is lost; the message says what was
    found. Check the storage root and retry."""


class CommitTimeoutError(StorageError):
    """A write could not be committed before its deadline because other writers kept
    winning the compare-and-swap on the Delta log. The records were not committed; send
    them again or raise ``delivery.timeout.ms``."""


class CommitOutcomeUnknownError(StorageError):
    """A commit failed in a way that leaves open whether it landed (the log could not be
    read back afterwards). Its files are kept. Look at the topic (``get-offsets``,
    ``console-consume``) before sending the records again, or you may duplicate them."""


class TransactionError(StreamsError):
    """Root of the errors of the transaction protocol."""


class InvalidTxnStateError(TransactionError):
    """A transaction state transition that Kafka's state machine forbids was attempted (the
    message names both states), or an operation was called in a producer state that does
    not allow it (e.g. ``send()`` before ``begin_transaction()``). A bug in the caller:
    fatal for this producer."""


class ProducerFencedError(TransactionError):
    """Another producer with the same ``transactional.id`` (a newer epoch) took over, or the
    coordinator aborted this producer's transaction after its timeout. This producer is a
    zombie: close it; nothing it staged becomes visible. In a stream thread this surfaces as
    ``TaskMigratedError``: rejoin and re-initialise."""


class ConcurrentTransactionsError(TransactionError):
    """The transactional id has a transaction in PrepareCommit/PrepareAbort that another
    process is completing. Retriable: retry after a short back-off."""


class InvalidTransactionTimeoutError(TransactionError, ConfigError):
    """``transaction.timeout.ms`` is above ``transaction.max.timeout.ms`` (or not positive).
    Lower the timeout or raise the maximum."""


class TransactionAbortedError(TransactionError):
    """The transaction was aborted (by the caller, the timeout sweep or a fatal error) and
    cannot be committed; begin a new one."""


class CoordinatorError(TransactionError, StorageError):
    """The transaction log could not be read or written. Nothing was decided; retry."""


class TopologyError(StreamsError):
    """A topology is invalid: it names an unknown store or node, reuses a name, wires
    un-co-partitioned inputs together, lacks a serde, or lacks an explicit name where one is
    required. Raised when the topology is built or first instantiated, before anything runs;
    the message names the offending node. Fix the topology code and build it again."""


class StreamsProcessingError(StreamsError):
    """A user function (a mapper, predicate, aggregator, processor or punctuator) raised while
    processing a record. The message names the processor node, the function and where it is
    defined; the original exception is the ``__cause__``. The task stops: fix the function,
    or skip the bad input upstream, then restart."""


class InvalidTimestampError(StreamsProcessingError):
    """An input record has a negative timestamp and the timestamp extractor fails on invalid
    timestamps (the default, as Kafka's ``FailOnInvalidTimestamp``). Fix the producer, or
    configure ``default.timestamp.extractor`` to skip such records or use partition time."""


class CombinedRecordsLateError(StreamsError):
    """A windowed count's task received records combined per key and window (Spark's
    partial aggregation, inside one batch) that it could not count as the records they
    stand for: one of them falls in a window closed at the stream time it is counted at,
    or they could not be counted inside Arrow. Never seen by an application: the stream
    thread runs the batch again, in the same transaction, without combining."""


class TaskMigratedError(StreamsError):
    """A stream thread lost its tasks: its producer was fenced (a newer epoch of its
    transactional id: the transaction timeout's abort, or a newer process) or its member
    left the group's current generation (paused past ``session.timeout.ms``, or a missed
    rebalance), so its commit was refused and nothing it staged becomes visible. As Kafka's
    ``TaskMigratedException``, it never reaches the uncaught exception handler: the thread
    closes its tasks and rejoins the group. Only when another process took the thread's
    ``group.instance.id`` (two processes with one process id) does the instance stop with
    it: the zombie is this instance."""


class GenerationFencedError(StreamsError):
    """A stream thread's member is no longer its group's current member (it was paused past
    its session timeout, left after ``max.poll.interval.ms``, or missed a rebalance), so its
    tasks may belong to another member now. Inside a batch the runtime aborts the batch
    and stops the thread with :class:`TaskMigratedError`; between batches (at_least_once's
    waiting positions) it drops what it would have committed and rejoins."""


class BatchRetryError(StreamsError):
    """A task's batch cannot go on in this attempt of the Spark job (the host that ran its
    earlier levels is gone, or a store turned out corrupt and was wiped): the runtime runs
    the job again, in the same transaction, as for a lost worker."""


class RestorationCancelledError(StreamsError):
    """A task's restoration stopped because the task left its host (another owner, a
    rebalance) or the host closes; nothing of it was committed, and the next owner
    restores from the committed state."""


class StoreIOError(StreamsError):
    """A store's local files could not be opened, read or written (disk full, permissions,
    corrupted files). Under exactly-once the task is treated as corrupted: its directory is
    wiped and rebuilt from snapshot + changelog; otherwise check the state directory."""


class StoreCorruptedError(StoreIOError):
    """RocksDB found a store's local files damaged (a block's checksum does not match, a
    file is cut short) while the task read or wrote them. Raised by the store, where
    RocksDB's status is read. The runtime treats it as Kafka treats a
    ``TaskCorruptedException``: the task host closes the task, wipes its directory and
    runs the batch again (:class:`BatchRetryError`); the task rebuilds its stores from
    their snapshot and the changelog, which holds every committed write."""


class TaskCorruptedError(StreamsError):
    """A task's local state cannot be trusted: a store's committed changelog offset is ahead
    of its changelog, missing while the store holds data under exactly-once, or the
    changelog (or a prepared batch) is unreadable.

    The store is wiped and rebuilt from the newest snapshot plus the changelog tail; this is
    done automatically when a changelog reader is available. Raised to the caller only when
    rebuilding is impossible (no changelog reader, or the changelog itself is unreadable):
    close the task dirty, delete its state directory and restore it elsewhere, or check the
    changelog topic named in the message.
    """

    def __init__(self, message: str, *, task_id: str | None = None) -> None:
        super().__init__(message)
        self.task_id = task_id
