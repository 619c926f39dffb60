"""What a compare-and-swap log's backend provides, and what both backends share.

:class:`VersionStore` is the contract :class:`~runtime.txn.cas_log.CasLog` drives: list,
probe and read versions, put-if-absent the next one, compact, delete. The file backend
(:mod:`runtime.txn.cas_file`) and the delta backend (:mod:`runtime.txn.cas_delta`)
implement it; both name version ``V`` ``<V:020d>.json`` (:data:`VERSION_FILE`), decode a
version with :func:`parse_document`, and retry a read :data:`READ_ATTEMPTS` times. A delta
version whose commit landed past its target is :data:`VOID`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

from common.errors import CoordinatorError

#: The name of version ``V``'s file: ``<V:020d>.json``.
VERSION_FILE = re.compile(r"^(\d{20})\.json$")
#: How often a read is tried while versions vanish under a compaction.
READ_ATTEMPTS = 5


class Void:
    """A delta version whose commit landed past the version it was written for."""

    def __repr__(self) -> str:
        return "VOID"


#: The document of a void version: it holds nothing; read the version below it.
VOID = Void()


class VersionStore(Protocol):
    """The storage of a compare-and-swap log's versions (one backend)."""

    def versions(self) -> list[int]:
        """Return the versions present, oldest first."""

    def has(self, version: int) -> bool:
        """Return True if ``version`` exists."""

    def has_after(self, version: int) -> bool:
        """Return True if a valid version newer than ``version`` exists."""

    def document(self, version: int) -> dict[str, Any] | Void | None:
        """Return the document of ``version``: VOID if void, None if it does not exist."""

    def append(self, expected_version: int, data: str, durable: bool) -> bool:
        """Write ``data`` as version ``expected_version + 1`` if absent; True if this won."""

    def compact(self, keep: int) -> None:
        """Delete all but the newest ``keep`` versions (best effort)."""

    def delete(self) -> None:
        """Remove the whole log."""


def parse_document(raw: bytes | str, where: str) -> dict[str, Any]:
    """Decode one version's document.

    Raises:
        CoordinatorError: it is not a JSON object (the version is corrupt).
    """
    try:
        document = json.loads(raw)
    except ValueError as exc:
        raise CoordinatorError(f"{where}: corrupt version, not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise CoordinatorError(f"{where}: corrupt version, not a JSON object")
    return document
