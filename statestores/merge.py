"""Merge a committed snapshot iterator with the overlay's entries (read-your-writes)."""

from __future__ import annotations

from collections.abc import Iterator


def merge_sorted(
    base: Iterator[tuple[bytes, bytes]],
    overlay: list[tuple[bytes, bytes | None]],
    *,
    reverse: bool,
) -> Iterator[tuple[bytes, bytes]]:
    """Yield ``base`` and ``overlay`` merged by key; an overlay entry replaces the base
    entry of the same key and a ``None`` overlay value hides it.

    Args:
        base: committed entries, sorted in the iteration direction.
        overlay: uncommitted entries, sorted in the same direction.
        reverse: whether both run in descending order.
    """
    index, count = 0, len(overlay)
    for key, value in base:
        while index < count:
            okey, ovalue = overlay[index]
            if okey == key:
                break
            if (okey < key) != reverse:  # the overlay entry comes first
                index += 1
                if ovalue is not None:
                    yield okey, ovalue
            else:
                break
        if index < count and overlay[index][0] == key:
            ovalue = overlay[index][1]
            index += 1
            if ovalue is not None:
                yield key, ovalue
            continue
        yield key, value
    for okey, ovalue in overlay[index:]:
        if ovalue is not None:
            yield okey, ovalue
