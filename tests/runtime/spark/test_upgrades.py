"""Topology upgrades: a changed topology that would lose state is refused with the list of
stores; named operators keep their state across the change; a migration into a renamed
store runs exactly once although the start is killed three times during it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyspark.sql import SparkSession

from runtime.app.read_store import read_store
from runtime.app.savepoints import list_savepoints
from runtime.app.upgrades import TopologyUpgradeError
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from tests.runtime.spark import upgrade_app
from tests.runtime.spark.test_store_queries import committed_counts, lines_of, produce

APP = upgrade_app.APP
REPO = Path(__file__).resolve().parents[3]


def totals(*batches: list[str], upper: bool = False) -> dict[str, int]:
    words = (w for lines in batches for line in lines for w in line.split())
    return dict(Counter(w.upper() if upper else w for w in words))


def test_a_node_inserted_before_an_unnamed_count_is_refused_and_a_named_one_keeps_state(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    admin.create("lines", 2)
    admin.create("counts-out", 2)
    first, more = lines_of(20, 1), lines_of(10, 4)
    produce(admin, first, 1000)
    upgrade_app.run(root, str(tmp_path / "s"), "unnamed", spark)
    with pytest.raises(TopologyUpgradeError) as refused:
        upgrade_app.run(root, str(tmp_path / "s"), "unnamed-filtered", spark)
    text = str(refused.value)
    assert "store 'KSTREAM-AGGREGATE-STATE-STORE-0000000003' (key_value) is gone" in text
    assert "stores this topology adds: KSTREAM-AGGREGATE-STATE-STORE-0000000004" in text
    assert "Materialized.as_" in text and "StateUpgrade.keep(old, new)" in text
    assert committed_counts(root) == totals(first)  # nothing ran

    named = str(Path(root).parent / "named")
    os.makedirs(named)
    other = TopicAdmin(named)
    other.create("lines", 2)
    other.create("counts-out", 2)
    produce(other, first, 1000)
    upgrade_app.run(named, str(tmp_path / "n"), "named", spark)
    produce(other, more, 9000)
    upgrade_app.run(named, str(tmp_path / "n"), "named-filtered", spark)
    assert committed_counts(named) == totals(first, more)
    last = ["w1 w2"]  # a store renamed, its state kept: the counts go on
    produce(other, last, 20_000)
    upgrade_app.run(named, str(tmp_path / "n"), "kept", spark)
    assert committed_counts(named) == totals(first, more, last)


def test_a_migration_runs_exactly_once_through_three_kills(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    admin.create("lines", 2)
    admin.create("counts-out", 2)
    first, more = [*lines_of(25, 2), "kiwi fig kiwi"], lines_of(10, 9)
    produce(admin, first, 1000)
    state = str(tmp_path / "state")
    upgrade_app.run(root, state, "named", spark)
    old_keys = len(totals(first))
    produce(admin, more, 9000)
    for point in ("upgrade_after_savepoint", "upgrade_after_state", "after_prepare"):
        run = subprocess.run(
            [sys.executable, "-m", "tests.runtime.spark.upgrade_app", root, state, "migrated"],
            cwd=REPO,
            env={**os.environ, "STREAMS_FAULT_POINT": point},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert run.returncode == -signal.SIGKILL, (point, run.stderr[-2000:])
    upgrade_app.run(root, state, "migrated", spark)

    changelog = f"{APP}-counts-upper-changelog"
    reader = TopicReader(root)
    migrated = [
        key
        for p, end in reader.end_offsets(changelog).items()
        for key in reader.read(changelog, p, 0, end).column("key").to_pylist()
    ]
    records = Counter(k.decode() for k in migrated)
    only_first = set(totals(first, upper=True)) - set(totals(more, upper=True))
    assert only_first and len(totals(first)) == old_keys
    assert {records[w] for w in only_first} == {1}  # migrated once, never written since
    expected = totals(first, more, upper=True)
    stored = read_store(spark, APP, "counts-upper", root=root).collect()
    assert {r.key: r.value for r in stored} == expected
    final = committed_counts(root)
    assert {w: final[w] for w in totals(more, upper=True)} == {
        w: expected[w] for w in totals(more, upper=True)
    }
    assert [s.name.startswith("pre-upgrade-") for s in list_savepoints(admin, APP)] == [True]


def test_a_store_bootstrapped_from_a_million_rows_is_loaded_once_through_a_kill(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    """A store's initial state from a Delta table of 1 M rows: a start killed while it
    loads commits nothing; the next loads every row once, and its first batch counts on
    from them; a later start loads nothing again."""
    n = 1_000_000
    table = str(tmp_path / "initial-counts")
    write_deltalake(
        table,
        pa.table({"word": [f"k{i}" for i in range(n)], "count": pa.array(np.arange(n) % 100)}),
    )
    admin.create("lines", 2)
    admin.create("counts-out", 2)
    produce(admin, ["k5 k999999 fresh", "k5"], 1000)
    state, version = str(tmp_path / "state"), f"initial={table}"
    killed = subprocess.run(
        [sys.executable, "-m", "tests.runtime.spark.upgrade_app", root, state, version],
        cwd=REPO,
        env={**os.environ, "STREAMS_FAULT_POINT": "initial_state_before_commit"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    changelog = f"{APP}-counts-changelog"
    assert sum(TopicReader(root).end_offsets(changelog).values()) == 0
    upgrade_app.run(root, state, version, spark)
    assert committed_counts(root) == {"k5": 5 + 2, "k999999": 99 + 1, "fresh": 1}
    written = sum(TopicReader(root).end_offsets(changelog).values())
    assert n + 1 <= written <= n + 3  # every row once, then the batch's updates
    produce(admin, ["k7"], 5000)
    upgrade_app.run(root, state, version, spark)
    assert committed_counts(root)["k7"] == 7 + 1
    assert sum(TopicReader(root).end_offsets(changelog).values()) <= written + 1
    stored = read_store(spark, APP, "counts", root=root)
    assert stored.count() == n + 1
