"""Read standard input as lines for ``console-produce``: in linear time whatever a line's
length, with a pause past the linger said as ``None``, and a progress bar for a file."""

from __future__ import annotations

import os
import select
import stat
from collections.abc import Iterator
from typing import BinaryIO

from streams.cli.progress import ProgressBar

#: A regular file on stdin at least this large draws a progress bar of the bytes read.
BAR_MIN_BYTES = 4 << 20


def stdin_lines(stream: BinaryIO, linger: float) -> Iterator[tuple[int, bytes | None]]:
    """Yield ``(line number, line)``; ``(n, None)`` when input paused past ``linger``.

    When ``stream`` is a regular file (``< big-file.txt``), a progress bar of the bytes
    read is drawn on stderr."""
    fd = stream.fileno()
    info = os.fstat(fd)
    bar = None
    if stat.S_ISREG(info.st_mode) and info.st_size > BAR_MIN_BYTES:
        bar = ProgressBar("reading stdin (bytes)", info.st_size - os.lseek(fd, 0, os.SEEK_CUR))
        bar.__enter__()
    try:
        yield from _read_lines(fd, linger, bar)
    finally:
        if bar is not None:
            bar.close()


def _read_lines(
    fd: int, linger: float, bar: ProgressBar | None
) -> Iterator[tuple[int, bytes | None]]:
    pieces: list[bytes] = []  # the line read so far: joined once, when it ends (a long
    lineno = 0  # line costs its length, not its length squared)
    waiting = False
    while True:
        if waiting and not select.select([fd], [], [], linger)[0]:
            yield lineno, None
            waiting = False
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        if bar is not None:
            bar.update(len(chunk))
        if b"\n" not in chunk:
            pieces.append(chunk)
            continue
        parts = chunk.split(b"\n")
        pieces.append(parts[0])
        parts[0] = b"".join(pieces)
        pieces = [parts.pop()]
        for raw in parts:
            lineno += 1
            yield lineno, raw.removesuffix(b"\r")
        waiting = True
    partial = b"".join(pieces)
    if partial:
        yield lineno + 1, partial.removesuffix(b"\r")
