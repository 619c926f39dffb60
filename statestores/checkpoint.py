"""Kafka's ``OffsetCheckpoint`` file: ``<task dir>/.checkpoint``, changelog offsets per store.

Format (version 0, as Kafka's): a version line, an entry-count line, then one
``<topic> <partition> <offset>`` line per changelog partition. Written under
at_least_once after every commit (temporary file + rename: a reader sees the old or the
new file, never a torn one). Under exactly-once the offsets live inside each store, written
atomically with its data, and no checkpoint file is written.
"""

from __future__ import annotations

import os

from common.errors import StoreIOError

CHECKPOINT_FILE = ".checkpoint"
_VERSION = 0


class OffsetCheckpoint:
    """Reads and writes one checkpoint file.

    Args:
        task_dir: the task's state directory.
    """

    def __init__(self, task_dir: str) -> None:
        self.path = os.path.join(task_dir, CHECKPOINT_FILE)

    def write(self, offsets: dict[tuple[str, int], int]) -> None:
        """Replace the file with ``offsets`` ``{(topic, partition): offset}``.

        Raises:
            StoreIOError: the file could not be written.
        """
        lines = [str(_VERSION), str(len(offsets))]
        lines += [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
        tmp = self.path + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as out:
                out.write("\n".join(lines) + "\n")
            os.replace(tmp, self.path)
        except OSError as exc:
            raise StoreIOError(f"cannot write checkpoint {self.path}: {exc}") from exc

    def read(self) -> dict[tuple[str, int], int]:
        """Return the offsets in the file (empty when there is none).

        Raises:
            StoreIOError: the file exists but is malformed (treat the task as corrupted).
        """
        try:
            with open(self.path, encoding="utf-8") as source:
                lines = source.read().split("\n")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise StoreIOError(f"cannot read checkpoint {self.path}: {exc}") from exc
        try:
            if int(lines[0]) != _VERSION:
                raise ValueError(f"unknown version {lines[0]!r}")
            count = int(lines[1])
            offsets = {}
            for line in lines[2 : 2 + count]:
                topic, partition, offset = line.split(" ")
                offsets[(topic, int(partition))] = int(offset)
            if len(offsets) != count:
                raise ValueError(f"{len(offsets)} entries, the header says {count}")
        except (ValueError, IndexError) as exc:
            raise StoreIOError(f"checkpoint {self.path} is malformed: {exc}") from exc
        return offsets

    def delete(self) -> None:
        """Remove the file (no error if it is missing)."""
        try:
            os.remove(self.path)
        except FileNotFoundError:
            return
