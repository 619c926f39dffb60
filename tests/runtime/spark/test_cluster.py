"""On a Spark cluster: ``local-cluster[2,1,1024]``, two executor JVMs with Python workers
and a state directory of their own (``<state.dir>/executor-<id>``).

The word count and the enrichment join run exactly once there, the word count through the
loss of an executor; their tasks spread over both executors, each task's stores are opened
once, on the executor the task lives on, whichever executor Spark runs its Spark task on (a
visit goes to the task's executor).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from runtime.app.topology_file import generated_records
from tests.examples.harness import (
    assert_same_outputs,
    driver_outputs,
    load_example,
    output_topics,
    topic_outputs,
)

MASTER = "local-cluster[2,1,1024]"
#: Lines of each example (produced twice for the word count that loses an executor).
SMALL = 800
#: Lines of the cluster demo (slow).
N = 1500
ROOT_DIR = Path(__file__).resolve().parents[3]


def run_command(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``args`` from the project's directory; fail the test on a non-zero exit."""
    result = subprocess.run(
        args, capture_output=True, text=True, env=env, cwd=ROOT_DIR, timeout=900, check=False
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return result


def run_on_cluster(tmp_path: Path, *args: str) -> list[dict[str, Any]]:
    """Run ``cluster_app`` with ``args`` on the test cluster; return its JSON lines."""
    env = {**os.environ, "SPARK_MASTER": MASTER, "PYSPARK_PYTHON": sys.executable}
    result = run_command([sys.executable, "-m", "tests.runtime.spark.cluster_app", *args], env)
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def word_counts(root: str, example: Any) -> tuple[dict[str, int], Counter[tuple[str, int]]]:
    """The last count of each word in the output topic, and how often each (word, count)
    update appears there."""
    updates: Counter[tuple[str, int]] = Counter()
    last: dict[str, int] = {}
    for records in topic_outputs(root, [example.OUTPUT])[example.OUTPUT].values():
        for key, value, _ in records:
            word, n = key.decode(), int.from_bytes(value, "big", signed=True)
            updates[(word, n)] += 1
            last[word] = n
    return last, updates


def expected_counts(example: Any, lines: list[str]) -> Counter[str]:
    return Counter(w for line in lines for w in example.WORD.findall(line.lower()))


def test_word_count_and_enrichment_run_exactly_once_on_two_executors(tmp_path: Path) -> None:
    """Each example runs until idle on two executors. The enrichment runs with each task
    built and each store opened once, on its own executor. The word count then loses an
    executor (JVM and Python workers, SIGKILL) in the middle of a batch: a retried job, not
    a record lost or doubled, and the lost executor's tasks restored on the other; its
    store, read as a DataFrame on the executors, equals its last committed counts."""
    root, state = str(tmp_path / "root"), str(tmp_path / "state")
    runs = run_on_cluster(
        tmp_path, root, state, str(SMALL), "enrichment", "wordcount", "--kill-executor"
    )
    assert [r["example"] for r in runs] == ["enrichment", "wordcount"]
    run, killed = runs
    for each in runs:
        assert each["master"] == MASTER
        print(each["example"], "tasks per executor:", each["executors"], each["metrics"])

    print("killed:", killed["killed"])
    assert killed["killed"].get("executor") in ("0", "1"), killed["killed"]
    wordcount = load_example("wordcount")
    # the input: generate(SMALL), the line "slow", generate(SMALL) again
    lines = [v.decode() for _, v, _ in generated_records(wordcount, SMALL)[wordcount.INPUT]]
    last, updates = word_counts(root, wordcount)
    assert last == dict(expected_counts(wordcount, [*lines, "slow", *lines]))
    assert max(updates.values()) == 1  # no count was written twice
    assert killed["store"] == last  # read_store on the executors: the committed counts
    # the lost executor's tasks live on the other executors now, restored there
    assert killed["killed"]["executor"] not in killed["executors"]
    assert killed["metrics"].get("task-moved-total", 0) >= 1

    # the tasks spread over both executors, and stayed there: each task was built once and
    # each store opened once, on its own executor, though Spark ran some of their Spark
    # tasks on the other one (those visits went to the task's executor)
    placed = run["executors"]
    # the driver placed them, partition by partition, on the executors the warm-up found:
    # not where the first batch's Spark tasks ran (a busy core gave one executor them all)
    assert placed == {"0": ["0_0", "0_2"], "1": ["0_1", "0_3"]}, placed
    metrics = run["metrics"]
    tasks = sum(len(t) for t in placed.values())
    assert metrics["task-created-total"] == tasks
    assert metrics["store-open-total"] == 4  # one store in each of 4 stateful tasks
    assert metrics.get("task-moved-total", 0) == 0
    assert metrics.get("task-closed-dirty-total", 0) == 0
    # the warm-up started the daemon the batches use: one per executor, not two
    assert run["daemons"] == {executor: 1 for executor in placed}, run["daemons"]
    for executor in placed:  # each executor's stores in its own state directory
        assert (Path(state) / f"executor-{executor}").is_dir()
    enrichment = load_example("enrichment")
    expected = driver_outputs(enrichment, generated_records(enrichment, SMALL))
    assert_same_outputs(topic_outputs(root, output_topics(enrichment)), expected)


@pytest.mark.slow
def test_the_cluster_demo_runs_on_a_standalone_master_and_two_workers(tmp_path: Path) -> None:
    root = tmp_path / "storage"
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "DEMO_DIR": str(tmp_path / "demo"),
        "STREAMS_ROOT": str(root),
        "LINES": str(N),
    }
    result = run_command(["bash", "examples/cluster_demo.sh"], env)
    summary = json.loads(
        next(line for line in result.stdout.splitlines() if line.startswith('{"application.id"'))
    )
    print(summary)
    assert summary["master"].startswith("spark://")
    assert len(summary["executors"]) == 2
    wordcount = load_example("wordcount")
    lines = [v.decode() for _, v, _ in generated_records(wordcount, N)[wordcount.INPUT]]
    last, updates = word_counts(str(root), wordcount)
    assert last == dict(expected_counts(wordcount, lines))
    assert max(updates.values()) == 1
