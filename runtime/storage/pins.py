"""Pins: data files of a topic that the vacuum must keep although the log removed them.

A savepoint keeps the files its cut needs (:mod:`runtime.app.savepoints`): the live files
of every topic it covers at the cut. Retention, merges and compactions go on removing
files from the log as always; the vacuum deletes a removed file only when no pin names it,
so a rewind to the cut can add it back, and a read at the cut can still read it. A pin is
one small JSON file per owner under ``<table>/_streams_pins/``; deleting the savepoint
deletes its pins, and the vacuum deletes the files on its next pass.

A Delta sink's table is pinned whole (:func:`pin_table`): while a pin exists, its
maintenance compacts it but neither vacuums it nor cleans its log, so a rewind can restore
the pinned version.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from common.errors import StorageError
from runtime.storage.fs import StorageRoot
from runtime.storage.topics import TopicAdmin

PINS_DIR = "_streams_pins"
_OWNER = re.compile(r"^[A-Za-z0-9._@-]+$")


def _pin_path(table: str, owner: str) -> str:
    if not _OWNER.match(owner):
        raise StorageError(f"pin owner {owner!r} may hold only letters, digits and . _ @ -")
    return f"{table}/{PINS_DIR}/{owner}.json"


def pin(admin: TopicAdmin, topic: str, owner: str, paths: list[str]) -> None:
    """Keep ``paths`` (relative to the table) of ``topic`` from the vacuum for ``owner``."""
    pin_table(admin.root, admin.table_path(topic), owner, files=paths)


def pin_table(root: StorageRoot, table: str, owner: str, *, files: Sequence[str] = ()) -> None:
    """Pin the table at path ``table`` for ``owner`` (``files``: a topic's files kept)."""
    data = json.dumps({"owner": owner, "files": sorted(files)}).encode()
    root.write_bytes(_pin_path(table, owner), data)


def unpin(admin: TopicAdmin, topic: str, owner: str) -> None:
    """Drop ``owner``'s pin of ``topic`` (nothing when it has none)."""
    unpin_table(admin.root, admin.table_path(topic), owner)


def unpin_table(root: StorageRoot, table: str, owner: str) -> None:
    """Drop ``owner``'s pin of the table at path ``table`` (nothing when it has none)."""
    path = _pin_path(table, owner)
    if root.exists(path):
        root.delete_file(path)


def is_pinned(root: StorageRoot, table: str) -> bool:
    """Whether any pin holds the table at path ``table``."""
    return any(i.base_name.endswith(".json") for i in root.list_dir(f"{table}/{PINS_DIR}"))


def pinned(admin: TopicAdmin, topic: str) -> set[str]:
    """Every file of ``topic`` some pin keeps.

    Raises:
        StorageError: a pin cannot be read (the vacuum then deletes nothing it might keep).
    """
    directory = f"{admin.table_path(topic)}/{PINS_DIR}"
    if not admin.root.exists(directory):
        return set()
    kept: set[str] = set()
    for info in admin.root.list_dir(directory):
        if not info.base_name.endswith(".json"):
            continue
        raw = admin.root.read_bytes(info.path)
        try:
            kept.update(str(p) for p in json.loads(raw or b"")["files"])
        except (ValueError, KeyError, TypeError) as exc:
            raise StorageError(
                f"pin {info.path} of topic {topic} is unreadable ({exc}): the vacuum keeps "
                "every file until it is fixed; delete it if its savepoint is gone"
            ) from exc
    return kept
