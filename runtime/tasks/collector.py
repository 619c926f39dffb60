"""The Spark task's record collector: sink and changelog records into staged files.

A task inside a Spark task knows nothing of the Delta log: the driver's task descriptor
names every topic it may write, with its table path and partition count (with a
topic-name-extractor sink: every topic that existed when the batch was planned, see
:mod:`runtime.thread.output_topics`), and the staging directory of the micro-batch's
transaction. :class:`StagingCollector` buffers the records (Kafka's ``RecordCollector``),
partitions them in one vectorised pass per topic at ``flush()``, and writes one staged
parquet file per (topic, partition): invisible until the driver's commit adds them to each
topic's Delta log.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from common.delta_rows import parse_sink, rows_table
from common.errors import UnknownTopicError
from runtime.storage.accumulator import RecordAccumulator
from runtime.storage.committer import StagedFile, write_file
from runtime.storage.delta_sink import write_rows
from runtime.storage.fs import StorageRoot
from runtime.storage.records import FILE_SCHEMA, headers_array


@dataclass(frozen=True)
class OutputTopic:
    """A topic a task may write: where its table is and how many partitions it has."""

    table_path: str
    partitions: int


class StagingCollector:
    """Collects a task's output and writes it as staged files of one transaction.

    Args:
        root: the storage root URI.
        topics: every topic the task may write (sinks, repartition topics, changelogs).
        staging_dir: the transaction's staging directory, relative to each topic table.
    """

    def __init__(
        self,
        root: str,
        topics: Mapping[str, OutputTopic],
        staging_dir: str,
        *,
        compression: str = "snappy",
    ) -> None:
        self.root = StorageRoot(root)
        self.topics = dict(topics)
        self.staging_dir = staging_dir
        self.compression = compression
        self._acc = RecordAccumulator(
            None, partition_counts={t: o.partitions for t, o in self.topics.items()}
        )
        self._append = self._acc.append
        self._spilled: list[tuple[str, int, pa.Table]] = []
        self.sent = 0

    def send(  # noqa: PLR0917 - the RecordCollector protocol
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Sequence[tuple[str, bytes | None]],
        partition: int | None,
    ) -> None:
        """Buffer one record (``partition`` None: by the key's murmur2 hash).

        Raises:
            UnknownTopicError: ``topic`` does not exist (a topic-name extractor named it).
        """
        if topic not in self.topics:
            raise self._unknown(topic)
        self._append(
            topic,
            key,
            value,
            timestamp=timestamp,
            headers=list(headers) if headers else None,
            partition=partition,
        )
        self.sent += 1

    def send_batch(
        self,
        topic: str,
        keys: list[bytes | None],
        values: list[bytes | None],
        timestamps: list[int],
        headers: Sequence[Sequence[tuple[str, bytes | None]]] | None,
    ) -> None:
        """Buffer records partitioned by their keys' murmur2 hash, as columns (a sink's
        batch, see :mod:`topology.engine.columnar`).

        Raises:
            UnknownTopicError: ``topic`` does not exist.
        """
        if topic not in self.topics:
            raise self._unknown(topic)
        header_array = None
        if headers is not None:
            header_array = headers_array(headers)
        self._acc.append_batch(
            topic, keys, values, timestamps=timestamps, partitions=None, headers=header_array
        )
        self.sent += len(keys)

    def send_partition_batch(
        self,
        topic: str,
        partition: int,
        keys: list[bytes],
        values: list[bytes | None],
        timestamps: list[int],
    ) -> None:
        """Buffer records of one partition, without headers, as columns (a change-logged
        store's batch of changes, see :class:`topology.engine.collector.CollectorChangelog`).

        Raises:
            UnknownTopicError: ``topic`` does not exist.
        """
        if topic not in self.topics:
            raise self._unknown(topic)
        n = len(keys)
        self._acc.append_batch(
            topic,
            keys,
            values,
            timestamps=timestamps,
            partitions=pa.array(np.full(n, partition, dtype=np.int32)),
            headers=None,
        )
        self.sent += n

    def begin(self, staging_dir: str, topics: Mapping[str, OutputTopic]) -> None:
        """Start a batch of a long-lived task: its records go to ``staging_dir`` (the new
        transaction's) and it may write ``topics``."""
        self._acc.clear()
        self._spilled.clear()
        self.staging_dir = staging_dir
        if topics.keys() != self.topics.keys():
            self.topics = dict(topics)
            self._acc = RecordAccumulator(
                None, partition_counts={t: o.partitions for t, o in self.topics.items()}
            )
            self._append = self._acc.append

    def partitions_for(self, topic: str) -> int:
        """Return the partition count of ``topic``.

        Raises:
            UnknownTopicError: ``topic`` does not exist.
        """
        if topic not in self.topics:
            raise self._unknown(topic)
        return self._acc.num_partitions(topic)

    @staticmethod
    def _unknown(topic: str) -> UnknownTopicError:
        return UnknownTopicError(
            f"topic {topic!r} does not exist (a sink's topic-name extractor named it); "
            f"create it first (streams-eos topics --create --topic {topic} --partitions N) "
            "or make the extractor return an existing topic: a sink never creates topics, "
            "as in Kafka"
        )

    def spill(self, topic: str, partition: int, records: pa.Table) -> None:
        """Write ``records`` (a repartition topic's, shuffled inside the batch, which wait
        for the next batch) to ``partition`` of ``topic`` at :meth:`flush`, in order."""
        if topic not in self.topics:
            raise self._unknown(topic)
        self._spilled.append((topic, partition, records))

    def flush(self) -> list[tuple[str, StagedFile]]:
        """Write every buffered and spilled record as staged files; return ``(topic,
        file)`` pairs."""
        spilled: dict[tuple[str, int], list[pa.Table]] = {}
        for topic, partition, records in self._spilled:
            spilled.setdefault((topic, partition), []).append(
                records.select(FILE_SCHEMA.names).cast(FILE_SCHEMA)
            )
        self._spilled = []
        chunks = [((t, p), pa.concat_tables(parts)) for (t, p), parts in spilled.items()]
        chunks.extend(((t, p), c) for t in self._acc.topics() for p, c in self._acc.drain(t))
        out: list[tuple[str, StagedFile]] = []
        for (topic, partition), chunk in chunks:
            sink = parse_sink(topic)
            if sink is not None:  # a Delta sink: the batch's typed rows, one file
                out.append((topic, self._rows_file(topic, sink, chunk)))
                continue
            staged = write_file(
                self.root,
                self.topics[topic].table_path,
                self.staging_dir,
                partition,
                chunk,
                compression=self.compression,
            )
            out.append((topic, staged))
        return out

    def _rows_file(self, topic: str, sink: tuple[str, str], chunk: pa.Table) -> StagedFile:
        mode, table = sink
        rows, keys = rows_table(
            table,
            mode,
            chunk.column("key").to_pylist(),
            chunk.column("value").to_pylist(),
            chunk.column("timestamp").to_pylist(),
        )
        return write_rows(
            self.root,
            self.topics[topic].table_path,
            self.staging_dir,
            rows,
            mode=mode,
            keys=keys,
            compression=self.compression,
        )

    def drain(self, topics: Iterable[str]) -> list[tuple[str, int, pa.Table]]:
        """Remove the buffered records of ``topics`` without writing them; return them as
        ``(topic, partition, records)`` (for records handed on in memory, e.g. a
        repartition shuffled inside the batch)."""
        return [
            (topic, partition, chunk)
            for topic in sorted(topics)
            for partition, chunk in self._acc.drain(topic)
        ]

    def discard(self) -> None:
        """Drop every buffered record (the task failed; its attempt is abandoned)."""
        self._acc.clear()
        self._spilled.clear()
