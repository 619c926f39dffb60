"""Tests of the compare-and-swap log, run against both backends on real files."""

from __future__ import annotations

import fcntl
import json
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError

from common.errors import CoordinatorError, GenerationFencedError
from runtime.storage.fs import StorageRoot
from runtime.storage.retries import WriteNotLandedError, abort_when
from runtime.txn import cas_file
from runtime.txn.cas_delta import DOCUMENT_KEY, NONCE_KEY, TARGET_KEY
from runtime.txn.cas_log import Backend, CasLog

BACKENDS: list[Backend] = ["file", "delta"]
PARTS = ("txn", "log-a")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    """Return each backend in turn."""
    value: Backend = request.param
    return value


def make(
    tmp_path: Path,
    backend: Backend,
    parts: tuple[str, ...] = PARTS,
    keep: int = 10,
    retention_seconds: float = 0.0,
) -> CasLog:
    """Return a fresh CasLog object (its own cache, like another process)."""
    root = StorageRoot(tmp_path)
    return CasLog(root, parts, keep=keep, backend=backend, retention_seconds=retention_seconds)


def version_file(
    tmp_path: Path, backend: Backend, version: int, parts: tuple[str, ...] = PARTS
) -> Path:
    """Return the file that holds ``version`` of the log."""
    directory = tmp_path.joinpath(*parts)
    if backend == "delta":
        directory = directory / "_delta_log"
    return directory / f"{version:020d}.json"


def raw_document(
    tmp_path: Path, backend: Backend, version: int, parts: tuple[str, ...] = PARTS
) -> Any:
    """Read a version's document straight from storage, bypassing CasLog; None when the
    version is void (a delta commit that landed past the version it was written for)."""
    text = version_file(tmp_path, backend, version, parts).read_text()
    if backend == "file":
        return json.loads(text)
    for line in text.splitlines():
        action = json.loads(line)
        if "commitInfo" in action:
            info = action["commitInfo"]
            if info.get(TARGET_KEY, str(version)) != str(version):
                return None
            return json.loads(info[DOCUMENT_KEY])
    raise AssertionError(f"no commitInfo in version {version}")


def fill(log: CasLog, count: int) -> None:
    """Append versions 0 .. count-1 with counter == version."""
    for version in range(count):
        assert log.append(version - 1, {"counter": version})


def test_empty_log_reads_none(tmp_path: Path, backend: Backend) -> None:
    log = make(tmp_path, backend)
    assert log.read_latest() is None
    assert log.versions() == []
    assert not log.exists()


def test_append_and_read_round_trip(tmp_path: Path, backend: Backend) -> None:
    log = make(tmp_path, backend)
    first = {"state": "Ongoing", "partitions": ["a-0", "b-1"], "epoch": 3, "note": "é ∑ \n"}
    assert log.append(-1, first)
    assert log.read_latest() == (0, first)
    assert log.append(0, {"state": "PrepareCommit"})
    assert log.read_latest() == (1, {"state": "PrepareCommit"})
    assert make(tmp_path, backend).read_latest() == (1, {"state": "PrepareCommit"})
    assert log.versions() == [0, 1]
    assert log.exists()
    assert raw_document(tmp_path, backend, 0) == first


def test_stale_expected_version_loses_and_changes_nothing(tmp_path: Path, backend: Backend) -> None:
    log, other = make(tmp_path, backend), make(tmp_path, backend)
    fill(log, 2)
    assert other.read_latest() == (1, {"counter": 1})
    assert log.append(1, {"counter": 2})
    assert not other.append(1, {"counter": 99})  # other's view is stale
    assert not log.append(0, {"counter": 99})
    assert log.versions() == [0, 1, 2]
    assert raw_document(tmp_path, backend, 2) == {"counter": 2}
    assert other.read_latest() == (2, {"counter": 2})
    assert other.append(2, {"counter": 3})  # after re-reading it wins
    assert log.read_latest() == (3, {"counter": 3})


def test_creating_version_zero_twice(tmp_path: Path, backend: Backend) -> None:
    first, second = make(tmp_path, backend), make(tmp_path, backend)
    assert first.append(-1, {"who": "first"})
    assert not second.append(-1, {"who": "second"})
    assert not first.append(-1, {"who": "first again"})
    assert second.read_latest() == (0, {"who": "first"})
    assert first.versions() == [0]


def test_append_past_the_newest_version_leaves_no_gap(tmp_path: Path, backend: Backend) -> None:
    log = make(tmp_path, backend)
    assert not log.append(4, {"counter": 5})  # empty log: version 4 does not exist
    fill(log, 1)
    assert not make(tmp_path, backend).append(3, {"counter": 4})
    assert log.versions() == [0]
    assert log.read_latest() == (0, {"counter": 0})


def test_invalid_arguments(tmp_path: Path, backend: Backend) -> None:
    with pytest.raises(ValueError, match="keep"):
        make(tmp_path, backend, keep=0)
    log = make(tmp_path, backend)
    with pytest.raises(ValueError, match="expected_version"):
        log.append(-2, {})
    with pytest.raises(TypeError):
        log.append(-1, {"bad": object()})
    assert log.versions() == []


RACER = textwrap.dedent(
    """
    import json, os, sys, time
    from runtime.storage.fs import StorageRoot
    from runtime.txn.cas_log import CasLog
    from common.errors import CoordinatorError

    root, backend, writer, rounds, compact_every = sys.argv[1:3] + [int(a) for a in sys.argv[3:]]
    # A short retention, as the delta backend needs: a version is deleted only once it is
    # older than the longest a writer stalls between reading and checking its commit.
    log = CasLog(StorageRoot(root), ("race",), backend=backend, keep=3, retention_seconds=0.5)
    open(os.path.join(root, f"ready-{writer}"), "w").close()
    while not os.path.exists(os.path.join(root, "go")):
        time.sleep(0.001)
    wins = losses = errors = 0
    while wins < rounds:
        try:
            latest = log.read_latest()
            version, counter = (-1, -1) if latest is None else (latest[0], latest[1]["counter"])
            assert counter <= version, f"version {version} holds counter {counter}"  # voids
            if log.append(version, {"counter": counter + 1, "writer": writer}):
                wins += 1
                if compact_every and wins % compact_every == 0:
                    log.compact()
            else:
                losses += 1
        except CoordinatorError:  # a delta load racing a compaction with a short retention
            errors += 1
    print(json.dumps({"wins": wins, "losses": losses, "errors": errors}))
    """
)


def run_racers(script: str, sync: Path, argv: list[list[str]]) -> list[Any]:
    """Start one process of ``script`` per argument list; once each has written
    ``<sync>/ready-<n>``, let them go (``<sync>/go``); return each one's JSON output."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in argv
    ]
    deadline = time.monotonic() + 60
    while not all((sync / f"ready-{w}").exists() for w in range(len(argv))):
        assert time.monotonic() < deadline, "racers did not start"
        time.sleep(0.01)
    (sync / "go").touch()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out))
    return results


def race(tmp_path: Path, backend: Backend, writers: int, rounds: int, compact_every: int) -> int:
    """Run racing writer processes; return their successful appends (checked per writer)."""
    argv = [
        [str(tmp_path), backend, str(w), str(rounds), str(compact_every)] for w in range(writers)
    ]
    results = run_racers(RACER, tmp_path, argv)
    losses, errors = (sum(r[k] for r in results) for k in ("losses", "errors"))
    print(f"\n{backend}: {sum(r['wins'] for r in results)} appends, {losses} lost races, {errors=}")
    assert all(r["wins"] == rounds for r in results)
    assert losses > 0  # the writers really raced
    if backend == "file":
        assert errors == 0
    return writers * rounds


def test_racing_processes_never_lose_an_update(tmp_path: Path, backend: Backend) -> None:
    total = race(tmp_path, backend, writers=4, rounds=50, compact_every=0)
    log = CasLog(StorageRoot(tmp_path), ("race",), backend=backend)
    versions = log.versions()
    assert versions == list(range(len(versions)))  # 0..M without gaps
    documents = [raw_document(tmp_path, backend, v, ("race",)) for v in versions]
    if backend == "file":
        assert None not in documents  # no void versions: M + 1 == successful appends
    counters = [d["counter"] for d in documents if d is not None]
    assert counters == list(range(total))  # each one is the previous + 1: no lost update
    latest = log.read_latest()
    assert latest is not None and latest[0] == versions[-1]
    assert latest[1]["counter"] == total - 1


def test_racing_processes_that_also_compact(tmp_path: Path, backend: Backend) -> None:
    total = race(tmp_path, backend, writers=4, rounds=50, compact_every=5)
    log = CasLog(StorageRoot(tmp_path), ("race",), backend=backend, keep=3, retention_seconds=0)
    latest = log.read_latest()
    assert latest is not None
    assert latest[1] == {"counter": total - 1, "writer": latest[1]["writer"]}
    if backend == "file":
        assert latest[0] == total - 1
    log.compact()
    newest = latest[0]
    kept = log.versions()
    assert kept[-1] == newest and kept == list(range(kept[0], newest + 1))
    assert len(kept) >= 3  # 3, or more when the newest valid version is older
    assert log.read_latest() == latest


def land_moved_commit(tmp_path: Path, meant_for: int, document: dict[str, Any]) -> int:
    """Commit to the delta log as delta-rs does when it moves an action-less commit past
    newer versions: the commit records ``meant_for`` but lands at the next free version.
    Returns the version it landed at."""
    uri = str(tmp_path.joinpath(*PARTS))
    table = DeltaTable(uri)
    metadata = {DOCUMENT_KEY: json.dumps(document), NONCE_KEY: "moved", TARGET_KEY: str(meant_for)}
    table.create_write_transaction(
        [], "append", pa.schema([("x", pa.int32())]),
        commit_properties=CommitProperties(custom_metadata=metadata),
    )  # fmt: skip
    return DeltaTable(uri).version()


def test_a_delta_commit_moved_past_its_version_is_void(tmp_path: Path) -> None:
    log, reader = make(tmp_path, "delta", keep=1), make(tmp_path, "delta")
    fill(log, 3)
    assert land_moved_commit(tmp_path, 2, {"counter": 99}) == 3  # a stale writer's document
    assert raw_document(tmp_path, "delta", 3) is None
    for view in (log, reader, make(tmp_path, "delta")):  # cached, stale and cold readers
        assert view.read_latest() == (3, {"counter": 2})
    assert not log.has_after(2)  # a void version fences nobody
    log.compact()  # keep=1, but the newest valid version stays
    assert log.versions() == [2, 3]
    assert make(tmp_path, "delta").read_latest() == (3, {"counter": 2})
    assert not log.append(2, {"counter": 3})  # version 3 is taken, void or not
    assert log.append(3, {"counter": 3})
    assert log.has_after(3) and not log.has_after(4)
    assert reader.read_latest() == (4, {"counter": 3})
    log.compact()
    assert log.versions() == [4]


def test_compaction_keeps_the_newest(tmp_path: Path, backend: Backend) -> None:
    log = make(tmp_path, backend, keep=3)
    stale = make(tmp_path, backend)
    log.compact()  # empty: nothing to do
    fill(log, 3)
    log.compact()  # not more than keep: nothing to do
    assert log.versions() == [0, 1, 2]
    assert stale.read_latest() == (2, {"counter": 2})
    for version in range(3, 25):
        assert log.append(version - 1, {"counter": version})
    log.compact()
    assert log.versions() == [22, 23, 24]
    assert log.read_latest() == (24, {"counter": 24})
    assert make(tmp_path, backend).read_latest() == (24, {"counter": 24})  # cold start
    assert stale.read_latest() == (24, {"counter": 24})  # its cached version is gone
    assert not stale.append(2, {"counter": 3})
    assert not stale.append(-1, {"counter": 0})  # version 0 is gone, the log is not empty
    assert log.versions() == [22, 23, 24]
    assert stale.append(24, {"counter": 25})
    log.compact()
    assert log.versions() == [23, 24, 25]
    assert make(tmp_path, backend, keep=1).versions() == [23, 24, 25]


def test_compaction_with_keep_one_keeps_the_newest(tmp_path: Path, backend: Backend) -> None:
    log = make(tmp_path, backend, keep=1)
    fill(log, 5)
    log.compact()
    assert log.versions() == [4]
    assert make(tmp_path, backend).read_latest() == (4, {"counter": 4})
    assert log.append(4, {"counter": 5})


def test_delete_removes_the_log(tmp_path: Path, backend: Backend) -> None:
    log, other = make(tmp_path, backend), make(tmp_path, backend)
    fill(log, 3)
    assert other.read_latest() == (2, {"counter": 2})
    log.delete()
    assert not tmp_path.joinpath(*PARTS).exists()
    assert not log.exists()
    assert log.read_latest() is None
    assert other.read_latest() is None
    assert not other.append(2, {"counter": 3})
    log.delete()  # deleting a missing log is fine
    assert other.append(-1, {"counter": 0, "reborn": True})
    assert log.read_latest() == (0, {"counter": 0, "reborn": True})


def _corrupt(path: Path, backend: Backend, kind: str) -> None:
    if kind == "garbage":
        path.write_bytes(b"\x00\xffnot json at all")
        return
    if backend == "file":
        path.write_text("[1, 2]")  # JSON, but not a document
        return
    lines = []
    for line in path.read_text().splitlines():
        action = json.loads(line)
        if "commitInfo" in action:
            action["commitInfo"][DOCUMENT_KEY] = '{"counter": 1'  # truncated document
        lines.append(json.dumps(action))
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("kind", ["garbage", "wrong-shape"])
def test_corrupt_version_raises_naming_the_file(
    tmp_path: Path, backend: Backend, kind: str
) -> None:
    fill(make(tmp_path, backend), 2)
    path = version_file(tmp_path, backend, 1)
    _corrupt(path, backend, kind)
    with pytest.raises(CoordinatorError, match=re.escape(path.name)):
        make(tmp_path, backend).read_latest()


def test_stray_files_are_ignored(tmp_path: Path, backend: Backend) -> None:
    log = make(tmp_path, backend, keep=2)
    fill(log, 2)
    directory = version_file(tmp_path, backend, 0).parent
    ours = f".{2:020d}.{'ab' * 16}.tmp"  # left behind by a crashed appender
    foreign = [f"{7:020d}.json.tmp", f"{5:020d}.json~", "README"]
    for name in [ours, *foreign]:
        (directory / name).write_text("{half a docu")
    fresh = make(tmp_path, backend)
    assert fresh.versions() == [0, 1]
    assert fresh.read_latest() == (1, {"counter": 1})
    assert fresh.append(1, {"counter": 2})
    assert log.read_latest() == (2, {"counter": 2})
    log.compact()
    assert log.versions() == [1, 2]
    assert make(tmp_path, backend).read_latest() == (2, {"counter": 2})
    assert all((directory / name).exists() for name in foreign)  # not ours to judge
    assert (directory / ours).exists() == (backend == "delta")  # orphans go in compaction


def test_compaction_and_delete_wait_for_appenders(tmp_path: Path) -> None:
    log = make(tmp_path, "file", keep=1)
    fill(log, 3)
    with open(tmp_path.joinpath(*PARTS, ".lock")) as held:
        fcntl.flock(held, fcntl.LOCK_SH)  # an appender between its check and its link
        assert log.append(2, {"counter": 3})  # appenders share the lock
        started = time.monotonic()
        log.compact()  # gives up: deleting now could free a name that appender links
        assert time.monotonic() - started >= 0.4
        assert log.versions() == [0, 1, 2, 3]
        with pytest.raises(CoordinatorError, match="appenders hold the log"):
            log.delete()
        assert log.exists()
    log.compact()
    assert log.versions() == [3]
    log.delete()
    assert not log.exists()


def test_delta_retention_fences_a_stalled_writer(tmp_path: Path) -> None:
    log = make(tmp_path, "delta", keep=2, retention_seconds=3600)
    fill(log, 6)
    uri = str(tmp_path.joinpath(*PARTS))
    stalled = DeltaTable(uri, version=3)  # read version 3, then stalled
    log.compact()
    assert log.versions() == list(range(6))  # all younger than the retention
    with pytest.raises(CommitFailedError):
        stalled.create_write_transaction(
            [],
            "append",
            pa.schema([("x", pa.int32())]),
            commit_properties=CommitProperties(
                custom_metadata={DOCUMENT_KEY: "{}"}, max_commit_retries=0
            ),
        )
    make(tmp_path, "delta", keep=2, retention_seconds=0).compact()
    assert log.versions() == [4, 5]
    assert DeltaTable(uri).version() == 5


def test_file_backend_needs_a_local_root() -> None:
    root = StorageRoot("/tmp")
    root.is_local = False  # stands in for an object-store root without touching the network
    with pytest.raises(ValueError, match="local root"):
        CasLog(root, PARTS, backend="file")
    assert CasLog(root, PARTS).backend == "delta"
    assert CasLog(StorageRoot("/tmp"), PARTS).backend == "file"


def test_a_thousand_appends_in_a_row_each_read_back_as_the_latest(tmp_path: Path) -> None:
    """Appends one after another, each at the version after the last; its rate per
    backend is measured by ``benchmarks/transactions.py``, not here."""
    for backend in BACKENDS:
        log = make(tmp_path, backend, parts=("many", backend))
        count = 1000 if backend == "file" else 100
        for version in range(count):
            document = {"producerId": 4711, "epoch": 3, "seq": version}
            assert log.append(version - 1, document)
            if version % 97 == 0:
                assert make(tmp_path, backend, parts=("many", backend)).read_latest() == (
                    version,
                    document,
                )
        assert not log.append(count - 2, {"late": True})  # a stale version is refused
        assert log.read_latest() == (count - 1, {"producerId": 4711, "epoch": 3, "seq": count - 1})


def test_an_append_waiting_for_an_exclusive_holder_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An appender blocked by a process holding the log exclusively (a compaction, a
    delete, or one that died holding it) names the lock file in a warning, then appends
    once the lock is released."""
    monkeypatch.setattr(cas_file, "_LOCK_WARN_SECONDS", 0.05)
    log = CasLog(StorageRoot(str(tmp_path)), ("logs", "x"), backend="file")
    assert log.append(-1, {"v": 0})
    lock = tmp_path / "logs" / "x" / ".lock"
    with open(lock) as holder:
        fcntl.flock(holder.fileno(), fcntl.LOCK_EX)
        done: list[bool] = []
        appending = threading.Thread(target=lambda: done.append(log.append(0, {"v": 1})))
        appending.start()
        time.sleep(0.3)
        assert not done  # still waiting
        fcntl.flock(holder.fileno(), fcntl.LOCK_UN)
    appending.join(10)
    assert done == [True]
    assert f"for the lock {lock}" in caplog.text and "fuser" in caplog.text


def test_an_append_stops_retrying_when_its_thread_says_the_work_is_void(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transaction log append that did not land is tried again, unless the thread says
    its batch can never commit (out of its group): then the reason comes out unchanged,
    not as a storage error, after the first attempt."""
    log = CasLog(StorageRoot(tmp_path), ("void",), backend="delta")
    calls: list[int] = []

    def not_landed(*_: Any) -> bool:
        calls.append(1)
        raise WriteNotLandedError("append of version 0 did not land: 503 SlowDown")

    monkeypatch.setattr(log._log, "append", not_landed)
    out = GenerationFencedError("member m is out of the group")
    with abort_when(lambda: out), pytest.raises(GenerationFencedError, match="out of the group"):
        log.append(-1, {"state": "Ongoing"})
    assert calls == [1]
    monkeypatch.undo()
    assert log.append(-1, {"state": "Ongoing"})  # the log is fine: nothing was written
