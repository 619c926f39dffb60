"""The transactional key-value bytes store (KIP-892): an uncommitted overlay over a base.

Writes of the open transaction go to a dict overlay (``None`` = deleted) and are read back
(read-your-writes); the base (RocksDB or memory) only ever holds committed data.

* :meth:`TransactionalBytesStore.prepare` persists the overlay as a *prepared batch*
  (with the transaction's ``(transactional_id, sequence)`` and the changelog offset it
  leads to) in the metadata column family, without applying it.
* :meth:`~TransactionalBytesStore.commit` applies the overlay, the new committed changelog
  offset and the removal of the prepared batch in one atomic write.
* :meth:`~TransactionalBytesStore.abort` discards the overlay and the prepared batch.

Changelog offsets are dense and one task writes each changelog partition, so the offset a
commit leads to is the committed offset plus the changes logged in the transaction: a
prepared batch found after a crash knows its offset without reading the changelog.
Durability needs no fsync: whatever a machine crash loses, the changelog still has, and the
store then restores the tail.

Past ``statestore.uncommitted.max.bytes`` of overlay the store calls its commit requester
(the task asks for an early commit); a store no task manages commits by itself instead.
"""

from __future__ import annotations

import logging
import marshal
import os
import struct
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, runtime_checkable

from common.errors import StoreIOError
from statestores.api import StateStoreContext
from statestores.base import Base, MemoryBase, RocksDBBase, destroy, rocksdb_error
from statestores.merge import merge_sorted
from statestores.sorted_keys import SortedKeys

log = logging.getLogger(__name__)

OFFSET_KEY = b"changelog_offset"
PREPARED_KEY = b"prepared"
UNCOMMITTED_MAX_KEY = "statestore.uncommitted.max.bytes"
DEFAULT_UNCOMMITTED_MAX = 64 << 20
_OFFSET = struct.Struct(">q")
_NO_LIMIT = 1 << 62


@runtime_checkable
class TransactionManagingContext(Protocol):
    """A store context that drives transactions (the state manager of a task)."""

    def manages_transactions(self) -> bool:
        """Return True: prepare/commit/abort come from the task, not from ``flush()``."""
        ...


class TransactionalBytesStore:
    """The bottom of every store stack: sorted bytes keys, transactional writes.

    Args:
        name: the store name (also the directory name under ``<task dir>/rocksdb``).
        persistent: RocksDB (True) or memory (False).
    """

    def __init__(self, name: str, *, persistent: bool) -> None:
        self._name = name
        self._persistent = persistent
        self._base: Base = MemoryBase()
        self._overlay: dict[bytes, bytes | None] = {}
        self._overlay_keys = SortedKeys(self._overlay)
        self._range_deletes: list[tuple[bytes, bytes]] = []
        self._open = False
        self._managed = False
        self._temp_dir: str | None = None
        self.path: str | None = None
        self._app_config: dict[str, Any] = {}
        self._limit = DEFAULT_UNCOMMITTED_MAX
        self._budget = self._limit
        self._changes = 0
        self._offset: int | None = None
        self._requester: Callable[[], None] | None = None
        self._early_commit_requested = False
        self.wiped_on_open = False
        #: Why the store was wiped when it opened.
        self.wipe_reason = ""

    # -- StateStore ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The store name."""
        return self._name

    def persistent(self) -> bool:
        """Return whether the data lives in RocksDB."""
        return self._persistent

    def is_open(self) -> bool:
        """Return whether the store is initialised and not closed."""
        return self._open

    def init(self, context: StateStoreContext) -> None:
        """Open the base for ``context``'s task: ``<state_dir>/rocksdb/<name>`` (a temporary
        directory when ``state_dir`` is None) or memory.

        Raises:
            StoreIOError: RocksDB could not open the directory.
        """
        self._app_config = dict(context.app_config)
        limit = int(self._app_config.get(UNCOMMITTED_MAX_KEY, DEFAULT_UNCOMMITTED_MAX))
        self._limit = _NO_LIMIT if limit < 0 else limit
        self._managed = isinstance(context, TransactionManagingContext)
        if self._persistent:
            state_dir = context.state_dir
            if state_dir is None:
                self._temp_dir = tempfile.mkdtemp(prefix=f"store-{self._name}-")
                state_dir = self._temp_dir
            self.path = os.path.join(state_dir, "rocksdb", self._name)
        try:
            self._open_base()
        except StoreIOError as exc:
            if not self._managed or self.path is None:
                raise
            # the task's state manager rebuilds it from snapshot + changelog (and says so)
            log.info("[store %s] unreadable, wiped for restoration: %s", self.name, exc)
            self.wiped_on_open = True
            self.wipe_reason = str(exc)
            destroy(self.path)
            self._open_base()
        if not self._managed and self.prepared_transaction() is not None:
            log.warning(
                "[store %s] no task manages transactions: prepared batch dropped", self.name
            )
            self.resolve_prepared(committed=False)

    def _open_base(self) -> None:
        if self.path is not None:
            self._base = RocksDBBase(self.path, self._name, self._app_config)
        else:
            self._base = MemoryBase()
        raw = self._base.get_meta(OFFSET_KEY)
        self._offset = None if raw is None else _OFFSET.unpack(raw)[0]
        self._reset_overlay()
        self._open = True

    def flush(self) -> None:
        """Commit the overlay when no task manages transactions; otherwise nothing (the task
        calls :meth:`prepare` and :meth:`commit`)."""
        if not self._managed:
            self.commit()

    def close(self) -> None:
        """Close the base; uncommitted writes are dropped (a prepared batch stays)."""
        if not self._open:
            return
        self._reset_overlay()
        self._base.close()
        self._open = False
        if self._temp_dir is not None:
            destroy(self._temp_dir)
            self._temp_dir = None

    # -- reads and writes ----------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        """Return the value of ``key``, uncommitted writes included.

        Raises:
            StoreCorruptedError: RocksDB met a damaged block; StoreIOError: another failure.
        """
        overlay = self._overlay
        if key in overlay:
            return overlay[key]
        try:
            return self._base.get(key)
        except Exception as exc:
            raise rocksdb_error(f"cannot read store {self._name}", exc) from exc

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """The value of each key, uncommitted writes included.

        Raises:
            StoreCorruptedError: RocksDB met a damaged block; StoreIOError: another failure.
        """
        overlay, get = self._overlay, self._base.get
        try:
            if not overlay:  # nothing written since the last commit
                return list(map(get, keys))
            return [overlay[key] if key in overlay else get(key) for key in keys]
        except Exception as exc:
            raise rocksdb_error(f"cannot read store {self._name}", exc) from exc

    def put_many(
        self, keys: list[bytes], values: list[bytes | None], timestamps: list[int]
    ) -> None:
        """Write each key in order (timestamps are not stored here)."""
        overlay = self._overlay
        before = len(overlay)
        fresh = [key for key in keys if key not in overlay] if overlay else keys
        overlay.update(zip(keys, values, strict=True))
        if len(overlay) - before != len(fresh):  # a key twice in ``keys``
            fresh = list(dict.fromkeys(fresh))
        budget = sum(map(len, keys)) + sum(map(len, filter(None, values)))
        self._overlay_keys.added_many(fresh)
        self._changes += len(keys)
        self._budget -= budget
        if self._budget < 0:
            self._over_limit()

    def put(self, key: bytes, value: bytes | None) -> None:
        """Write ``key`` (``None`` deletes) in the open transaction."""
        overlay = self._overlay
        size = len(overlay)
        overlay[key] = value
        if len(overlay) != size:
            self._overlay_keys.added(key)
        self._changes += 1
        self._budget -= len(key) + (0 if value is None else len(value))
        if self._budget < 0:
            self._over_limit()

    def delete_range(self, lo: bytes, hi: bytes) -> None:
        """Delete every key ``lo <= key < hi`` at the next commit, without logging it.

        Used for retention (expired window segments); callers filter expired entries on
        reads, so committed entries in range stay readable until the commit.
        """
        for key in self._overlay_keys.between(lo, hi):
            if key < hi:
                self._overlay[key] = None
        self._range_deletes.append((lo, hi))

    def items(
        self, lo: bytes | None, hi: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Return the entries ``lo <= key <= hi`` (``None``: open) as a snapshot iterator,
        uncommitted writes included, in ascending (or descending) unsigned byte order."""
        base = self._base.items(lo, hi, reverse)
        keys = self._overlay_keys.between(lo, hi, reverse=reverse)
        if not keys:
            return base
        overlay = self._overlay
        return merge_sorted(base, [(k, overlay[k]) for k in keys], reverse=reverse)

    def disk_size(self) -> int | None:
        """The bytes the committed entries take on disk (None: kept in memory)."""
        size = getattr(self._base, "disk_size", None)
        return None if size is None or not self._open else int(size())

    def memtable_size(self) -> int | None:
        """The bytes of committed entries in RocksDB's memtables (None: no RocksDB)."""
        size = getattr(self._base, "memtable_size", None)
        return None if size is None or not self._open else int(size())

    def approximate_num_entries(self) -> int:
        """Return about how many committed entries the store holds, plus the overlay's."""
        return self._base.approximate_num_entries() + len(self._overlay)

    # -- transactions --------------------------------------------------------------------

    def set_commit_requester(self, requester: Callable[[], None] | None) -> None:
        """Call ``requester`` once per transaction when the overlay passes the limit."""
        self._requester = requester

    def uncommitted_bytes(self) -> int:
        """Return the approximate size of the overlay (keys + values written)."""
        return self._limit - self._budget

    def committed_offset(self) -> int | None:
        """Return the changelog offset the committed data reflects (None: never set)."""
        return self._offset

    def pending_changes(self) -> int:
        """Return the number of changes written in the open transaction."""
        return self._changes

    def prepare(self, transactional_id: str, sequence: int) -> None:
        """Persist the overlay as the prepared batch of ``(transactional_id, sequence)``.

        Raises:
            StoreIOError: the batch could not be written.
        """
        if not self._base_is_persistent():
            return
        blob = marshal.dumps(
            (
                transactional_id,
                sequence,
                self._offset_after(),
                self._overlay,
                self._range_deletes,
            )
        )
        self._base.write({}, (), {PREPARED_KEY: blob})

    def commit(self, changelog_offset: int | None = None) -> None:
        """Apply the overlay, the committed offset and the removal of the prepared batch in
        one write.

        Args:
            changelog_offset: the changelog end offset after this transaction; computed
                from the changes logged when None.

        Raises:
            StoreIOError: the write failed; the overlay is kept (call :meth:`abort`).
        """
        offset = self._offset_after() if changelog_offset is None else changelog_offset
        if not self._overlay and not self._range_deletes and offset == self._offset:
            self._changes = 0
            return
        meta: dict[bytes, bytes | None] = {PREPARED_KEY: None}
        if offset is not None:
            meta[OFFSET_KEY] = _OFFSET.pack(offset)
        self._base.write(self._overlay, self._range_deletes, meta)
        self._offset = offset
        self._reset_overlay()

    def abort(self) -> None:
        """Discard the overlay and any prepared batch."""
        self._reset_overlay()
        if self._base_is_persistent() and self._base.get_meta(PREPARED_KEY) is not None:
            self._base.write({}, (), {PREPARED_KEY: None})

    def prepared_transaction(self) -> tuple[str, int] | None:
        """Return ``(transactional_id, sequence)`` of a prepared batch left on disk."""
        prepared = self._load_prepared()
        return None if prepared is None else (prepared[0], prepared[1])

    def resolve_prepared(self, *, committed: bool) -> None:
        """Apply the prepared batch (its transaction committed) or drop it (it aborted)."""
        prepared = self._load_prepared()
        if prepared is None:
            return
        _, _, offset, entries, range_deletes = prepared
        meta: dict[bytes, bytes | None] = {PREPARED_KEY: None}
        if committed:
            if offset is not None:
                meta[OFFSET_KEY] = _OFFSET.pack(offset)
            self._base.write(entries, [tuple(r) for r in range_deletes], meta)
            self._offset = offset
        else:
            self._base.write({}, (), meta)
        log.info(
            "[store %s] prepared batch of %s/%s %s",
            self.name,
            prepared[0],
            prepared[1],
            "applied" if committed else "dropped",
        )

    # -- restoration ---------------------------------------------------------------------

    def restore_batch(self, records: Iterable[tuple[bytes, bytes | None]], end_offset: int) -> int:
        """Apply changelog records straight to the base, with ``end_offset`` as the new
        committed offset, in one write; return how many records were applied."""
        entries: dict[bytes, bytes | None] = {}
        count = 0
        for key, value in records:
            entries[key] = value
            count += 1
        self._base.write(entries, (), {OFFSET_KEY: _OFFSET.pack(end_offset)})
        self._offset = end_offset
        return count

    def set_committed_offset(self, offset: int) -> None:
        """Record ``offset`` as committed without changing data (e.g. an empty changelog)."""
        self._base.write({}, (), {OFFSET_KEY: _OFFSET.pack(offset)})
        self._offset = offset

    def wipe(self) -> None:
        """Delete every entry (and the RocksDB directory) and reopen the store empty."""
        self._base.close()
        if self.path is not None:
            destroy(self.path)
        self._open_base()

    def install(self, fill: Callable[[str], None]) -> None:
        """Replace the store's directory with what ``fill(path)`` creates at ``path`` (a
        downloaded snapshot) and reopen it.

        Raises:
            StoreIOError: the store is in memory.
        """
        if self.path is None:
            raise StoreIOError(f"store {self.name} is in memory; it cannot install a snapshot")
        self._base.close()
        destroy(self.path)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fill(self.path)
        self._open_base()

    def checkpoint(self, path: str) -> None:
        """Write a RocksDB checkpoint of the committed data into the new directory ``path``.

        Raises:
            StoreIOError: the store is in memory or the checkpoint failed.
        """
        base = self._base
        if not isinstance(base, RocksDBBase):
            raise StoreIOError(f"store {self.name} is in memory; it has no checkpoint")
        try:
            base.checkpoint(path)
        except Exception as exc:
            raise StoreIOError(f"cannot checkpoint store {self.name} to {path}: {exc}") from exc

    # -- internals -----------------------------------------------------------------------

    def _base_is_persistent(self) -> bool:
        return isinstance(self._base, RocksDBBase)

    def _offset_after(self) -> int | None:
        if self._offset is None and self._changes == 0:
            return None
        return (self._offset or 0) + self._changes

    def _reset_overlay(self) -> None:
        self._overlay.clear()
        self._overlay_keys.reset()
        self._range_deletes = []
        self._changes = 0
        self._budget = self._limit
        self._early_commit_requested = False

    def _over_limit(self) -> None:
        if not self._managed:
            self.commit()
            return
        if not self._early_commit_requested and self._requester is not None:
            self._early_commit_requested = True
            log.info(
                "[store %s] uncommitted_bytes=%d above %s=%d: early commit requested",
                self.name,
                self.uncommitted_bytes(),
                UNCOMMITTED_MAX_KEY,
                self._limit,
            )
            self._requester()

    def _load_prepared(self) -> tuple[Any, ...] | None:
        if not self._base_is_persistent():
            return None
        raw = self._base.get_meta(PREPARED_KEY)
        if raw is None:
            return None
        try:
            prepared = marshal.loads(raw)
        except (EOFError, ValueError, TypeError) as exc:
            raise PreparedBatchError(
                f"[store {self.name}] the prepared batch cannot be read ({exc})"
            ) from exc
        if not isinstance(prepared, tuple) or len(prepared) != 5:
            raise PreparedBatchError(f"[store {self.name}] the prepared batch is malformed")
        return prepared


class PreparedBatchError(StoreIOError):
    """A prepared batch left by a crash cannot be read. Treated as a corrupted task: the
    store is wiped and restored from snapshot + changelog."""
