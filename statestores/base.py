"""The committed data of a key-value bytes store: in memory or in RocksDB (rocksdict).

A *base* holds what was committed, nothing else. Writes arrive as one atomic
:meth:`Base.write` of data entries, range deletions and metadata entries (the committed
changelog offset, a prepared batch) — for RocksDB one ``WriteBatch`` over two column
families, so the data and its changelog offset can never disagree after a crash (KIP-892,
KIP-1035). Iterators are snapshots: RocksDB pins its iterators to the state at creation;
the memory base copies the keys in range.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

from rocksdict import Checkpoint, Options, Rdict, WriteBatch

from common.errors import StoreCorruptedError, StoreIOError
from statestores.rocksdb_options import store_options
from statestores.sorted_keys import SortedKeys
from statestores.verify import BackgroundVerification, damage_of

META_CF = "meta"

#: Read every block of a store once after it opens, in the background (see
#: :mod:`statestores.verify`).
VERIFY_KEY = "statestore.verify.on.open"


class Base(Protocol):
    """Committed entries plus a small metadata map, written atomically together."""

    def get(self, key: bytes) -> bytes | None: ...

    def items(
        self, lo: bytes | None, hi: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]: ...

    def write(
        self,
        entries: Mapping[bytes, bytes | None],
        range_deletes: Sequence[tuple[bytes, bytes]],
        meta: Mapping[bytes, bytes | None],
    ) -> None: ...

    def get_meta(self, key: bytes) -> bytes | None: ...

    def approximate_num_entries(self) -> int: ...

    def close(self) -> None: ...


class MemoryBase:
    """Committed entries in a dict with a lazily sorted key index."""

    persistent = False

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.keys = SortedKeys(self.data)
        self.meta: dict[bytes, bytes] = {}
        self.get = self.data.get

    def items(
        self, lo: bytes | None, hi: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        """Return the entries ``lo <= key <= hi`` as a snapshot iterator."""
        data = self.data
        return iter([(k, data[k]) for k in self.keys.between(lo, hi, reverse=reverse)])

    def write(
        self,
        entries: Mapping[bytes, bytes | None],
        range_deletes: Sequence[tuple[bytes, bytes]],
        meta: Mapping[bytes, bytes | None],
    ) -> None:
        """Apply range deletions, then entries, then metadata."""
        data, keys = self.data, self.keys
        for lo, hi in range_deletes:
            for key in keys.below(hi):
                if key >= lo:
                    data.pop(key, None)
            keys.removed()
        for key, value in entries.items():
            if value is None:
                if data.pop(key, None) is not None:
                    keys.removed()
            else:
                size = len(data)
                data[key] = value
                if len(data) != size:
                    keys.added(key)
        for key, value in meta.items():
            if value is None:
                self.meta.pop(key, None)
            else:
                self.meta[key] = value

    def get_meta(self, key: bytes) -> bytes | None:
        """Return a metadata value."""
        return self.meta.get(key)

    def approximate_num_entries(self) -> int:
        """Return the number of entries (exact here)."""
        return len(self.data)

    def close(self) -> None:
        """Drop nothing: an in-memory store lives as long as its object."""


def rocksdb_error(what: str, exc: Exception) -> StoreIOError:
    """The store error for ``exc``, which RocksDB raised ``what`` (``cannot write ...``).

    rocksdict raises RocksDB's ``Status`` as a plain exception whose text starts with the
    status code; a ``Corruption`` status becomes a :class:`StoreCorruptedError`, which
    the runtime recognises by its type. Call it where RocksDB is called, ``raise ... from
    exc``.
    """
    corrupt = str(exc).startswith(_CORRUPTION) or f" {_CORRUPTION}" in str(exc)
    return (StoreCorruptedError if corrupt else StoreIOError)(f"{what}: {exc}")


#: How RocksDB's status text names a corrupt file.
_CORRUPTION = "Corruption:"


class RocksDBBase:
    """Committed entries in a RocksDB database (default column family) and metadata in the
    ``meta`` column family.

    Args:
        path: the database directory (created if missing).
        store_name: passed to the config setter.
        app_config: the application configuration (``rocksdb.config.setter``).

    Raises:
        StoreIOError: RocksDB refused to open the directory.
    """

    persistent = True

    def __init__(self, path: str, store_name: str, app_config: Mapping[str, Any]) -> None:
        self.path = path
        os.makedirs(path, exist_ok=True)
        live_files = sum(1 for name in os.listdir(path) if name.endswith(".sst"))
        options = store_options(store_name, app_config, live_files=live_files)
        meta_options = Options(raw_mode=True)
        try:
            self.db = Rdict(path, options, column_families={META_CF: meta_options})
            self.meta: Any = self.db.get_column_family(META_CF)
            self._meta_handle: Any = self.db.get_column_family_handle(META_CF)
        except Exception as exc:
            raise StoreIOError(f"cannot open RocksDB store {store_name} at {path}: {exc}") from exc
        damage = damage_of(path)
        if damage is not None:  # found by the background check of an earlier open
            self.close()
            raise StoreCorruptedError(f"RocksDB store at {path} is corrupt: {damage}")
        self.verification: BackgroundVerification | None = None
        # A store without table files has no block to check (its write-ahead log's records
        # were checked as the open replayed them): a new store starts no process.
        if live_files and str(app_config.get(VERIFY_KEY, True)).lower() not in ("false", "0"):
            self.verification = BackgroundVerification(self.db, path)
        self.get = self.db.get

    def check_verified(self) -> None:
        """Raise StoreCorruptedError if the background check found a damaged block."""
        found = None if self.verification is None else self.verification.damage()
        if found is not None:
            raise StoreCorruptedError(f"RocksDB store at {self.path} is corrupt: {found}")

    def items(
        self, lo: bytes | None, hi: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        """Return the entries ``lo <= key <= hi``; RocksDB pins the iterator's snapshot.

        The bounds are checked here rather than with ``ReadOptions`` iterate bounds, which
        rocksdict does not apply reliably (the lower bound is ignored backwards).
        """
        items: Any
        if reverse:
            items = _checked(self, self.db.items(backwards=True, from_key=hi), hi, reverse=True)
            return items if lo is None else _until_below(items, lo)
        items = _checked(self, self.db.items(from_key=lo), lo, reverse=False)
        return items if hi is None else _until_above(items, hi)

    def write(
        self,
        entries: Mapping[bytes, bytes | None],
        range_deletes: Sequence[tuple[bytes, bytes]],
        meta: Mapping[bytes, bytes | None],
    ) -> None:
        """Write everything in one ``WriteBatch`` (atomic across both column families).

        Raises:
            StoreCorruptedError: the background check found a damaged block (nothing is
                written: the batch that may have read it is not committed).
            StoreIOError: RocksDB refused the write.
        """
        self.check_verified()
        batch = WriteBatch(raw_mode=True)
        for lo, hi in range_deletes:
            batch.delete_range(lo, hi)
        put, delete = batch.put, batch.delete
        for key, value in entries.items():
            if value is None:
                delete(key)
            else:
                put(key, value)
        handle = self._meta_handle
        for key, value in meta.items():
            if value is None:
                batch.delete(key, handle)
            else:
                batch.put(key, value, handle)
        try:
            self.db.write(batch)
        except Exception as exc:
            raise rocksdb_error(f"cannot write RocksDB store at {self.path}", exc) from exc

    def get_meta(self, key: bytes) -> bytes | None:
        """Return a metadata value."""
        value: bytes | None = self.meta.get(key)
        return value

    def approximate_num_entries(self) -> int:
        """Return RocksDB's estimate of the number of keys."""
        value = self.db.property_int_value("rocksdb.estimate-num-keys")
        return int(value or 0)

    def disk_size(self) -> int:
        """Return the bytes of the database's SST files (RocksDB's
        ``total-sst-files-size``)."""
        value = self.db.property_int_value("rocksdb.total-sst-files-size")
        return int(value or 0)

    def memtable_size(self) -> int:
        """Return the bytes of the database's memtables (RocksDB's
        ``size-all-mem-tables``): written, not yet flushed to SST files."""
        value = self.db.property_int_value("rocksdb.size-all-mem-tables")
        return int(value or 0)

    def checkpoint(self, path: str) -> None:
        """Create a RocksDB checkpoint (hard-linked SST files) in the new directory ``path``."""
        Checkpoint(self.db).create_checkpoint(path)

    def close(self) -> None:
        """Close the database (idempotent)."""
        if getattr(self, "verification", None) is not None:
            self.verification.stop()  # type: ignore[union-attr]
        # RocksDB keeps its lock until every handle on a column family is released too.
        self.meta = self._meta_handle = None
        try:
            self.db.close()
        except Exception:  # already closed
            return


def _checked(
    base: RocksDBBase, items: Any, start: bytes | None, *, reverse: bool
) -> Iterator[tuple[bytes, bytes]]:
    """Yield ``items``; when they run out, check that the range really ended there.

    A RocksDB iterator stops at a block whose checksum fails, without an error: only its
    status tells. When ``items`` ends (not when a caller stops early), an iterator is put
    where the next entry would be and its status is checked, so a damaged block raises
    StoreCorruptedError instead of cutting the range short.
    """
    last = None
    for key, value in items:
        last = key
        yield key, value
    it = base.db.iter()
    if last is not None:
        if reverse:
            it.seek_for_prev(last)
            it.prev()
        else:
            it.seek(last)
            it.next()
    elif start is None:
        if reverse:
            it.seek_to_last()
        else:
            it.seek_to_first()
    elif reverse:
        it.seek_for_prev(start)
    else:
        it.seek(start)
    try:
        it.status()
    except Exception as exc:
        raise rocksdb_error(f"cannot read RocksDB store at {base.path}", exc) from exc


def _until_above(items: Iterator[tuple[bytes, bytes]], hi: bytes) -> Iterator[tuple[bytes, bytes]]:
    for key, value in items:
        if key > hi:
            return
        yield key, value


def _until_below(items: Iterator[tuple[bytes, bytes]], lo: bytes) -> Iterator[tuple[bytes, bytes]]:
    for key, value in items:
        if key < lo:
            return
        yield key, value


def destroy(path: str) -> None:
    """Remove a store directory and everything in it (no error if it is missing)."""
    shutil.rmtree(path, ignore_errors=True)
