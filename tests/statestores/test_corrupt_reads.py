"""A read that meets a damaged RocksDB block is known by its type at the store boundary.

RocksDB reports a corrupt block as a ``Corruption`` status (rocksdict raises it as a plain
exception); the store raises :class:`~common.errors.StoreCorruptedError` from it, and the
task host (:func:`runtime.tasks.manager.corruption_of`) recognises it by type, however a
processor's error wraps it, to wipe the task's directory and run the batch again.
"""

from __future__ import annotations

import os
import time
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


def _damaged_base(tmp_path: Path, *, verify: bool) -> RocksDBBase:
    """A RocksDB base of 20,000 keys whose one SST file has 64 bytes overwritten."""
    path = str(tmp_path / "s")
    base = RocksDBBase(path, "s", {VERIFY_KEY: "false"})
    base.write({key: os.urandom(50) for key in KEYS}, (), {})
    base.db.flush()
    base.close()
    sst = next(Path(path).glob("*.sst"))
    with open(sst, "r+b") as f:
        f.seek(sst.stat().st_size // 3)
        f.write(b"\xff" * 64)
    return RocksDBBase(path, "s", {VERIFY_KEY: str(verify).lower()})


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("bounds", [(None, None), (KEYS[100], KEYS[-100])])
def test_a_range_read_over_a_damaged_block_raises_instead_of_ending_short(
    tmp_path: Path, reverse: bool, bounds: tuple[bytes | None, bytes | None]
) -> None:
    """RocksDB's iterator stops at a damaged block without an error (only its status
    says so): every range read checks it, so none answers shorter."""
    base = _damaged_base(tmp_path, verify=False)
    seen: list[bytes] = []
    try:
        with pytest.raises(StoreCorruptedError, match="block checksum mismatch"):
            for key, _ in base.items(*bounds, reverse):
                seen.append(key)
        assert 0 < len(seen) < len(KEYS) - 200
        upto = base.items(KEYS[0], KEYS[5], False)  # a range before the damage: whole
        assert [key for key, _ in upto] == KEYS[:6]
    finally:
        base.close()


def test_a_damage_no_read_met_is_found_in_the_background(tmp_path: Path) -> None:
    """Opening costs no full read: another process reads a checkpoint of the store; what
    it finds fails the next write (the batch is not committed) and the next open."""
    start = time.monotonic()
    base = _damaged_base(tmp_path, verify=True)
    assert base.verification is not None
    opened = time.monotonic() - start
    try:
        found = base.verification.wait(60)
        assert found is not None and "block checksum mismatch" in found
        with pytest.raises(StoreCorruptedError, match="block checksum mismatch"):
            base.write({b"k": b"v"}, (), {})
    finally:
        base.close()
    assert opened < 5
    assert not list(tmp_path.glob(".s.verify-*"))  # the checkpoint is gone
    with pytest.raises(StoreCorruptedError, match="block checksum mismatch"):
        RocksDBBase(str(tmp_path / "s"), "s", {})


def test_a_whole_store_passes_its_background_check(tmp_path: Path) -> None:
    base = RocksDBBase(str(tmp_path / "s"), "s", {VERIFY_KEY: "false"})
    base.write({key: b"v" for key in KEYS}, (), {b"offset": b"1"})
    base.db.flush()
    base.close()
    base = RocksDBBase(str(tmp_path / "s"), "s", {})
    try:
        assert base.verification is not None and base.verification.wait(60) is None
        base.write({b"k": b"v"}, (), {})
    finally:
        base.close()
    assert not list(tmp_path.glob(".s.verify-*"))


def test_closing_a_store_ends_its_background_check(tmp_path: Path) -> None:
    base = RocksDBBase(str(tmp_path / "s"), "s", {VERIFY_KEY: "false"})
    base.write({key: b"v" for key in KEYS}, (), {})
    base.close()
    (tmp_path / ".s.verify-dead0000").mkdir()  # left by a process that died mid-check
    for _ in range(3):  # checks queue one at a time; a closed store's is skipped or killed
        RocksDBBase(str(tmp_path / "s"), "s", {}).close()
    last = RocksDBBase(str(tmp_path / "s"), "s", {})
    assert last.verification is not None and last.verification.wait(60) is None
    last.close()
    assert not list(tmp_path.glob(".s.verify-*"))


def test_a_forked_process_checks_its_stores_too(tmp_path: Path) -> None:
    """Task hosts are forked: a child whose parent already checked a store starts its own
    worker (a thread does not survive a fork), so its checks run."""
    RocksDBBase(str(tmp_path / "parent"), "parent", {}).close()  # the parent's worker runs
    damaged = _damaged_base(tmp_path, verify=False)
    damaged.close()
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if its check finds the damage
        code = 1
        try:
            base = RocksDBBase(str(tmp_path / "s"), "s", {})
            found = base.verification.wait(60) if base.verification else None
            base.close()
            code = 0 if found and "block checksum mismatch" in found else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
