"""A corrupted SST file in a live store's RocksDB: the application restarts by itself, its
store rebuilt from a snapshot (an independent copy) and the changelog, with exact output
and one log line saying what happened."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from runtime.app.app import StreamsApp
from runtime.app.topology_file import generated_records
from runtime.storage.topics import TopicAdmin
from tests.examples.harness import EXAMPLES, load_example, produce, topic_outputs

N = 400


#: Small batches, a snapshot every second commit.
CONFIG = {"commit.interval.ms": 100, "max.poll.records": 40, "statestore.snapshot.interval": 2}


def run(root: Path, state: Path, generate: int) -> subprocess.CompletedProcess[str]:
    """``streams-eos run examples/wordcount.py``: produce ``generate`` lines, run until idle."""
    env = {**os.environ, "STREAMS_ROOT": str(root), "PYSPARK_PYTHON": sys.executable}
    cmd = [
        sys.executable, "-m", "streams.cli", "run", str(EXAMPLES / "wordcount.py"),
        "--generate", str(generate), "--until-idle", "--config", f"state.dir={state}",
    ]  # fmt: skip
    cmd += [a for k, v in CONFIG.items() for a in ("--config", f"{k}={v}")]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def damage(path: Path) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(size // 3)
        f.write(b"\xff" * 64)


@pytest.mark.slow  # 25 s; tests/statestores covers the same detection and rebuild quickly
def test_a_corrupted_sst_file_is_rebuilt_by_itself_with_exact_output(
    spark: SparkSession, tmp_path: Path
) -> None:
    root, state = tmp_path / "root", tmp_path / "state"
    # the first run in this process (its hosts close their stores when it closes), the
    # restart as a command, whose output holds the task hosts' log lines
    wordcount = load_example("wordcount")
    admin = TopicAdmin(str(root))
    produce(admin, wordcount, N)
    config = {**wordcount.CONFIG, **CONFIG, "topics.root": str(root)}
    config["state.dir"] = str(state)
    StreamsApp(wordcount.build_topology(), config, spark=spark).run_until_idle()
    stores = sorted((state / "wordcount").glob("*/rocksdb/word-counts"))
    assert stores, "no local store"
    store = stores[0]
    task = store.parent.parent.name
    ssts = sorted(store.glob("*.sst"), key=lambda p: p.stat().st_size)
    assert ssts, "the store has no SST file (its snapshot flushes one)"
    snapshot_files = list((root / "snapshots").rglob("*.sst"))
    local_inodes = {p.stat().st_ino for p in ssts}
    assert snapshot_files and not {p.stat().st_ino for p in snapshot_files} & local_inodes
    damage(ssts[-1])

    again = run(root, state, N)  # the same N lines once more: every count doubles
    lines = [line for line in again.stderr.splitlines() if "was unusable" in line]
    print("\n".join(lines))
    assert len(lines) == 1, again.stderr[-3000:]
    assert f"[task {task}] store word-counts" in lines[0]
    assert "corrupt" in lines[0] and "rebuilt from snapshot at offset" in lines[0]

    text = [v.decode() for _, v, _ in generated_records(wordcount, N)[wordcount.INPUT]]
    expected = Counter(w for line in text * 2 for w in wordcount.WORD.findall(line.lower()))
    last: dict[str, int] = {}
    for records in topic_outputs(str(root), [wordcount.OUTPUT])[wordcount.OUTPUT].values():
        for key, value, _ in records:
            last[key.decode()] = int.from_bytes(value, "big", signed=True)
    assert last == dict(expected)
