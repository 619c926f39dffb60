"""The crash-recovery harness: run a topology under SIGKILLs, check it against a reference.

::

    report = crashtest("examples/wordcount.py", generate=200, kills=5)
    print(report.text())
    assert report.exactly_once

1. The input (JSON lines, or FILE's own ``generate(n)``) is produced to its topics; the
   :class:`~streams.testkit.driver.TopologyTestDriver` computes the reference output and stores.
2. FILE runs as ``python -m streams.cli run FILE --until-idle`` (local Spark) in a process
   of its own, which is SIGKILLed ``kills`` times (see :mod:`streams.crash.plan`) and started
   again after each kill with the same application.id and state directory; the last run
   goes to its end.
3. The orphan sweep runs, then the checks of :mod:`streams.crash.check`.

The runs get ``cache.max.bytes.buffering=0`` (every update is forwarded, as the driver
forwards it) and, unless given, ``commit.interval.ms=100`` and ``max.poll.records=10``, so
that there are many transactions to kill. Records without a timestamp get consecutive
timestamps from a fixed base, the same in the reference and the real runs.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from common.errors import ConfigError
from streams.crash.check import (
    Reference,
    compare_outputs,
    compute_reference,
    offsets_lag,
    open_transactions,
    output_topics,
    read_topic,
    record_formatter,
    sweep_and_list_staged,
)
from streams.crash.inputs import BASE_TIMESTAMP, CrashTestError, InputRecord, generated, load_jsonl
from streams.crash.plan import (
    GUARANTEES,
    CrashReport,
    Kill,
    KillEvent,
    KillKind,
    RunRecord,
    fault_points,
    plan_kills,
)
from streams.crash.stores import compare_store, local_store_dirs, restore_changelog

#: Settings of every run unless the caller's config sets them. Time retention is off: the
#: inputs replay history (BASE_TIMESTAMP is long past), and every record is compared.
RUN_DEFAULTS = {"commit.interval.ms": "100", "max.poll.records": "10", "log.retention.ms": "-1"}
DEFAULT_RUN_ESTIMATE_S = 30.0
#: Random kills fall within this multiple of a run's time to its first commit.
RANDOM_KILL_WINDOW = 1.5
_POLL_S = 0.01

__all__ = [
    "BASE_TIMESTAMP",
    "CrashReport",
    "CrashTest",
    "CrashTestError",
    "InputRecord",
    "crashtest",
    "load_jsonl",
]


@dataclass
class _Proc:
    """A running process of the application and what has been seen of it."""

    index: int
    popen: subprocess.Popen[bytes]
    log: str
    started: float
    base_offsets: int
    base_outputs: int
    base_txns: dict[str, int]
    first_commit_s: float | None = None


class CrashTest:
    """One crash test: a workdir with its storage root, state directory and logs.

    Args:
        file: the topology file (as for ``streams-eos run``).
        inputs: records to produce before the first run.
        generate: or ask FILE's ``generate(n)`` for ``n`` records of its ``INPUT``.
        workdir: where the root (``root/``), state (``state/``) and logs go (default: new).
            A ``topics.root`` in ``config`` (an object store's URI, with its
            ``storage.options.*``) puts the root there instead; it must be empty.
        guarantee: ``processing.guarantee`` of the runs.
        config: more ``--config`` pairs for the runs.
        env: more environment variables for the runs.
        seed: seeds the kill plan.
        run_timeout_s: a run taking longer is killed and reported as an error.
    """

    def __init__(
        self,
        file: str | os.PathLike[str],
        *,
        inputs: Sequence[InputRecord] = (),
        generate: int | None = None,
        workdir: str | os.PathLike[str] | None = None,
        guarantee: str = "exactly_once_v2",
        config: Mapping[str, object] | None = None,
        env: Mapping[str, str] | None = None,
        seed: int = 0,
        run_timeout_s: float = 600.0,
    ) -> None:
        if guarantee not in GUARANTEES:
            raise ConfigError(f"guarantee {guarantee!r}: expected one of {', '.join(GUARANTEES)}")
        self.file = str(file)
        self.workdir = str(workdir or tempfile.mkdtemp(prefix="crashtest-"))
        configured_root = str((config or {}).get("topics.root") or "")
        self.root = configured_root or os.path.join(self.workdir, "root")
        self.state_dir = os.path.join(self.workdir, "state")
        self.guarantee = guarantee
        self.seed = seed
        self.env = dict(env or {})
        self.run_timeout_s = run_timeout_s
        self.overrides = {
            **RUN_DEFAULTS,
            **{k: str(v) for k, v in (config or {}).items()},
            "processing.guarantee": guarantee,
            "topics.root": self.root,
            "state.dir": self.state_dir,
            "cache.max.bytes.buffering": "0",
        }
        self.module = _load(self.file)
        self.records = list(inputs) + (generated(self.module, generate) if generate else [])
        if not self.records:
            raise CrashTestError("no input: give input files (--input TOPIC=PATH) or --generate")
        from runtime.app.topology_file import build_config, build_topology_of

        self.config = build_config(
            self.module,
            root=self.root,
            properties=None,
            overrides=[f"{k}={v}" for k, v in self.overrides.items()],
        )
        self.topology = build_topology_of(self.module, str(self.file))
        self.application_id = self.config.application_id
        self.runs: list[RunRecord] = []
        self.kills: list[KillEvent] = []
        self._reference: Reference | None = None
        self._typical_s = DEFAULT_RUN_ESTIMATE_S
        self._run_seconds: list[float] = []
        #: The first run that ended on its own (the input ran out), and the kills before it.
        self._ran_out: tuple[int, int] | None = None
        self._spawned = 0

    # -- setup ---------------------------------------------------------------------------

    def setup(self) -> None:
        """Create the topics, produce the input, plan the internal topics."""
        from runtime.app.internal_topics import plan_topics
        from runtime.storage.producer import Producer
        from runtime.storage.topics import TopicAdmin

        os.makedirs(os.path.join(self.workdir, "logs"), exist_ok=True)
        self.admin = admin = TopicAdmin(self.root)
        local = "://" not in self.root
        if (local and os.path.isdir(self.root) and os.listdir(self.root)) or admin.list():
            raise CrashTestError(
                f"{self.root} already holds a crash test (it has topics): its input would be "
                "produced twice; give a new --workdir (or an empty topics.root)"
            )
        default_partitions = self.config.num_partitions
        for topic, n in dict(getattr(self.module, "TOPICS", {}) or {}).items():
            admin.create(topic, int(n), if_not_exists=True)
        for topic in sorted({r.topic for r in self.records}):
            admin.create(topic, default_partitions, if_not_exists=True)
        producer = Producer(admin)
        for r in self.records:
            key, value, headers = r.raw()
            producer.send(r.topic, key, value, timestamp=r.timestamp, headers=headers or None)
        producer.flush()
        self.plan = plan_topics(self.topology, admin, self.application_id)
        self.outputs = output_topics(self.topology, self.application_id)
        self.partitions = {t: admin.num_partitions(t) for t in self.outputs}

    def reference(self) -> Reference:
        """Return the reference run's outputs and stores (computed once)."""
        if self._reference is None:
            inputs = {t: self.admin.num_partitions(t) for t in {r.topic for r in self.records}}
            self._reference = compute_reference(
                self.topology, self.config, self.records, self.partitions, inputs
            )
        return self._reference

    def fault_points(self) -> list[str]:
        """Every fault point of this application's commits (its participants + offsets)."""
        return fault_points(len(self.plan.outputs) + 1, self.guarantee)

    def checkpoint_dir(self) -> str:
        """Spark's checkpoint directory of the application."""
        from runtime.app.app import StreamsApp

        location = StreamsApp(self.topology, self.config).checkpoint_location()
        return location.removeprefix("file://")

    # -- runs ------------------------------------------------------------------------------

    def spawn(self, env: Mapping[str, str] | None = None) -> _Proc:
        """Start a run of the application in a new process (and process group)."""
        index, self._spawned = self._spawned, self._spawned + 1
        log = os.path.join(self.workdir, "logs", f"run-{index:03d}.log")
        cmd = [sys.executable, "-m", "streams.cli", "run", self.file, "--until-idle"]
        cmd += [a for k, v in self.overrides.items() for a in ("--config", f"{k}={v}")]
        full_env = {**os.environ, **self.env, **(env or {})}
        with open(log, "wb") as out:
            popen = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=full_env, start_new_session=True
            )
        return _Proc(
            index,
            popen,
            log,
            time.monotonic(),
            self._offset_commits(),
            self._commits(),
            self._txn_sequences(),
        )

    def _txn_sequences(self, *, committed: bool = False) -> dict[str, int]:
        """The sequence of every transactional id's latest (or latest committed)
        transaction."""
        from runtime.txn.coordinator import TransactionCoordinator
        from runtime.txn.state import TransactionState

        if self.guarantee == "at_least_once":
            return {}
        return {
            m.transactional_id: m.txn_sequence
            for m in TransactionCoordinator(self.admin).list()
            if not committed or m.state is TransactionState.COMPLETE_COMMIT
        }

    def _progressed(self, proc: _Proc) -> bool:
        """Whether ``proc`` committed a transaction it began (rolling its predecessor's
        PrepareCommit forward at startup does not count)."""
        if self._offset_commits() == proc.base_offsets:
            return False
        if self.guarantee == "at_least_once":
            return True
        now = self._txn_sequences(committed=True)
        return any(seq > proc.base_txns.get(tid, -1) for tid, seq in now.items())

    def _log_entries(self, topics: Sequence[str]) -> int:
        """The commits of ``topics``' Delta logs (on a local root or an object store): the
        newest version + 1 of each (old commits may have been cleaned up)."""
        root = self.admin.root
        total = 0
        for topic in topics:
            path = f"{self.admin.table_path(topic)}/_delta_log"
            versions = [
                int(info.base_name[:20])
                for info in root.list_dir(path)
                if info.base_name.endswith(".json") and info.base_name[:20].isdigit()
            ]
            total += max(versions, default=-1) + 1
        return total

    def _offset_commits(self) -> int:
        return self._log_entries(["__consumer_offsets"])

    def _commits(self) -> int:
        return self._log_entries(sorted(self.plan.outputs))

    def wait(
        self, proc: _Proc, kill: Kill | None = None, *, expect_failure: bool = False
    ) -> RunRecord:
        """Wait for ``proc`` to end, SIGKILLing it as ``kill`` says; record the run.

        Args:
            expect_failure: a non-zero exit is what the test wants (a fenced zombie): it
                is recorded with its exit code but not reported as an error.
        """
        delay = None if kill is None or kill.kind != "random" else kill.fraction * self._typical_s
        deadline = proc.started + self.run_timeout_s
        event: KillEvent | None = None
        while proc.popen.poll() is None:
            now = time.monotonic()
            if proc.first_commit_s is None and self._progressed(proc):
                proc.first_commit_s = now - proc.started
            due = (delay is not None and now - proc.started >= delay) or (
                kill is not None
                and kill.kind == "commit"
                and self._commits() - proc.base_outputs >= kill.commits
            )
            if due and kill is not None:
                _kill_group(proc.popen)
                phase = "commit" if kill.kind == "commit" else _phase(proc)
                event = KillEvent(proc.index, kill.kind, kill.describe(), now - proc.started, phase)
            elif now > deadline:
                _kill_group(proc.popen)
                return self._record(proc, None, f"run {proc.index} timed out")
            time.sleep(_POLL_S)
        _kill_group(proc.popen)  # a fault kill leaves the JVM behind: it dies with its app
        code = proc.popen.returncode
        if kill is not None and kill.kind == "fault" and code == -signal.SIGKILL:
            event = KillEvent(
                proc.index, "fault", kill.describe(), time.monotonic() - proc.started, "commit"
            )
        error = None
        if event is None and code != 0 and not expect_failure:
            error = f"run {proc.index} failed with exit code {code}: {_tail(proc.log)}"
        return self._record(proc, event, error)

    def _record(self, proc: _Proc, event: KillEvent | None, error: str | None) -> RunRecord:
        seconds = time.monotonic() - proc.started
        recovery = proc.first_commit_s
        if recovery is None and event is None and error is None:
            recovery = seconds  # nothing left to do: recovered when it ended cleanly
        record = RunRecord(
            proc.index, proc.popen.returncode, round(seconds, 3), event is not None,
            None if recovery is None else round(recovery, 3), proc.log, error,
        )  # fmt: skip
        self.runs.append(record)
        if event is not None:
            self.kills.append(event)
        if proc.first_commit_s is not None:
            # A random kill lands before the first commit (startup) or up to half that
            # time after it, while the input lasts: long-lived tasks make batches short.
            self._typical_s = max(5.0, RANDOM_KILL_WINDOW * proc.first_commit_s)
        if event is None and error is None:
            if not self._run_seconds:
                self._ran_out = (proc.index, len(self.kills))
            self._run_seconds.append(seconds)
        return record

    def run(
        self,
        kills: int,
        *,
        points: Sequence[str] | None = None,
        kinds: Sequence[KillKind] | None = None,
        lose_checkpoint: bool = False,
        on_run: Callable[[RunRecord], None] | None = None,
    ) -> CrashReport:
        """Run the application, killing it ``kills`` times, then check; return the report.

        Args:
            points: restrict fault kills to these points (default: every point).
            kinds: restrict the kinds of kill (default: all the guarantee allows).
            lose_checkpoint: delete Spark's checkpoint before every restart.
            on_run: told each run's record as it ends (a progress bar).
        """
        self.setup()
        plan = plan_kills(
            kills,
            seed=self.seed,
            guarantee=self.guarantee,
            points=list(points or self.fault_points()),
            kinds=tuple(kinds) if kinds else None,
        )
        rng = random.Random(self.seed + 1)
        notes: list[str] = []
        pending = list(plan)
        for _attempt in range(3 * kills):
            if not pending:
                break
            kill = pending[0]
            if self._run_seconds:  # the input ran out: the kills left hit startup
                self._typical_s = min(self._run_seconds)
                kill = Kill("random", fraction=rng.uniform(0.05, 0.9))
            record = self.wait(self.spawn(self._fault_env(kill)), kill)
            if on_run is not None:
                on_run(record)
            if record.error is not None:
                break
            if record.killed:
                pending.pop(0)
            if lose_checkpoint:
                shutil.rmtree(self.checkpoint_dir(), ignore_errors=True)
                notes.append(f"Spark checkpoint deleted after run {record.run}")
        if self._ran_out is not None and kills:
            run, killed = self._ran_out
            notes.append(
                f"the input ran out in run {run} (after {killed} of {kills} kills); the "
                f"{len(self.kills) - killed} kills after that hit startup: give more input"
            )
        if not self.runs or self.runs[-1].error is None:
            last = self.wait(self.spawn())
            if on_run is not None:
                on_run(last)
        return self.check(kills_planned=kills, notes=notes)

    def _fault_env(self, kill: Kill) -> dict[str, str]:
        if kill.kind != "fault" or kill.point is None:
            return {}
        return {"STREAMS_FAULT_POINT": kill.point, "STREAMS_FAULT_HIT": str(kill.hit)}

    # -- checks ----------------------------------------------------------------------------

    def check(self, *, kills_planned: int = 0, notes: Sequence[str] = ()) -> CrashReport:
        """Sweep orphans, compare everything with the reference; return the report."""
        from runtime.storage.reader import TopicReader

        ref = self.reference()
        report = CrashReport(
            file=self.file,
            application_id=self.application_id,
            guarantee=self.guarantee,
            seed=self.seed,
            workdir=self.workdir,
            kills_planned=kills_planned,
            kills=list(self.kills),
            runs=list(self.runs),
            records_in=len(self.records),
            notes=list(notes),
        )
        report.errors = [r.error for r in self.runs if r.error]
        reader = TopicReader(self.root)
        actual = {t: read_topic(reader, t) for t in self.outputs}
        show = record_formatter(self.topology, self.config)
        out = compare_outputs(
            ref.outputs,
            actual,
            self.partitions,
            show,
            unordered=ref.unordered,
            unstable=ref.unstable,
        )
        if out.unordered_keys or out.unstable_keys:
            report.notes.append(
                f"{out.unordered_keys} output keys have an order, and {out.unstable_keys} "
                "their values, that depend on how input partitions interleave: compared as "
                "multisets, and by count only, respectively"
            )
        report.records_expected, report.records_out = out.records_expected, out.records_out
        report.duplicates, report.losses = out.duplicates, out.losses
        report.misplaced, report.reordered, report.diff = out.misplaced, out.reordered, out.diff
        report.stores = self._check_stores(ref, reader)
        report.open_transactions = open_transactions(self.admin)
        report.staged_swept, report.staged_left = sweep_and_list_staged(self.admin, self.root)
        report.offsets_lag = offsets_lag(self.admin, self.application_id, self.plan.sources)
        return report

    def _check_stores(self, ref: Reference, reader: Any) -> list[dict[str, Any]]:
        changelogs = self.topology.changelog_topics(self.application_id)
        out = []
        for name, expected in sorted(ref.stores.items()):
            topic = changelogs[name]
            restored = restore_changelog(reader, topic)
            check = compare_store(
                name,
                ref.store_kinds[name],
                expected=expected,
                restored=restored,
                local_dirs=local_store_dirs(self.state_dir, self.application_id, name),
                changelog_ends=reader.end_offsets(topic),
                unstable=ref.unstable_store_keys.get(name),
            )
            out.append({**check.__dict__, "ok": check.ok})
        return out


def crashtest(
    file: str | os.PathLike[str],
    *,
    inputs: Mapping[str, str | os.PathLike[str]] | Sequence[InputRecord] | None = None,
    generate: int | None = None,
    kills: int = 5,
    seed: int = 0,
    guarantee: str = "exactly_once_v2",
    workdir: str | os.PathLike[str] | None = None,
    config: Mapping[str, object] | None = None,
    env: Mapping[str, str] | None = None,
    points: Sequence[str] | None = None,
    kinds: Sequence[KillKind] | None = None,
    lose_checkpoint: bool = False,
    report: str | os.PathLike[str] | None = None,
    on_run: Callable[[RunRecord], None] | None = None,
) -> CrashReport:
    """Run ``file`` under ``kills`` SIGKILLs and check it against the reference.

    Args:
        inputs: ``{topic: path of a JSON-lines file}``, or records.
        generate: records from FILE's ``generate(n)`` (instead of, or besides, inputs).
        report: also write the JSON report there.
        on_run: told each run's record as it ends.

    Returns:
        The report; ``report.exactly_once`` is the verdict.

    Raises:
        CrashTestError: the test could not be set up.
    """
    records: list[InputRecord] = []
    if isinstance(inputs, Mapping):
        for topic, path in inputs.items():
            records.extend(load_jsonl(topic, path, start=len(records)))
    elif inputs:
        records = list(inputs)
    test = CrashTest(
        file,
        inputs=records,
        generate=generate,
        workdir=workdir,
        guarantee=guarantee,
        config=config,
        env=env,
        seed=seed,
    )
    result = test.run(
        kills, points=points, kinds=kinds, lose_checkpoint=lose_checkpoint, on_run=on_run
    )
    if report is not None:
        Path(report).write_text(result.to_json())
    return result


def _load(file: str) -> ModuleType:
    from runtime.app.topology_file import load_topology_file

    return load_topology_file(file)


def _phase(proc: _Proc) -> str:
    return "startup" if proc.first_commit_s is None else "processing"


def _kill_group(popen: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process and everything it started (its Spark JVM, Python workers)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)
    popen.wait()


def _tail(path: str, lines: int = 8) -> str:
    try:
        text = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    keep = [line for line in text if "WARN" not in line][-lines:]
    return " | ".join(keep)
