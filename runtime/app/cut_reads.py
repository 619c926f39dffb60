"""Stores read at a cut: a replica restored up to fixed changelog offsets, from the
application's snapshots or a savepoint's, reading the changelog as it is now or as it was
at the savepoint's cut.

A savepoint (:mod:`runtime.app.savepoints`) keeps each changelog's offset index at its
cut and pins the index's files: :class:`CutReader` reads through that index, so records
a compaction merged away since are read as they were. :class:`SavepointSnapshots` serves
the savepoint's own store snapshots to a replica in place of the application's.
:func:`copy_records` copies a range of a topic, as a reader reads it, into another topic
once (a fork's stores, an upgrade's kept store).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from common.config import StreamsConfig
from common.errors import StreamsError
from runtime.app.store_queries import Replica
from runtime.state.adapters import RootSnapshotStorage, TopicChangelogReader
from runtime.storage.offset_index import OffsetIndex
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin


class _BoundedReader:
    """A changelog reader whose partitions end where ``ends`` says (a read of a fixed cut,
    however far the changelog went on since)."""

    def __init__(self, reader: TopicChangelogReader, ends: dict[tuple[str, int], int]) -> None:
        self.reader = reader
        self.ends = ends

    def offsets(self, topic: str, partition: int) -> tuple[int, int] | None:
        found = self.reader.offsets(topic, partition)
        end = self.ends.get((topic, partition))
        if found is None or end is None:
            return found
        return found[0], min(found[1], end)

    def read(self, topic: str, partition: int, offset: int, max_records: int) -> Any:
        return self.reader.read(topic, partition, offset, max_records)


def replica_of(
    factory: Any,
    config: StreamsConfig,
    admin: TopicAdmin,
    *,
    task_id: str,
    directory: str,
    ends: dict[tuple[str, int], int],
    reader: TopicChangelogReader | None = None,
    snapshots: Any = None,
) -> Replica:
    """A replica of one partition of a store restored up to ``ends`` (changelog topic and
    partition -> offset) and no further, in ``directory``; ``.store`` reads it.

    Args:
        reader: reads the changelog (default: as it is now; a :class:`CutReader`'s for a
            savepoint's cut).
        snapshots: the snapshots to start from (default: the application's).
    """
    bounded = _BoundedReader(reader or TopicChangelogReader(admin), ends)
    return Replica(
        factory,
        config,
        admin,
        task_id=task_id,
        directory=directory,
        reader=bounded,
        snapshots=snapshots,
    )


class CutReader(TopicReader):
    """A topic reader that reads the topics of ``cuts`` (topic -> offset index JSON) as
    they were at the cut, and any other topic as it is now."""

    def __init__(self, admin: TopicAdmin, cuts: Mapping[str, dict[str, Any]]) -> None:
        super().__init__(admin)
        self._cuts = {t: OffsetIndex.from_json({**c, "removed": {}}) for t, c in cuts.items()}

    def index(self, topic: str) -> OffsetIndex:
        """The topic's index at the cut (now, for a topic without one)."""
        found = self._cuts.get(topic)
        return found if found is not None else super().index(topic)


class SavepointSnapshots:
    """The snapshot storage of a savepoint: the keys a state manager asks for under
    ``snapshots/<application.id>/`` are read from and written to the savepoint's
    ``stores/`` directory instead."""

    def __init__(self, admin: TopicAdmin, application_id: str, stores_prefix: str) -> None:
        self.storage = RootSnapshotStorage(admin.root)
        self._from = f"snapshots/{application_id}/"
        self._to = stores_prefix.rstrip("/") + "/"

    def _key(self, key: str) -> str:
        return self._to + key[len(self._from) :] if key.startswith(self._from) else key

    def _back(self, key: str) -> str:
        return self._from + key[len(self._to) :] if key.startswith(self._to) else key

    def put_file(self, local_path: str, key: str) -> None:
        """Upload a file."""
        self.storage.put_file(local_path, self._key(key))

    def get_file(self, key: str, local_path: str) -> None:
        """Download a file."""
        self.storage.get_file(self._key(key), local_path)

    def put_bytes(self, key: str, data: bytes) -> None:
        """Write bytes."""
        self.storage.put_bytes(self._key(key), data)

    def get_bytes(self, key: str) -> bytes | None:
        """Read bytes (None: no such key)."""
        return self.storage.get_bytes(self._key(key))

    def list_keys(self, prefix: str) -> list[str]:
        """The keys under ``prefix``."""
        return [self._back(k) for k in self.storage.list_keys(self._key(prefix))]

    def delete_keys(self, keys: Sequence[str]) -> None:
        """Delete keys."""
        self.storage.delete_keys([self._key(k) for k in keys])


def copy_records(
    admin: TopicAdmin,
    reader: TopicReader,
    source: str,
    target: str,
    *,
    starts: dict[int, int],
    ends: dict[int, int],
) -> None:
    """Append ``source``'s records ``[starts[p], ends[p])`` of each partition (as
    ``reader`` reads them: now, or at a cut) to the same partition of ``target``, in one
    commit; nothing when ``target`` holds them already (an earlier start copied them). A
    fork's stores and in-flight records, an upgrade's kept store.

    Raises:
        StreamsError: ``target`` holds other records (a copy cut short, or records of its
            own): it must be emptied first; or has fewer partitions than ``source``.
    """
    tables = {}
    for partition, end in sorted(ends.items()):
        start = max(starts.get(partition, 0), reader.index(source).log(partition).start)
        if end > start:
            tables[partition] = reader.read(source, partition, start, end - start)
    held = admin.index(target).end_offsets()
    if any(p not in held for p in tables):
        raise StreamsError(
            f"topic {target} has {len(held)} partitions, fewer than the {source} records "
            "copied into it need: give it as many partitions"
        )
    if held == {p: (tables[p].num_rows if p in tables else 0) for p in held} and tables:
        return
    if any(held.values()):
        raise StreamsError(
            f"topic {target} holds records already, not the {source} records copied into "
            "it: a copy cut short, or a used application id; reset it "
            "(streams-eos application-reset) and start again"
        )
    producer = Producer(admin, buffer_memory=1 << 62)  # one commit: all or nothing
    for partition, table in tables.items():
        producer.send_batch(
            target,
            table.column("key").combine_chunks(),
            table.column("value").combine_chunks(),
            timestamps=table.column("timestamp").combine_chunks(),
            partitions=[partition] * table.num_rows,
            headers=table.column("headers").combine_chunks(),
        )
    producer.flush()
