"""The delta backend of the compare-and-swap log: a small Delta table written by delta-rs.

:class:`DeltaLog` serves object stores (``s3://``, ``gs://``, ``abfs://``), whose delta-rs
log stores implement put-if-absent (S3 conditional writes or a DynamoDB lock, GCS and Azure
preconditions): version ``V`` is delta version ``V``, and the document, the writer's nonce
and the version the commit was meant for ride in the commit's ``commitInfo`` under
:data:`DOCUMENT_KEY`, :data:`NONCE_KEY` and :data:`TARGET_KEY`.
"""

from __future__ import annotations

import operator
import re
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import suppress
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from common.errors import CommitOutcomeUnknownError, CoordinatorError, StorageError
from common.pools import shared_pool
from runtime.storage.fs import StorageRoot, storage_options
from runtime.storage.retries import WriteNotLandedError, retried
from runtime.txn.cas_backend import READ_ATTEMPTS, VERSION_FILE, VOID, Void, parse_document

#: Key of the document in a delta commit's commitInfo.
DOCUMENT_KEY = "cas.document"
#: Key of the writer's nonce in a delta commit's commitInfo.
NONCE_KEY = "cas.nonce"
#: Key of the version a delta commit was meant for; a commit that landed elsewhere is void.
TARGET_KEY = "cas.version"

_LOG_FILE = re.compile(r"^(\d{20})\.")  # any delta log file of a version (commit, checkpoint)
_SCHEMA = pa.schema([("x", pa.int32())])
_TABLE_CONFIG: dict[str, str | None] = {"delta.checkpointInterval": "20"}
_HOOKS = PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)
_key = operator.itemgetter(0)


class DeltaLog:
    """A Delta table whose commits are the versions; delta-rs does the put-if-absent.

    Our version ``V`` *is* delta version ``V``: version 0 is the CREATE commit and every
    later one an action-less commit made from the table loaded at ``V - 1`` with
    ``max_commit_retries=0`` (the CREATE too: left to retry, a losing CREATE lands as
    version 1); the document rides in ``commitInfo["cas.document"]``, with a random nonce so
    that a commit reported failed but landed (a retried PUT) is still known as ours.
    Documents are read straight from ``_delta_log/<V:020d>.json``; delta-rs writes a
    checkpoint every 20 versions.

    ``max_commit_retries=0`` is not quite a put-if-absent: delta-rs looks for newer versions
    before its first attempt and moves an action-less commit, which cannot conflict, past
    them. So each commit also records the version it was meant for (``cas.version``); one
    that landed elsewhere is *void*: its writer is told it lost, readers skip it (the
    newest version's document is then the newest valid one below it), and compaction
    always keeps the newest valid version.

    Object stores have no lock to fence a stalled writer from a compacted (freed) name, so
    compaction (like Delta Lake's own log retention) deletes only versions older than
    ``retention``; a writer stalled longer than that between its read and its commit (or
    between its commit and checking where it landed) is the one case it cannot fence.
    """

    def __init__(self, root: StorageRoot, parts: tuple[str, ...], retention: float) -> None:
        self.root = root
        self.uri = root.uri_of(*parts)
        self.path = root.path(*parts)
        self.retention = retention
        self._table: DeltaTable | None = None
        self._refreshing: Future[None] | None = None

    def _commit_file(self, version: int) -> str:
        return f"{self.path}/_delta_log/{version:020d}.json"

    def versions(self) -> list[int]:
        names = (info.base_name for info in self.root.list_dir(f"{self.path}/_delta_log"))
        return sorted(int(m.group(1)) for name in names if (m := VERSION_FILE.match(name)))

    def has(self, version: int) -> bool:
        return self.root.exists(self._commit_file(version))

    def has_after(self, version: int) -> bool:
        at = version + 1
        while self.has(at):
            if not isinstance(self.document(at), Void):
                return True  # valid, or compacted meanwhile (so newer ones exist)
            at += 1
        return False

    def document(self, version: int) -> dict[str, Any] | Void | None:
        info = self._commit_info(version)
        if info is None:
            return None
        target = info.get(TARGET_KEY)  # absent in commits written before it was recorded
        if target is not None and str(target) != str(version):
            return VOID
        raw = info.get(DOCUMENT_KEY)
        if not isinstance(raw, str):
            raise CoordinatorError(f"{self._commit_file(version)}: no {DOCUMENT_KEY!r} in it")
        return parse_document(raw, self._commit_file(version))

    def _commit_info(self, version: int) -> dict[str, Any] | None:
        path = self._commit_file(version)
        raw = self.root.read_bytes(path)
        if raw is None:
            return None
        for line in raw.splitlines():
            if b'"commitInfo"' in line:
                info = parse_document(line, path).get("commitInfo")
                if isinstance(info, dict):
                    return info
        raise CoordinatorError(f"{path}: corrupt version, no commitInfo")

    def _load(self) -> DeltaTable | None:
        """Return the table at its newest version, or None if it does not exist.

        Raises:
            DeltaError: it could not be loaded (a file vanished under a compaction, thrice).
        """
        self._await_refresh()
        if self._table is not None:
            with suppress(DeltaError):
                self._table.update_incremental()
                return self._table
        self._table = None
        for attempt in range(READ_ATTEMPTS):
            try:
                self._table = DeltaTable(self.uri, storage_options=storage_options(self.uri))
                break
            except TableNotFoundError:
                break
            except DeltaError:
                if attempt == READ_ATTEMPTS - 1:
                    raise
        return self._table

    def append(self, expected_version: int, data: str, durable: bool) -> bool:
        del durable  # an object-store PUT is durable when it returns
        nonce = uuid.uuid4().hex
        target = expected_version + 1
        metadata = {DOCUMENT_KEY: data, NONCE_KEY: nonce, TARGET_KEY: str(target)}
        props = CommitProperties(custom_metadata=metadata, max_commit_retries=0)
        try:
            written = self._write(expected_version, props)
        except CommitFailedError as exc:  # lost the race (or landed, then failed)
            return self._outcome(lambda: self._landed(target, nonce), target, exc)
        except (DeltaError, OSError) as exc:
            # an ambiguous write (the store's answer lost, a reset connection): read back
            # whether this append, by its nonce, is the one there; never blindly retried
            if self._outcome(lambda: self._landed(target, nonce), target, exc):
                return True
            raise WriteNotLandedError(f"append of version {target} did not land: {exc}") from exc
        if written == "stale":
            return False
        if written == "created":
            landed = self._outcome(lambda: self._landed(target, nonce), target, None)
        else:
            landed = self._outcome(lambda: self._committed_at(target, nonce), target, None)
        if landed:
            self._refresh_soon()
        return landed

    def _refresh_soon(self) -> None:
        """Read the version just appended into the handle, off the caller's path: a
        delta-rs handle does not move with its own commits, and the next append (a
        transaction's next state, a moment later) would otherwise read it first."""
        table = self._table
        if table is not None:
            self._refreshing = shared_pool("cas-refresh", 2).submit(table.update_incremental)

    def _await_refresh(self) -> None:
        """Wait for the background read (a failed one leaves the handle behind: the
        next append brings it up to date, or a void commit tells it lost)."""
        pending, self._refreshing = self._refreshing, None
        if pending is not None:
            with suppress(DeltaError, OSError):
                pending.result()

    def _write(self, expected_version: int, props: CommitProperties) -> str:
        """Write version ``expected_version + 1``: ``created`` (the table, with version 0:
        maybe another's), ``written``, or ``stale`` (the log is not at
        ``expected_version``: nothing written)."""
        if expected_version < 0:  # "ignore" returns quietly when the table exists
            self._table = DeltaTable.create(
                self.uri,
                _SCHEMA,
                storage_options=storage_options(self.uri),
                mode="ignore",
                configuration=_TABLE_CONFIG,
                commit_properties=props,
                post_commithook_properties=_HOOKS,
            )
            return "created"
        self._await_refresh()
        table = self._table
        if table is None or table.version() != expected_version:
            table = self._load()
        if table is None or table.version() != expected_version:
            return "stale"
        table.create_write_transaction(
            [], "append", _SCHEMA, commit_properties=props, post_commithook_properties=_HOOKS
        )
        return "written"

    def _outcome(self, check: Callable[[], bool], target: int, cause: BaseException | None) -> bool:
        """``check()`` of whether an append landed, its reads retried. After a write its
        outcome must be known: CommitOutcomeUnknownError when it cannot be read back (never
        a retry, which could take its own landed write for another writer's)."""
        try:
            return retried(check, what=f"read back {self.uri}")
        except (OSError, StorageError, DeltaError) as exc:
            failed = f" failed ({cause}) and" if cause is not None else ""
            raise CommitOutcomeUnknownError(
                f"{self.uri}: the append of version {target}{failed} reading it back failed "
                f"({exc}): whether it landed is unknown"
            ) from exc

    def _landed(self, version: int, nonce: str) -> bool:
        info = self._commit_info(version)
        return info is not None and info.get(NONCE_KEY) == nonce

    def _committed_at(self, target: int, nonce: str) -> bool:
        """After delta-rs reported the commit done: True if it landed at ``target``, False
        if delta-rs moved it past (void). When ``target`` was compacted away meanwhile,
        the commit is looked for among the newer versions; compaction's retention keeps
        both from vanishing before this check (see the class docstring)."""
        info = self._commit_info(target)
        if info is not None:
            return info.get(NONCE_KEY) == nonce
        at = target + 1
        while (later := self._commit_info(at)) is not None:
            if later.get(NONCE_KEY) == nonce:
                return False
            at += 1
        return True

    def compact(self, keep: int) -> None:
        files = [
            (int(m.group(1)), info)
            for info in self.root.list_dir(f"{self.path}/_delta_log")
            if (m := _LOG_FILE.match(info.base_name))
        ]
        commits = sorted((c for c in files if VERSION_FILE.match(c[1].base_name)), key=_key)
        if len(commits) <= keep:
            return
        newest_valid = self._newest_valid([version for version, _ in commits])
        if newest_valid is None:
            return  # another compactor is deleting: leave it to that one
        cut = min(commits[-keep][0], newest_valid)  # the oldest version kept
        too_young = time.time() - self.retention
        for version, info in commits:  # delete a prefix only: readers rely on no gaps
            if version >= cut or info.mtime is None or info.mtime.timestamp() > too_young:
                cut = version
                break
        if cut <= commits[0][0]:
            return
        try:
            options = storage_options(self.uri)  # the log starts at cut after this checkpoint
            DeltaTable(self.uri, version=cut, storage_options=options).create_checkpoint()
        except DeltaError:
            if self.versions()[:1] > [commits[0][0]]:
                return  # another compactor is deleting: leave it to that one
            raise
        for _version, path in sorted((v, i.path) for v, i in files if v < cut):
            self.root.delete_file(path)

    def _newest_valid(self, versions: list[int]) -> int | None:
        """Return the newest of ``versions`` that is not void (None: one vanished)."""
        for version in reversed(versions):
            document = self.document(version)
            if document is None:
                return None
            if not isinstance(document, Void):
                return version
        raise CoordinatorError(f"{self.uri}: every version of the log is void")

    def delete(self) -> None:
        self._await_refresh()
        self._table = None
        self.root.delete_dir(self.path)
