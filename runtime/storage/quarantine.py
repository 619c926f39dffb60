"""``<root>/_quarantine/``: where damaged or stray files go instead of being deleted.

A file moved or copied there keeps its path under the root (``_quarantine/topics/t/
_delta_log/00000000000000000004.json``), numbered when that name is taken, so nothing a
repair replaced is ever lost and an operator can see what was there.
"""

from __future__ import annotations

import logging

from common.errors import StorageError
from runtime.storage.fs import StorageRoot

log = logging.getLogger(__name__)

QUARANTINE_DIR = "_quarantine"


def target(root: StorageRoot, path: str) -> str:
    """Return where ``path`` goes under ``<root>/_quarantine/`` (its directory made)."""
    relative = path.removeprefix(root.base).lstrip("/")
    place = root.path(QUARANTINE_DIR, relative)
    n = 0
    while root.exists(place):
        n += 1
        place = root.path(QUARANTINE_DIR, f"{relative}.{n}")
    try:
        root.fs.create_dir(place.rsplit("/", 1)[0], recursive=True)
    except OSError as exc:
        raise StorageError(f"cannot make {place}'s directory: {exc}") from exc
    return place


def move(root: StorageRoot, path: str) -> str:
    """Move ``path`` (under the root) to ``<root>/_quarantine/``; return where it went."""
    place = target(root, path)
    try:
        root.fs.move(path, place)
    except OSError as exc:
        raise StorageError(f"cannot move {path} to {place}: {exc}") from exc
    log.warning("moved %s to %s", path, place)
    return place


def copy(root: StorageRoot, path: str) -> str:
    """Copy ``path`` to ``<root>/_quarantine/`` (as :func:`move` moves it)."""
    place = target(root, path)
    root.write_bytes(place, root.read_bytes(path) or b"")
    return place
