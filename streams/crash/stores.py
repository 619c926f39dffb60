"""Store checks of the crash harness: changelogs against the reference, local stores
against their changelogs.

A store's changelog ``<application.id>-<store>-changelog``, read back (latest value per
key), must equal the :class:`~streams.testkit.driver.TopologyTestDriver`'s store byte for byte;
each local RocksDB store under ``state.dir/<application.id>/<task>/rocksdb/<store>``,
opened read-only, must equal its changelog partition once its committed offset reaches the
changelog's end (a store behind restores the tail at its next start, which is no error).
"""

from __future__ import annotations

import marshal
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

from rocksdict import AccessType, Options, Rdict

from runtime.storage.reader import TopicReader
from statestores.base import META_CF
from statestores.segments import META_PREFIX
from statestores.transactional import OFFSET_KEY, PREPARED_KEY
from streams.crash.check import read_topic


@dataclass
class StoreCheck:
    """How one store compares: its changelog with the reference, local stores with it."""

    store: str
    entries: int
    missing: int = 0
    extra: int = 0
    different: int = 0
    local: list[str] = field(default_factory=list)
    local_mismatches: int = 0

    @property
    def ok(self) -> bool:
        """Whether the store equals the reference and every local copy its changelog."""
        return not (self.missing or self.extra or self.different or self.local_mismatches)


def restore_changelog(reader: TopicReader, topic: str) -> dict[int, dict[bytes, bytes]]:
    """Return the latest value per key of each changelog partition (tombstones removed)."""
    out: dict[int, dict[bytes, bytes]] = {}
    for p, records in read_topic(reader, topic).items():
        latest: dict[bytes, bytes | None] = {}
        for key, value in records:
            if key is not None:
                latest[key] = value
        out[p] = {k: v for k, v in latest.items() if v is not None}
    return out


def compare_store(
    name: str,
    kind: str,
    *,
    expected: Mapping[bytes, bytes],
    restored: Mapping[int, Mapping[bytes, bytes]],
    local_dirs: Mapping[int, str],
    changelog_ends: Mapping[int, int],
    unstable: set[bytes] | None = None,
) -> StoreCheck:
    """Compare a store's changelog with the reference and local stores with the changelog.

    Window and session stores drop expired segments without logging it, so for them only
    the reference's entries are required; extra changelog entries are allowed, and their
    metadata entries (per task) are not compared with the reference. Keys in ``unstable``
    (their final value depends on batching) are not compared.
    """
    skip = unstable or set()
    # A window or session store's metadata entries (its processor's observed stream time,
    # last emitted close) are per task; the reference runs one task for all partitions.

    def own(key: bytes) -> bool:
        return key in skip or (kind != "key_value" and key.startswith(META_PREFIX))

    merged = {k: v for part in restored.values() for k, v in part.items() if not own(k)}
    expected = {k: v for k, v in expected.items() if not own(k)}
    check = StoreCheck(name, len(merged))
    check.missing = sum(1 for k in expected if k not in merged)
    check.different = sum(1 for k, v in expected.items() if k in merged and merged[k] != v)
    if kind == "key_value":
        check.extra = sum(1 for k in merged if k not in expected)
    for p, path in sorted(local_dirs.items()):
        verdict, bad = _compare_local(path, restored.get(p, {}), changelog_ends.get(p, 0), kind)
        check.local.append(f"partition {p}: {verdict}")
        check.local_mismatches += bad
    return check


def _compare_local(
    path: str, restored: Mapping[bytes, bytes], end: int, kind: str
) -> tuple[str, int]:
    try:
        entries, offset = read_local_store(path, end)
    except Exception as exc:  # a store we cannot open is reported, not fatal
        return f"unreadable ({exc})", 0
    if offset is None or offset < end:
        return f"behind its changelog ({offset} < {end}); restores the tail at next start", 0
    if offset > end:
        return f"ahead of its changelog ({offset} > {end}); wiped at next start", 0
    if kind == "key_value":
        bad = len(set(entries.items()) ^ set(restored.items()))
    else:
        bad = sum(1 for k, v in entries.items() if restored.get(k) != v)
    return ("equal to its changelog" if not bad else f"{bad} entries differ"), bad


def read_local_store(path: str, changelog_end: int) -> tuple[dict[bytes, bytes], int | None]:
    """Open a RocksDB store read-only; return its entries and committed changelog offset.

    A prepared batch whose offset equals the changelog end belongs to a committed
    transaction (only committed changelog records count): it is applied to the view, as
    the store itself applies it at its next open.
    """
    opts = Options(raw_mode=True)
    db = Rdict(
        path,
        opts,
        column_families={META_CF: Options(raw_mode=True)},
        access_type=AccessType.read_only(),
    )
    try:
        meta = db.get_column_family(META_CF)
        raw_offset, raw_prepared = meta.get(OFFSET_KEY), meta.get(PREPARED_KEY)
        entries = {k: v for k, v in db.items() if isinstance(k, bytes) and isinstance(v, bytes)}
    finally:
        del meta
        db.close()
    offset = None if raw_offset is None else struct.unpack(">q", raw_offset)[0]
    if raw_prepared is not None:
        _tid, _seq, p_offset, overlay, range_deletes = marshal.loads(raw_prepared)
        if p_offset == changelog_end and p_offset != offset:
            for lo, hi in range_deletes:
                for k in [k for k in entries if lo <= k < hi]:
                    del entries[k]
            for k, v in overlay.items():
                if v is None:
                    entries.pop(k, None)
                else:
                    entries[k] = v
            offset = p_offset
    return entries, offset


def local_store_dirs(state_dir: str, application_id: str, store: str) -> dict[int, str]:
    """Return ``partition -> RocksDB directory`` of ``store`` under the state directory."""
    base = os.path.join(state_dir, application_id)
    out: dict[int, str] = {}
    if not os.path.isdir(base):
        return out
    for task in sorted(os.listdir(base)):
        path = os.path.join(base, task, "rocksdb", store)
        if "_" in task and os.path.isdir(path):
            out[int(task.rsplit("_", 1)[1])] = path
    return out
