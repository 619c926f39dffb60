"""Snapshots: RocksDB checkpoints of a store uploaded beside the changelog, incrementally.

Layout under the snapshot storage (keys are ``/``-separated)::

    snapshots/<application.id>/<task id>/<store>/files/<db identity>/<name>.sst
    snapshots/<application.id>/<task id>/<store>/<offset:020d>/<other files>
    snapshots/<application.id>/<task id>/<store>/<offset:020d>/MANIFEST.json

SST files are immutable and named uniquely within one database (its ``IDENTITY``), so each
is uploaded once and shared by every snapshot that lists it; the small files (MANIFEST,
OPTIONS, CURRENT, WAL) go under the snapshot. ``MANIFEST.json`` is written last: a snapshot
without it is incomplete and ignored. Pruning keeps the newest ``keep`` snapshots and
deletes files no kept snapshot lists.

A snapshot's files are copies of their own (never links to the live store's files), and
its manifest holds each file's size and CRC-32, taken when the file was uploaded: a
download checks them, so a snapshot damaged in storage is found before it is installed
(:class:`SnapshotCorruptError`), and the store is restored from an older one instead.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
import shutil
import tempfile
import time
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from common.errors import StoreIOError
from statestores.protocols import SnapshotStorage

log = logging.getLogger(__name__)

MANIFEST = "MANIFEST.json"
DEFAULT_KEEP = 2
_DOWNLOAD_THREADS = 8  # object stores serve parallel GETs much faster than serial ones


class SnapshotCorruptError(StoreIOError):
    """A snapshot's file does not match its manifest (damaged or truncated in storage)."""


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """A complete snapshot: the changelog offset it reflects, its files (key → name), and
    each file's ``[size, crc32]`` (key → pair; empty for a snapshot written without)."""

    offset: int
    files: dict[str, str]
    created_ms: int
    checksums: dict[str, list[int]] = field(default_factory=dict)


class SnapshotManager:
    """Uploads, lists, downloads and prunes the snapshots of one task's stores.

    Args:
        storage: where snapshots live.
        application_id: the application id.
        task_id: the task id.
        keep: how many snapshots per store pruning keeps.
    """

    def __init__(
        self, storage: SnapshotStorage, application_id: str, task_id: str, keep: int = DEFAULT_KEEP
    ) -> None:
        self.storage = storage
        self.prefix = f"snapshots/{application_id}/{task_id}"
        self.keep = max(1, keep)

    def _store_prefix(self, store: str) -> str:
        return f"{self.prefix}/{store}"

    def upload(self, store: str, checkpoint_dir: str, offset: int) -> SnapshotInfo:
        """Upload the RocksDB checkpoint in ``checkpoint_dir`` as the snapshot at ``offset``.

        Returns:
            The snapshot written.
        """
        base = self._store_prefix(store)
        identity = _identity(checkpoint_dir)
        existing = set(self.storage.list_keys(f"{base}/files/{identity}/"))
        # a shared file keeps the checksum it was uploaded with (not the local file's:
        # that one may have been damaged since)
        known = {k: v for s in self.list(store) for k, v in s.checksums.items()}
        files: dict[str, str] = {}
        checksums: dict[str, list[int]] = {}
        for name in sorted(os.listdir(checkpoint_dir)):
            local = os.path.join(checkpoint_dir, name)
            if name.endswith(".sst"):
                key = f"{base}/files/{identity}/{name}"
                if key not in existing:
                    self.storage.put_file(local, key)
            else:
                key = f"{base}/{offset:020d}/{name}"
                self.storage.put_file(local, key)
            files[key] = name
            kept = known.get(key) if key in existing else None
            checksums[key] = kept if kept is not None else _sum(local)
        info = SnapshotInfo(offset, files, int(time.time() * 1000), checksums)
        manifest = {
            "offset": offset,
            "files": files,
            "created_ms": info.created_ms,
            "checksums": checksums,
        }
        self.storage.put_bytes(f"{base}/{offset:020d}/{MANIFEST}", json.dumps(manifest).encode())
        log.info("[snapshot %s/%s] uploaded offset=%d files=%d", base, store, offset, len(files))
        return info

    def list(self, store: str) -> builtins.list[SnapshotInfo]:
        """Return the complete snapshots of ``store``, oldest first."""
        out = []
        for key in self.storage.list_keys(f"{self._store_prefix(store)}/"):
            if key.endswith(f"/{MANIFEST}"):
                raw = self.storage.get_bytes(key)
                if raw is None:
                    continue
                try:
                    data = json.loads(raw)
                    out.append(
                        SnapshotInfo(
                            int(data["offset"]),
                            dict(data["files"]),
                            int(data["created_ms"]),
                            dict(data.get("checksums", {})),
                        )
                    )
                except (ValueError, KeyError, TypeError):
                    log.warning("[snapshot] ignoring unreadable manifest %s", key)
        return sorted(out, key=lambda s: s.offset)

    def newest(self, store: str, *, at_most: int | None = None) -> SnapshotInfo | None:
        """Return the newest snapshot (with ``offset <= at_most`` when given)."""
        found = [s for s in self.list(store) if at_most is None or s.offset <= at_most]
        return found[-1] if found else None

    def download(self, info: SnapshotInfo, target_dir: str) -> None:
        """Download the files of ``info`` into ``target_dir`` (created; must not exist).

        Raises:
            SnapshotCorruptError: a file is missing or does not match the manifest.
        """
        tmp = tempfile.mkdtemp(prefix=".download-", dir=os.path.dirname(target_dir) or ".")
        try:
            with ThreadPoolExecutor(max_workers=_DOWNLOAD_THREADS) as pool:
                fetches = {
                    key: pool.submit(self._fetch, info, key, os.path.join(tmp, name))
                    for key, name in info.files.items()
                }
                for fetch in fetches.values():
                    fetch.result()
            os.replace(tmp, target_dir)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _fetch(self, info: SnapshotInfo, key: str, local: str) -> None:
        try:
            self.storage.get_file(key, local)
        except FileNotFoundError as exc:
            raise SnapshotCorruptError(f"snapshot file {key} is missing") from exc
        expected = info.checksums.get(key)
        if expected is not None and _sum(local) != list(expected):
            raise SnapshotCorruptError(
                f"snapshot file {key} does not match its manifest (size and CRC-32 "
                f"{_sum(local)}, expected {list(expected)})"
            )

    def prune(self, store: str) -> builtins.list[int]:
        """Delete all but the newest ``keep`` snapshots and unreferenced files.

        Returns:
            The offsets of the snapshots deleted.
        """
        snapshots = self.list(store)
        kept, dropped = snapshots[-self.keep :], snapshots[: -self.keep]
        if not dropped:
            return []
        referenced = {key for s in kept for key in s.files}
        base = self._store_prefix(store)
        dropped_dirs = tuple(f"{base}/{s.offset:020d}/" for s in dropped)
        garbage = [
            key
            for key in self.storage.list_keys(f"{base}/")
            if key not in referenced
            and (key.startswith(f"{base}/files/") or key.startswith(dropped_dirs))
        ]
        # the manifests first: a half-pruned snapshot is incomplete, never wrong
        manifests = [k for k in garbage if k.endswith(f"/{MANIFEST}")]
        self.storage.delete_keys(manifests)
        self.storage.delete_keys([k for k in garbage if not k.endswith(f"/{MANIFEST}")])
        return [s.offset for s in dropped]

    def drop_after(self, store: str, offset: int) -> builtins.list[int]:
        """Delete the snapshots of ``store`` past changelog ``offset`` (a rewind wrote the
        changelog after it again); their files no other snapshot lists go at the next
        prune. Returns the offsets deleted."""
        dropped = [s for s in self.list(store) if s.offset > offset]
        base = self._store_prefix(store)
        for snapshot in dropped:  # the manifest first: a half-deleted one is incomplete
            directory = f"{base}/{snapshot.offset:020d}/"
            self.storage.delete_keys([f"{directory}{MANIFEST}"])
            self.storage.delete_keys(self.storage.list_keys(directory))
        return [s.offset for s in dropped]

    def horizon(self, store: str) -> int | None:
        """Return the offset of the oldest kept snapshot: the changelog below it is never
        read by a restore from a snapshot (compaction may clean it)."""
        snapshots = self.list(store)
        return snapshots[0].offset if snapshots else None


def _sum(path: str) -> list[int]:
    """A file's ``[size, crc32]``."""
    crc, size = 0, 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
    return [size, crc]


def _identity(checkpoint_dir: str) -> str:
    try:
        with open(os.path.join(checkpoint_dir, "IDENTITY"), encoding="utf-8") as f:
            text = f.read().strip()
    except OSError:
        text = ""
    return "".join(c for c in text if c.isalnum() or c == "-") or "unknown"


class LocalSnapshotStorage:
    """:class:`~statestores.protocols.SnapshotStorage` on a local (or mounted) directory.

    Args:
        root: the directory keys are relative to.
    """

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *key.split("/"))

    def put_file(self, local_path: str, key: str) -> None:
        """Copy a file to ``key`` via a temporary name and a rename."""
        target = self._path(key)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = f"{target}.tmp-{os.getpid()}"
        shutil.copyfile(local_path, tmp)
        os.replace(tmp, target)

    def get_file(self, key: str, local_path: str) -> None:
        """Copy ``key`` to ``local_path``."""
        os.makedirs(os.path.dirname(local_path) or ".", exist_ok=True)
        shutil.copyfile(self._path(key), local_path)

    def put_bytes(self, key: str, data: bytes) -> None:
        """Write ``data`` to ``key`` atomically."""
        target = self._path(key)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = f"{target}.tmp-{os.getpid()}"
        with open(tmp, "wb") as out:
            out.write(data)
        os.replace(tmp, target)

    def get_bytes(self, key: str) -> bytes | None:
        """Return the content of ``key`` or None."""
        try:
            with open(self._path(key), "rb") as source:
                return source.read()
        except FileNotFoundError:
            return None

    def list_keys(self, prefix: str) -> list[str]:
        """Return every key under ``prefix``."""
        start = self._path(prefix.rstrip("/"))
        keys = []
        for folder, _, names in os.walk(start):
            rel = os.path.relpath(folder, self.root).replace(os.sep, "/")
            keys += [f"{rel}/{n}" for n in names if ".tmp-" not in n]
        return sorted(keys)

    def delete_keys(self, keys: Sequence[str]) -> None:
        """Delete ``keys``."""
        for key in keys:
            try:
                os.remove(self._path(key))
            except FileNotFoundError:
                continue
