"""Savepoints of a running application, and a consistent rewind to one: positions, stores
and outputs back at the cut, nothing of the rewound run left in any output."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from common.errors import StreamsError
from common.serdes import Serdes
from runtime.app import rewind as rewind_module
from runtime.app.app import StreamsApp
from runtime.app.read_store import read_store
from runtime.app.rewind import (
    RewindPlan,
    RewindRefusedError,
    apply_rewind,
    plan_rewind,
    unfinished_rewind,
)
from runtime.app.savepoints import (
    SavepointError,
    create_savepoint,
    delete_savepoint,
    list_savepoints,
)
from runtime.group.reset import ResetPlanEntry, apply_reset, committed_offsets
from runtime.storage.delta_sink import maintain, sink_table
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from tests.clitools import cli
from tests.runtime.spark.helpers import eos_config
from tests.runtime.spark.test_store_queries import committed_counts, lines_of, produce, wait_until
from topology import Materialized, Produced, StreamsBuilder

S, L = Serdes.String(), Serdes.Long()
APP = "sp-wc"


def word_count() -> Any:
    b = StreamsBuilder()
    counts = (
        b.stream("lines")
        .flat_map_values(str.split)
        .group_by(lambda _k, w: w)
        .count(Materialized.as_("word-counts"))
    )
    counts.to_stream().to("counts-out", Produced.with_(S, L))
    return b.build()


def past_a_savepoint(  # noqa: PLR0917 - the run's pieces
    spark: SparkSession,
    admin: TopicAdmin,
    root: str,
    tmp_path: Path,
    name: str,
    first: list[str],
    more: list[str],
) -> dict[str, Any]:
    """The word count run over ``first``, savepoint ``name`` taken, then run over ``more``
    too; returns its configuration."""
    admin.create("lines", 2)
    admin.create("counts-out", 2)
    config = eos_config(APP, root, str(tmp_path / "state"))
    produce(admin, first, 1000)
    StreamsApp(word_count(), config, spark=spark).run_until_idle()
    create_savepoint(admin, APP, name)
    produce(admin, more, 20_000)
    StreamsApp(word_count(), config, spark=spark).run_until_idle()
    return config


def history(root: str) -> dict[str, list[int]]:
    """Every count written for each word, in offset order (each word has one partition)."""
    return history_at(root, TopicReader(root).end_offsets("counts-out"))


def expected(*batches: list[str]) -> dict[str, int]:
    return dict(Counter(w for lines in batches for line in lines for w in line.split()))


def test_a_rewind_to_a_savepoint_takes_back_outputs_and_state_and_the_rerun_is_exact(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    """A savepoint taken while the word count runs; more input; a rewind to it (refused
    while a downstream group read past the cut, until forced); run to idle: every word's
    outputs rise strictly (nothing of the rewound run is left) and the final counts are
    exact."""
    admin.create("lines", 2)
    admin.create("counts-out", 2)
    config = eos_config(APP, root, str(tmp_path / "state"), **{"max.poll.records": 7})
    first, more = lines_of(40, 1), lines_of(30, 5)
    produce(admin, first[:20], 1000)
    app = StreamsApp(word_count(), config, spark=spark)
    app.start()
    try:
        wait_until(lambda: committed_counts(root))
        feeder = threading.Thread(target=produce, args=(admin, first[20:], 9000))
        feeder.start()
        savepoint = create_savepoint(admin, APP, "mid-run")  # while batches commit
        feeder.join()
        wait_until(lambda: committed_counts(root) == expected(first))
    finally:
        app.close()
    # the cut is consistent: the positions it holds produced exactly its outputs
    consumed = savepoint.positions["lines"]
    at_cut = {w: c[-1] for w, c in history_at(root, savepoint.topics["counts-out"].ends).items()}
    assert at_cut and at_cut == expected(read_lines(root, consumed))
    assert [s.name for s in list_savepoints(admin, APP)] == ["mid-run"]
    store = savepoint.stores["word-counts"]
    assert store.snapshots and set(store.snapshots.values()) <= set(store.ends.values())

    produce(admin, more, 20_000)
    StreamsApp(word_count(), config, spark=spark).run_until_idle()
    assert committed_counts(root) == expected(first, more)
    reads_at_the_cut(spark, root, tmp_path, at_cut)
    ends = TopicReader(root).end_offsets("counts-out")
    apply_reset(
        admin, "reader", [ResetPlanEntry("counts-out", p, None, e) for p, e in ends.items()]
    )

    intruder = Producer(admin)  # another writer of the output after the cut
    intruder.send("counts-out", b"intruder", L.serialize("counts-out", 1), partition=0)
    intruder.flush()

    plan = plan_rewind(admin, APP, "mid-run")
    assert set(plan.past_cut) == {"reader"}
    assert plan.foreign == {"counts-out": ["a writer without a transaction"]}
    with pytest.raises(RewindRefusedError, match="other writers appended to sp-wc's output"):
        apply_rewind(admin, plan, reset_groups=True)
    with pytest.raises(RewindRefusedError, match="reader"):
        apply_rewind(admin, RewindPlan(plan.savepoint, plan.past_cut))
    apply_rewind(admin, plan, force=True)
    assert committed_counts(root) == at_cut  # the outputs are back at the cut
    assert committed_offsets(admin, APP) == {("lines", p): o for p, o in consumed.items()}

    StreamsApp(word_count(), config, spark=spark).run_until_idle()
    assert committed_counts(root) == expected(first, more)
    for word, counts in history(root).items():
        assert counts == sorted(set(counts)), (word, counts)  # strictly rising


def reads_at_the_cut(spark: SparkSession, root: str, tmp_path: Path, at_cut: dict) -> None:
    """The store as the savepoint holds it, read on the executors (by name and by time)
    and exported as a Delta table."""
    for as_of in ("mid-run", int(time.time() * 1000)):
        rows = read_store(spark, APP, "word-counts", as_of=as_of, root=root).collect()
        assert {r.key: r.value for r in rows} == at_cut
    exported = cli(
        root,
        "state",
        "--application-id",
        APP,
        "--store",
        "word-counts",
        "--as-of",
        "mid-run",
        "--export",
        str(tmp_path / "at-cut"),
    )
    assert exported.returncode == 0, exported.stderr
    table = DeltaTable(str(tmp_path / "at-cut")).to_pyarrow_table()
    assert (
        dict(zip(table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True))
        == at_cut
    )


def history_at(root: str, ends: dict[int, int]) -> dict[str, list[int]]:
    reader = TopicReader(root)
    out: dict[str, list[int]] = {}
    for p, end in ends.items():
        table = reader.read("counts-out", p, 0, end)
        keys, values = table.column("key").to_pylist(), table.column("value").to_pylist()
        for k, v in zip(keys, values, strict=True):
            out.setdefault(k.decode(), []).append(int(L.deserialize("counts-out", v) or 0))
    return out


def read_lines(root: str, positions: dict[int, int]) -> list[str]:
    reader = TopicReader(root)
    return [
        v.decode()
        for p, end in positions.items()
        for v in reader.read("lines", p, 0, end).column("value").to_pylist()
    ]


def test_savepoint_commands_check_names_and_deleting_one_unpins_its_files(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    """The command line takes, lists, describes and deletes savepoints, and prints a
    rewind's plan; a taken name, a bad name and an unknown savepoint are refused with
    what to do; an at-least-once application has no cut between transactions; delete
    removes the manifest, the pins and the snapshots."""
    admin.create("lines", 2)
    admin.create("counts-out", 2)
    config = eos_config(APP, root, str(tmp_path / "state"))
    produce(admin, lines_of(10, 1), 1000)
    with pytest.raises(StreamsError, match="start it once"):
        create_savepoint(admin, APP, "a")
    StreamsApp(word_count(), config, spark=spark).run_until_idle()
    made = cli(root, "savepoint", "create", "--application-id", APP, "--name", "a")
    assert made.returncode == 0 and "savepoint a of sp-wc taken" in made.stdout, made.stderr
    with pytest.raises(SavepointError, match="already has a savepoint 'a'"):
        create_savepoint(admin, APP, "a")
    with pytest.raises(SavepointError, match="letters, digits"):
        create_savepoint(admin, APP, "no/slash")
    unknown = cli(root, "rewind", "--application-id", APP, "--to-savepoint", "b")
    assert unknown.returncode == 1 and "(its savepoints: a)" in unknown.stderr
    assert cli(root, "savepoint", "list", "--application-id", APP).stdout.startswith("a\t")
    shown = cli(root, "savepoint", "describe", "--application-id", APP, "--name", "a").stdout
    assert "changelog sp-wc-word-counts-changelog" in shown and "Sub-topology" in shown
    dry = cli(root, "rewind", "--application-id", APP, "--to-savepoint", "a", "--dry-run")
    assert "topic counts-out: back to version" in dry.stdout, dry.stderr
    later = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 60))
    by_time = cli(root, "rewind", "--application-id", APP, "--to-time", later, "--dry-run")
    assert "to savepoint a (taken" in by_time.stdout, by_time.stderr
    early = cli(root, "rewind", "--application-id", APP, "--to-time", "2000-01-01T00:00:00")
    assert "no savepoint taken at or before" in early.stderr
    pins = Path(admin.table_path("counts-out")) / "_streams_pins"
    assert list(pins.iterdir())
    gone = cli(root, "savepoint", "delete", "--application-id", APP, "--name", "a")
    assert gone.returncode == 0, gone.stderr
    assert not list(pins.iterdir()) and list_savepoints(admin, APP) == []
    assert not (Path(root) / "savepoints" / APP / "a").exists()

    alos = {**config, "application.id": "sp-alos", "processing.guarantee": "at_least_once"}
    StreamsApp(word_count(), alos, spark=spark).run_until_idle()
    with pytest.raises(SavepointError, match="exactly_once_v2"):
        create_savepoint(admin, "sp-alos", "a")


def word_count_b() -> Any:
    """The word count changed: words of one letter are dropped first (a node added before
    the stateful one) and each count is written as text to a topic of its own."""
    b = StreamsBuilder()
    counts = (
        b.stream("lines")
        .flat_map_values(str.split)
        .filter(lambda _k, w: len(w) > 1)
        .group_by(lambda _k, w: w)
        .count(Materialized.as_("word-counts"))
    )
    counts.to_stream().map_values(lambda c: f"count={c}").to("counts-b", Produced.with_(S, S))
    return b.build()


def test_a_fork_runs_a_changed_topology_from_the_cut_and_leaves_the_original_alone(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    """Application B starts from savepoint "cut" of A with a changed topology: it counts on
    from A's state and positions at the cut, writes only its own outputs, and starting it
    again goes on where it is; A's outputs, positions and state are untouched."""
    admin.create("counts-b", 2)
    first, more = lines_of(30, 1), lines_of(20, 7)
    config = past_a_savepoint(spark, admin, root, tmp_path, "cut", first, more)
    a_history, a_positions = history(root), committed_offsets(admin, APP)
    a_state = sorted(map(tuple, read_store(spark, APP, "word-counts", root=root).collect()))

    fork = {**config, "application.id": "sp-fork", "state.dir": str(tmp_path / "fork")}
    StreamsApp(word_count_b(), fork, spark=spark, from_savepoint=f"{APP}/cut").run_until_idle()
    long_words = {w: c for w, c in expected(first, more).items() if len(w) > 1}
    at_cut = expected(first)
    b_history = text_history(root)
    assert {w: c[-1] for w, c in b_history.items()} == long_words
    for word, counts in b_history.items():
        assert counts == sorted(set(counts)) and counts[0] > at_cut.get(word, 0), word
    produce(admin, ["zebra zebra"], 40_000)  # a later start goes on from where B is
    StreamsApp(word_count_b(), fork, spark=spark, from_savepoint=f"{APP}/cut").run_until_idle()
    assert text_history(root)["zebra"][-1] == long_words.get("zebra", 0) + 2

    assert history(root) == a_history and committed_offsets(admin, APP) == a_positions
    again = sorted(map(tuple, read_store(spark, APP, "word-counts", root=root).collect()))
    assert again == a_state
    with pytest.raises(StreamsError, match="committed positions of its own"):
        other = {**fork, "application.id": APP + "-x"}
        apply_reset(admin, other["application.id"], [ResetPlanEntry("lines", 0, None, 1)])
        StreamsApp(word_count_b(), other, spark=spark, from_savepoint=f"{APP}/cut").start()


def text_history(root: str) -> dict[str, list[int]]:
    reader = TopicReader(root)
    out: dict[str, list[int]] = {}
    for p, end in reader.end_offsets("counts-b").items():
        table = reader.read("counts-b", p, 0, end)
        keys, values = table.column("key").to_pylist(), table.column("value").to_pylist()
        for k, v in zip(keys, values, strict=True):
            out.setdefault(k.decode(), []).append(int(v.decode().removeprefix("count=")))
    return out


def test_a_rewind_cut_short_blocks_the_start_and_completes_when_run_again(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path, monkeypatch: Any
) -> None:
    """A rewind that dies after putting the topics back, before the positions: the
    application refuses to start, naming the command; running the rewind again completes
    it without a second commit on any topic; the local state from before is dropped."""
    first, more = lines_of(20, 1), lines_of(10, 3)
    config = past_a_savepoint(spark, admin, root, tmp_path, "sp", first, more)
    tasks = sorted(p.name for p in (tmp_path / "state" / APP).iterdir() if "_" in p.name)
    assert tasks  # the stores of the run after the cut

    def die(*_: Any) -> None:
        raise RuntimeError("killed")

    monkeypatch.setattr(rewind_module, "_rewind_positions", die)
    plan = plan_rewind(admin, APP, "sp")
    with pytest.raises(RuntimeError, match="killed"):
        apply_rewind(admin, plan)
    monkeypatch.undo()
    assert committed_counts(root) == expected(first)  # the topics are back already
    versions = {t: admin.index(t).version for t in plan.savepoint.topics}
    with pytest.raises(StreamsError, match="was cut short: run 'streams-eos rewind"):
        StreamsApp(word_count(), config, spark=spark).start()
    apply_rewind(admin, plan_rewind(admin, APP, "sp"))
    assert {t: admin.index(t).version for t in plan.savepoint.topics} == versions
    assert unfinished_rewind(admin, APP) is None

    StreamsApp(word_count(), config, spark=spark).run_until_idle()
    assert committed_counts(root) == expected(first, more)
    for word, counts in history(root).items():
        assert counts == sorted(set(counts)), (word, counts)
    assert (tmp_path / "state" / APP / "rewound").read_text() == json.loads(
        (Path(root) / "_apps" / APP / "rewound.json").read_text()
    )["id"]


def with_delta_sinks() -> Any:
    b = StreamsBuilder()
    words = b.stream("lines").flat_map_values(str.split)
    words.group_by(lambda _k, w: w).count(Materialized.as_("word-counts")).to_delta("sp-counts")
    words.map_values(lambda w: {"word": w}).to_delta("sp-words")  # appended, one row a word
    return b.build()


def test_a_rewind_restores_delta_sinks_and_their_maintenance_keeps_the_pinned_version(
    spark: SparkSession, admin: TopicAdmin, root: str, tmp_path: Path
) -> None:
    """Delta sinks go back to their version at the cut (upserted and appended alike), the
    rerun leaves them as one straight run would, and while the savepoint exists their
    maintenance does not vacuum the files the cut needs."""
    admin.create("lines", 2)
    config = eos_config(APP, root, str(tmp_path / "state"))
    first, more = lines_of(20, 1), lines_of(10, 3)
    produce(admin, first, 1000)
    StreamsApp(with_delta_sinks(), config, spark=spark).run_until_idle()
    tables = {n: str(Path(root) / "tables" / n) for n in ("sp-counts", "sp-words")}
    at_cut = {
        n: sorted(map(str, DeltaTable(t).to_pyarrow_table().to_pylist())) for n, t in tables.items()
    }
    create_savepoint(admin, APP, "sp")
    produce(admin, more, 9000)
    StreamsApp(with_delta_sinks(), config, spark=spark).run_until_idle()
    sink = sink_table(admin.root, "delta+upsert:sp-counts")
    assert sink is not None  # its upserts rewrote files: the cut's are removed, not deleted
    assert maintain(sink, target_bytes=1 << 30, vacuum_hours=0, root=admin.root).vacuumed_files == 0

    apply_rewind(admin, plan_rewind(admin, APP, "sp"))
    for name, table in tables.items():
        assert rows(table) == at_cut[name]
    StreamsApp(with_delta_sinks(), config, spark=spark).run_until_idle()
    counts = {
        r["key"]: r["value"] for r in DeltaTable(tables["sp-counts"]).to_pyarrow_table().to_pylist()
    }
    assert counts == expected(first, more)
    words = DeltaTable(tables["sp-words"]).to_pyarrow_table().num_rows
    assert words == sum(expected(first, more).values())  # every word once
    delete_savepoint(admin, APP, "sp")  # unpinned: the maintenance deletes them now
    assert maintain(sink, target_bytes=1 << 30, vacuum_hours=0, root=admin.root).vacuumed_files


def rows(table: str) -> list[str]:
    return sorted(map(str, DeltaTable(table).to_pyarrow_table().to_pylist()))
