"""A read that meets a damaged RocksDB block is known by its type at the store boundary.

RocksDB reports a corrupt block as a ``Corruption`` status (rocksdict raises it as a plain
exception); the store raises :class:`~common.errors.StoreCorruptedError` from it, and the
task host (:func:`runtime.tasks.manager.corruption_of`) recognises it by type, however a
processor's error wraps it, to wipe the task's directory and run the batch again.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from common.errors import StoreCorruptedError, StoreIOError, StreamsProcessingError
from common.serdes import Serdes
from runtime.tasks.manager import corruption_of
from statestores.base import VERIFY_KEY, RocksDBBase, rocksdb_error
from statestores.context import StandaloneContext
from statestores.stores import Stores

KEYS = [f"k{i:06d}".encode() for i in range(20_000)]


def damaged_store(state_dir: Path) -> object:
    """A persistent store whose one SST file has 64 bytes overwritten, opened without the
    check at open (so that a read meets the damage)."""
    base = RocksDBBase(str(state_dir / "rocksdb" / "s"), "s", {})
    base.write({key: os.urandom(50) for key in KEYS}, (), {})
    base.db.flush()
    base.close()
    sst = next((state_dir / "rocksdb" / "s").glob("*.sst"))
    with open(sst, "r+b") as f:
        f.seek(sst.stat().st_size // 3)
        f.write(b"\xff" * 64)
    store = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("s"), Serdes.Bytes(), Serdes.Bytes()
    ).build()
    store.init(StandaloneContext(state_dir=str(state_dir), app_config={VERIFY_KEY: "false"}))
    return store


def test_a_read_of_a_damaged_block_raises_store_corrupted(tmp_path: Path) -> None:
    store = damaged_store(tmp_path)
    errors: list[StoreCorruptedError] = []
    try:
        for key in KEYS[::50]:
            try:
                store.get(key)  # type: ignore[attr-defined]
            except StoreCorruptedError as exc:
                errors.append(exc)
    finally:
        store.close()  # type: ignore[attr-defined]
    assert errors, "no read met the damaged block"
    assert "block checksum mismatch" in str(errors[0]) and "store s" in str(errors[0])
    assert errors[0].__cause__ is not None  # RocksDB's own error, kept as the cause
    try:
        try:
            raise errors[0]
        except StoreCorruptedError as exc:
            raise StreamsProcessingError("a processor failed") from exc
    except StreamsProcessingError as wrapped:
        assert corruption_of(wrapped) is errors[0]
    assert corruption_of(ValueError("a user's bug")) is None


def test_only_a_corruption_status_is_a_corruption() -> None:
    corrupt = rocksdb_error("cannot read store s", Exception("Corruption: bad block"))
    full = rocksdb_error("cannot write store s", Exception("IO error: No space left on device"))
    assert type(corrupt) is StoreCorruptedError
    assert type(full) is StoreIOError
    assert str(full) == "cannot write store s: IO error: No space left on device"
    with pytest.raises(StoreIOError):
        raise corrupt
