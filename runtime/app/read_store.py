"""``read_store``: a store's committed state as a Spark DataFrame (see
:mod:`runtime.app.store_frames`)."""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator, Mapping
from functools import partial
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession, functions
from pyspark.sql.pandas.types import from_arrow_schema

from common.config import StreamsConfig
from common.config_sources import ROOT_ENV_VAR
from common.errors import ConfigError, StreamsError
from runtime.app.store_frames import StoreRead, plan_read, store_batches
from runtime.storage.fs import register_storage_options
from runtime.storage.topics import TopicAdmin

#: The schema's time columns, int64 milliseconds inside the read, timestamps outside.
_TIMES = ("timestamp", "window_start", "window_end", "valid_to")


def read_store(
    spark: SparkSession,
    application_id: str,
    store: str,
    *,
    as_of: str | int | datetime.datetime | None = None,
    root: str | None = None,
    config: Mapping[str, Any] | None = None,
) -> DataFrame:
    """The committed state of ``store`` of application ``application_id`` as a DataFrame.

    One Spark partition per partition of the store, each restored and read on the executor
    that runs it, up to the changelog offsets committed when this is called: the same cut
    however often the DataFrame is evaluated, while the application runs or after it
    stopped. Columns: ``key``, ``value``, ``timestamp``; ``window_start``/``window_end``
    for window and session stores, ``valid_to`` for versioned stores (see
    :mod:`runtime.app.store_frames` for the types).

    Args:
        spark: the session to read with.
        application_id: the application whose store it is (it must have started once: it
            keeps the catalog of its stores in storage).
        store: the store's name (``Materialized.as_(...)``'s, or a processor's store).
        as_of: read the store as a savepoint holds it: the savepoint's name, or a time
            (epoch milliseconds or a ``datetime``) for the newest one taken by then.
        root: the storage root (default: ``STREAMS_ROOT``).
        config: more configuration for the read, e.g. ``storage.options.*`` for an object
            store root.

    Raises:
        ConfigError: no root given and ``STREAMS_ROOT`` unset.
        InvalidStateStoreError: no catalog, no such store, or a store without a changelog.
        SavepointError: ``as_of`` names no savepoint of the application.
    """
    root = root or os.environ.get(ROOT_ENV_VAR)
    if not root:
        raise ConfigError(
            f"read_store: no storage root; pass root=... or set {ROOT_ENV_VAR} to the "
            "application's topics.root"
        )
    given = {"application.id": application_id, **dict(config or {}), "topics.root": root}
    options = StreamsConfig(**given).storage_options
    register_storage_options(root, options)
    read = plan_read(TopicAdmin(root), application_id, store, config, as_of=as_of)
    partitions = sorted(read.ends)  # 0 .. n-1: one Spark partition each
    ids = spark.range(0, len(partitions), 1, numPartitions=max(1, len(partitions)))
    frame = ids.mapInArrow(partial(_read_partitions, read), from_arrow_schema(read.schema))
    columns = [functions.col(name) for name in read.schema.names]
    return frame.select(
        *(
            functions.timestamp_millis(column).alias(name) if name in _TIMES else column
            for name, column in zip(read.schema.names, columns, strict=True)
        )
    )


def _read_partitions(
    read: StoreRead, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``'s function: the entries of the partitions this Spark task was given,
    read in a fork of this worker (see :func:`forked_batches`)."""
    partitions = [p for batch in batches for p in batch.column("id").to_pylist()]
    yield from forked_batches(read, partitions)


def forked_batches(read: StoreRead, partitions: list[int]) -> Iterator[pa.RecordBatch]:
    """:func:`~runtime.app.store_frames.store_batches` in a forked child, streamed back
    over a pipe as Arrow IPC.

    A Spark worker is reused by later Spark tasks, and the first task of an application
    on an executor forks the task host server from its worker. A worker that had opened a
    RocksDB database would hand that fork RocksDB's process-wide state without its
    background threads (flushes and compactions would never run in the hosts) and the
    verification thread of its stores: the worker itself never opens one.

    Raises:
        StreamsError: the child failed (its error, as it reported it).
    """
    data_r, data_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: read, stream, exit without running the worker's cleanup
        os.close(data_r)
        os.close(err_r)
        code = 0
        try:
            with os.fdopen(data_w, "wb") as out, pa.ipc.new_stream(out, read.schema) as writer:
                for batch in store_batches(read, partitions):
                    writer.write_batch(batch)
        except BaseException as exc:
            code = 1
            with contextlib.suppress(BaseException):
                os.write(err_w, f"{type(exc).__name__}: {exc}".encode()[:65_000])
        finally:
            os._exit(code)
    os.close(data_w)
    os.close(err_w)
    try:
        # a child that failed before its schema leaves an empty stream: its error says why
        with os.fdopen(data_r, "rb") as source, contextlib.suppress(pa.ArrowInvalid):
            yield from pa.ipc.open_stream(source)
    finally:
        _, status = os.waitpid(pid, 0)
        with os.fdopen(err_r, "rb") as errors:
            reported = errors.read().decode(errors="replace")
    if status != 0 or reported:
        raise StreamsError(
            f"reading partitions {partitions} of store {read.store!r} failed: "
            f"{reported or f'the reading process ended with status {status}'}"
        )
