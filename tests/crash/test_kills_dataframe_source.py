"""A job reading JSON files through Spark's file source, folding them into a KTable and
upserting it into a Delta table, killed three times at random moments (SIGKILL) and
restarted: the table ends equal to the reference computed from the files, and every line
was ingested once."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from tests.crash.conftest import FAST_JVM
from tests.crash.dataframe_job import TABLE, reference

PROJECT = Path(__file__).resolve().parents[2]
WORDS = [f"w{i:02d}" + "x" * (i % 5) for i in range(40)]


def write_inputs(directory: Path, files: int, per_file: int, rng: random.Random) -> list[str]:
    directory.mkdir(parents=True)
    lines = []
    for f in range(files):
        rows = []
        for j in range(per_file):
            line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
            lines.append(line)
            rows.append({"key": f"f{f}-{j}", "value": line, "timestamp": 1_000 * (f + 1) + j})
        (directory / f"part-{f:04d}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return lines


def start(root: Path, inputs: Path, state: Path, mode: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, **FAST_JVM, "PYTHONPATH": str(PROJECT)}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.crash.dataframe_job",
            str(root),
            str(inputs),
            str(state),
            mode,
        ],
        cwd=PROJECT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # the kill takes the JVM and the Python workers too
    )


def ingested(root: Path) -> int:
    admin = TopicAdmin(str(root))
    if not admin.exists("lines"):
        return 0
    return sum(TopicReader(str(root)).end_offsets("lines").values())


@pytest.mark.slow
def test_three_random_kills_leave_the_upserted_table_equal_to_the_reference(
    tmp_path: Path,
) -> None:
    rng = random.Random(20)
    inputs, root, state = tmp_path / "in", tmp_path / "root", tmp_path / "state"
    lines = write_inputs(inputs, files=60, per_file=10, rng=rng)
    kills = []
    for _ in range(3):
        job = start(root, inputs, state, "run")
        before = ingested(root)
        deadline = time.monotonic() + 180
        while ingested(root) == before:  # the job is up and ingesting: kill it soon
            assert job.poll() is None, job.stderr.read().decode()[-3000:] if job.stderr else ""
            assert time.monotonic() < deadline, "the job made no progress in 180 s"
            time.sleep(0.2)
        # anywhere: ingesting, processing, committing (a few seconds: the source ingests
        # a file every few tenths of a second, and the last kill must find some left)
        time.sleep(rng.uniform(0.5, 4.0))
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        kills.append(ingested(root))
    assert kills[-1] < len(lines), f"the job was done before the last kill: {kills}"
    final = start(root, inputs, state, "idle")
    _, err = final.communicate(timeout=600)
    assert final.returncode == 0, err.decode()[-3000:]
    assert ingested(root) == len(lines)  # every line once: replayed batches were skipped
    rows = DeltaTable(str(root / "tables" / TABLE)).to_pyarrow_table().to_pylist()
    table = {r["key"]: {"count": r["count"], "letters": r["letters"]} for r in rows}
    assert len(rows) == len(table)  # one row per key
    assert table == reference(lines)
    print(f"kills after {kills} of {len(lines)} lines ingested; {len(table)} words equal")
