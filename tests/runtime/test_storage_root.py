"""StorageRoot's listing while other processes change the directory."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from common.errors import StorageError
from runtime.storage.committer import write_file
from runtime.storage.fs import StorageRoot
from runtime.storage.records import FILE_SCHEMA

_CHURN = """
import os, sys, time
directory = sys.argv[1]
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    os.mkdir(directory)
    names = [os.path.join(directory, f"{i:020d}.json") for i in range(20)]
    for name in names:
        with open(name, "wb") as out:
            out.write(b"{}")
    for name in names:
        os.unlink(name)
    os.rmdir(directory)
"""


def test_listing_while_another_process_creates_and_deletes_lists_what_is_there(
    tmp_path: Path,
) -> None:
    """The harness lists `__consumer_offsets/_delta_log` while the application creates the
    topic and its log cleaner deletes commit files. A directory that appears while it is
    listed, or an entry gone between the directory read and its stat, is listed as it was
    at one moment or the other, and nothing raises."""
    directory = tmp_path / "_delta_log"
    churn = subprocess.Popen([sys.executable, "-c", _CHURN, str(directory)])
    root = StorageRoot(str(tmp_path))
    listings = []
    try:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            listings.append(root.list_dir(str(directory)))
    finally:
        churn.kill()
        churn.wait()
    for infos in listings:
        for info in infos:
            assert info.base_name.endswith(".json")
            assert info.type == pafs.FileType.File and info.size in (0, 2)
    assert any(infos for infos in listings), "the listings never saw the directory's files"
    assert any(not infos for infos in listings), "the listings never missed the directory"


def test_listing_gives_types_sizes_and_times_like_the_filesystem(tmp_path: Path) -> None:
    (tmp_path / "a.parquet").write_bytes(b"x" * 7)
    (tmp_path / "sub").mkdir()
    root = StorageRoot(str(tmp_path))
    ours = {i.base_name: i for i in root.list_dir(str(tmp_path))}
    theirs = {
        i.base_name: i
        for i in pafs.LocalFileSystem().get_file_info(pafs.FileSelector(str(tmp_path)))
    }
    assert ours.keys() == theirs.keys() == {"a.parquet", "sub"}
    for name, info in ours.items():
        assert info.type == theirs[name].type
        assert info.size == theirs[name].size
        assert info.mtime_ns == theirs[name].mtime_ns
        assert info.path == theirs[name].path
    assert root.list_dir(str(tmp_path / "missing")) == []
    with pytest.raises(StorageError, match="cannot list"):
        root.list_dir(str(tmp_path / "a.parquet"))


def test_a_data_file_is_written_whole_where_its_directories_are_missing(tmp_path: Path) -> None:
    """A staged data file is written in one write (its size known without a stat), its
    parent directories created when missing, and read back as written; a path under a
    file raises a StorageError naming it."""
    root = StorageRoot(str(tmp_path))
    records = pa.table(
        {
            "key": pa.array([b"k1", None], pa.binary()),
            "value": pa.array([b"v1", b"v2"], pa.binary()),
            "timestamp": pa.array([7, 3], pa.int64()),
            "headers": pa.nulls(2, FILE_SCHEMA.field("headers").type),
        }
    )
    staged = write_file(
        root, str(tmp_path / "t"), "txn-staging/a/1", 3, records, compression="zstd"
    )
    full = tmp_path / "t" / staged.path
    assert staged.path.startswith("txn-staging/a/1/partition=3/")
    assert staged.size == full.stat().st_size > 0
    assert (staged.partition, staged.count, staged.min_timestamp, staged.max_timestamp) == (
        3,
        2,
        3,
        7,
    )
    assert pq.read_table(full).column("value").to_pylist() == [b"v1", b"v2"]
    second = write_file(
        root, str(tmp_path / "t"), "txn-staging/a/1", 3, records, compression="none"
    )
    assert (
        second.path != staged.path and (tmp_path / "t" / second.path).stat().st_size == second.size
    )
    (tmp_path / "blocked").write_bytes(b"")
    with pytest.raises(StorageError, match="blocked"):
        root.write_file_bytes(str(tmp_path / "blocked" / "x" / "f.parquet"), b"data")
