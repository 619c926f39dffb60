"""Every read path checks what it reads: a torn newest commit (cut at a line boundary or
mid-line), a commit that does not parse, a lowered partition count, offsets that do not
follow and an unreadable log are refused by the project's readers and CLI in one line
naming the table, the version or file, and what to do, or (a torn newest commit whose
commitInfo survived) recovered; where they read at all, deltalake and polars then agree
with the project's readers or the project's readers refuse. None answers shorter with
exit 0.

What delta-rs does with a torn commit (checked below): a file cut at a line boundary is a
valid commit of the actions left (an empty file: a commit of nothing), so deltalake and
polars read fewer records and no error; a file cut mid-line fails to load ("Truncated
record"). Delta has no checksum of a commit, so only the project's commitInfo (written
first; it lists the commit's files, and its transaction) can tell. Whoever of the project
opens the table first (a reader, a command, a producer) completes such a commit from its
commitInfo, as Kafka's broker recovers a torn segment tail on opening a log, so that
deltalake and polars read every record too; when the commitInfo is lost with the rest,
every reader here refuses the table naming the torn commit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import polars as pl
import pytest
from deltalake import DeltaTable

from runtime.storage.compaction import compact_changelog
from runtime.storage.delta_log import LogDamageError, PartitionCountError, log_path
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.txn.coordinator import TransactionCoordinator
from tests.clitools import cli
from tests.delta_readers import readers_agree
from tests.log_kit import plain_commits, transaction_commit

COMMANDS = [
    ["get-offsets", "--topic", "t"],
    ["console-consume", "--topic", "t", "--from-beginning", "--timeout-ms", "200"],
    ["topics", "--describe", "--topic", "t"],
]
FULL = 190  # 3 x 50 plain records and a transaction of 40


def _fill(admin: TopicAdmin) -> str:
    """Create topic t (2 partitions): three plain commits, then a transaction's commit
    (version 4, the newest); return the newest commit's path."""
    admin.create("t", 2)
    plain_commits(admin, "t", 3)
    transaction_commit(admin, "t")
    return log_path(admin.root, admin.table_path("t"), 4)


def _delta_rows(admin: TopicAdmin) -> int | None:
    """Rows deltalake reads (None: it refuses the table); polars must read the same."""
    path = admin.table_path("t")
    try:
        rows: int | None = int(DeltaTable(path).to_pyarrow_table().num_rows)
    except Exception:  # delta-rs refuses the table: nobody reads it short
        rows = None
    try:
        assert pl.read_delta(path).height == rows
    except AssertionError:
        raise
    except Exception:
        assert rows is None
    return rows


def _refused(root: str, match: str) -> None:
    """The project's reader and every read command refuse, in one plain line."""
    with pytest.raises(LogDamageError, match=match):
        TopicReader(root).end_offsets("t")
    for command in COMMANDS:
        done = cli(root, *command)
        assert done.returncode != 0, (command, done.stdout)
        assert len(done.stderr.strip().splitlines()) == 1, (command, done.stderr)
        assert "unexpected" not in done.stderr and "\x1b[" not in done.stderr
        assert match.split(".*", maxsplit=1)[0] in done.stderr, (command, done.stderr)


def _lines(admin: TopicAdmin) -> list[bytes]:
    raw = Path(log_path(admin.root, admin.table_path("t"), 4)).read_bytes()
    lines = raw.splitlines(keepends=True)
    assert len(lines) == 4  # commitInfo, two adds, the transaction's txn
    assert b"commitInfo" in lines[0] and b"txn" in lines[3]
    return lines


def _recovered(admin: TopicAdmin, root: str, path: Path) -> None:
    """The torn commit was completed: every reader reads all, the torn file is kept."""
    assert sum(readers_agree(admin, root, "t").values()) == FULL
    assert Path(root, "_quarantine", "topics", "t", "_delta_log", path.name).exists()
    for command in COMMANDS:
        assert cli(root, *command).returncode == 0, command


@pytest.mark.parametrize("keep", [1, 2, 3])
@pytest.mark.parametrize("opener", ["reader", "console-consume", "console-produce"])
def test_a_newest_commit_torn_at_a_line_boundary_is_completed_by_its_first_reader(
    admin: TopicAdmin, root: str, keep: int, opener: str
) -> None:
    """Cut after its commitInfo and ``keep - 1`` more actions: delta-rs reads it short until
    the first of the project's readers or writers opens the table; from then on every
    reader (deltalake and polars included) reads every record."""
    path = Path(_fill(admin))
    path.write_bytes(b"".join(_lines(admin)[:keep]))
    rows = _delta_rows(admin)
    assert rows is not None  # delta-rs reads what is left, no error
    assert rows < FULL if keep < 3 else rows == FULL  # (3: only the txn guard is lost)
    if opener == "reader":
        assert sum(TopicReader(root).end_offsets("t").values()) == FULL
    elif opener == "console-consume":
        done = cli(root, *COMMANDS[1])
        assert done.returncode == 0 and len(done.stdout.splitlines()) == FULL, done.stderr
        assert "completed the torn commit 4" in done.stderr, done.stderr
    else:
        done = cli(root, "console-produce", "--topic", "t", stdin="a\n")
        assert done.returncode == 0, done.stderr
        assert sum(TopicReader(root).end_offsets("t").values()) == FULL + 1
        return
    _recovered(admin, root, path)


@pytest.mark.parametrize("keep", [1, 2])
def test_a_torn_compaction_commit_is_completed_with_its_removes(
    admin: TopicAdmin, root: str, keep: int
) -> None:
    """A changelog compaction's commit (it adds the merged file and removes the files it
    replaces) cut after its commitInfo, or after one more action: delta-rs reads the
    replaced records twice or not at all; the first reader here rebuilds the lost adds and
    removes, and every reader serves each record once."""
    admin.create("c", 1, configs={"cleanup.policy": "compact"})
    producer = Producer(admin)
    for i in range(4):
        for j in range(10):
            producer.send("c", b"k%d" % (j % 3), b"v%d" % (i * 10 + j), timestamp=i * 10 + j)
        producer.flush()
    before = readers_agree(admin, root, "c")
    compact_changelog(root, "c", 0, horizon=30, delete_retention_ms=10**9, now_ms=10**6)
    compacted = readers_agree(admin, root, "c")
    assert sum(compacted.values()) < sum(before.values())
    path = Path(log_path(admin.root, admin.table_path("c"), 5))
    lines = path.read_bytes().splitlines(keepends=True)
    assert b"streams.compaction" in lines[0] and len(lines) > 1 + keep
    path.write_bytes(b"".join(lines[:keep]))
    delta = DeltaTable(admin.table_path("c")).to_pyarrow_table().num_rows
    assert delta != sum(compacted.values())  # delta-rs reads it wrong
    assert readers_agree(admin, root, "c") == compacted  # the first reader completed it


def test_an_empty_newest_commit_is_refused(admin: TopicAdmin, root: str) -> None:
    """An empty commit (its commitInfo lost with the rest): nothing tells what it held;
    delta-rs reads it as a commit of nothing, every reader here refuses the table."""
    path = Path(_fill(admin))
    path.write_bytes(b"")
    rows = _delta_rows(admin)
    assert rows is not None and rows < FULL
    _refused(root, "commit 4 .*is empty")
    produced = cli(root, "console-produce", "--topic", "t", stdin="a\n")
    assert produced.returncode != 0 and "is empty" in produced.stderr  # nothing lands past it
    assert path.read_bytes() == b""
    staged = sorted(Path(admin.table_path("t"), "txn-staging").rglob("*.parquet"))
    assert len(staged) == 2  # the lost commit's files: nothing references them now
    TransactionCoordinator(admin).delete_orphans(min_age_ms=0)
    assert sorted(Path(admin.table_path("t"), "txn-staging").rglob("*.parquet")) == staged


def test_a_newest_commit_torn_mid_line_is_completed_when_its_commit_info_is_whole(
    admin: TopicAdmin, root: str
) -> None:
    path = Path(_fill(admin))
    lines = _lines(admin)
    path.write_bytes(lines[0] + lines[1] + lines[2][:40])
    assert _delta_rows(admin) is None  # delta-rs: "Truncated record"
    _recovered(admin, root, path)


def test_a_newest_commit_torn_inside_its_commit_info_is_refused_by_every_reader(
    admin: TopicAdmin, root: str
) -> None:
    path = Path(_fill(admin))
    path.write_bytes(path.read_bytes()[:60])
    assert _delta_rows(admin) is None  # delta-rs: "Truncated record"
    _refused(root, "commit 4 of the Delta log of .* does not parse")


def test_a_commit_that_does_not_parse_is_named(admin: TopicAdmin, root: str) -> None:
    _fill(admin)
    Path(log_path(admin.root, admin.table_path("t"), 2)).write_bytes(b"garbage{\n")
    assert _delta_rows(admin) is None
    _refused(root, "commit 2 of the Delta log of .* does not parse")


def test_a_lowered_partition_count_is_refused_and_set_back(admin: TopicAdmin, root: str) -> None:
    _fill(admin)
    before = TopicReader(root).end_offsets("t")
    DeltaTable(admin.table_path("t")).alter.set_table_properties(
        {"streams.partitions": "1"}, raise_if_not_exists=False
    )
    assert _delta_rows(admin) == FULL
    with pytest.raises(PartitionCountError, match="lowered from 2 to 1") as err:
        TopicReader(root).end_offsets("t")
    assert err.value.old == 2 and err.value.new == 1
    assert "streams.partitions" in str(err.value) and "--partitions 2" in str(err.value)
    _refused(root, "the table property streams.partitions was lowered")
    less = cli(root, "topics", "--alter", "--topic", "t", "--partitions", "1")
    assert less.returncode != 0 and "can only be increased" in less.stderr
    fixed = cli(root, "topics", "--alter", "--topic", "t", "--partitions", "2")
    assert fixed.returncode == 0, fixed.stderr
    assert TopicReader(root).end_offsets("t") == before
    assert sum(readers_agree(admin, root, "t").values()) == FULL


def test_offsets_that_do_not_follow_are_named(admin: TopicAdmin, root: str) -> None:
    _fill(admin)
    path = Path(log_path(admin.root, admin.table_path("t"), 3))
    lines = path.read_text().splitlines()
    info = json.loads(lines[0])
    meta = json.loads(info["commitInfo"]["streams.offsets"])
    meta["files"][0][2] += 5  # a base offset that is not the partition's end
    info["commitInfo"]["streams.offsets"] = json.dumps(meta)
    path.write_text("\n".join([json.dumps(info), *lines[1:]]))
    assert _delta_rows(admin) == FULL  # delta-rs does not read offsets
    _refused(root, "the offsets of commit 3 .* do not follow")


def test_an_unreadable_log_is_one_plain_line(admin: TopicAdmin, root: str, tmp_path: Path) -> None:
    _fill(admin)
    log_dir = Path(admin.table_path("t")) / "_delta_log"
    shutil.move(log_dir, tmp_path / "moved")
    log_dir.write_text("in the way")
    with pytest.raises(LogDamageError, match="cannot read the Delta log of"):
        TopicReader(root).end_offsets("t")
    for command in [
        *COMMANDS,
        ["topics", "--alter", "--topic", "t", "--partitions", "3"],
        ["console-produce", "--topic", "t"],
    ]:
        done = cli(root, *command, stdin="a\n")
        assert done.returncode != 0, (command, done.stdout)
        assert len(done.stderr.strip().splitlines()) == 1, (command, done.stderr)
        assert "cannot read the Delta log of" in done.stderr, (command, done.stderr)


@contextmanager
def _read_only(log_dir: str) -> Iterator[None]:
    """Make ``log_dir`` read-only for the block (a bind mount; skips where not allowed)."""
    bind = subprocess.run(["mount", "--bind", log_dir, log_dir], capture_output=True, check=False)
    if bind.returncode != 0:
        pytest.skip("no bind mounts here (needs root)")
    try:
        ro = ["mount", "-o", "remount,bind,ro", log_dir]
        if subprocess.run(ro, capture_output=True, check=False).returncode != 0:
            pytest.skip("cannot remount read-only here")
        yield
    finally:
        subprocess.run(["umount", log_dir], capture_output=True, check=False)


def test_a_read_only_log_is_one_plain_line(admin: TopicAdmin, root: str) -> None:
    _fill(admin)
    with _read_only(os.path.join(admin.table_path("t"), "_delta_log")):
        assert sum(TopicReader(root).end_offsets("t").values()) == FULL  # reads still work
        for command in (
            ["console-produce", "--topic", "t"],
            ["topics", "--alter", "--topic", "t", "--partitions", "3"],
            ["topics", "--alter", "--topic", "t", "--config", "retention.ms=5"],
        ):
            done = cli(root, *command, stdin="a\n")
            assert done.returncode != 0, command
            assert len(done.stderr.strip().splitlines()) == 1, (command, done.stderr)
            assert "\x1b[" not in done.stderr and "unexpected" not in done.stderr
            assert "Read-only file system" in done.stderr and "topic" in done.stderr


def test_a_torn_commit_in_a_read_only_log_is_refused_until_it_can_be_completed(
    admin: TopicAdmin, root: str
) -> None:
    path = Path(_fill(admin))
    path.write_bytes(_lines(admin)[0])
    with _read_only(os.path.join(admin.table_path("t"), "_delta_log")):
        _refused(root, "commit 4 .*is torn.*completing it from its commitInfo failed")
    assert not Path(root, "_quarantine", "topics", "t", "_delta_log", f"{path.name}.1").exists()
    assert sum(readers_agree(admin, root, "t").values()) == FULL  # writable again: completed
