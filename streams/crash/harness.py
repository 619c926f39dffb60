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
3. The orphan sweep runs, then the checks of :mod:`streams.crash.check` (and, with
   ``poison``, of :mod:`streams.crash.poison`: each poison record a dead letter once).

This module holds the runs and their kills; the setup before them, the commit counts
during them and the comparison after them are :mod:`streams.crash.workspace`'s.

The runs get ``statestore.cache.max.bytes=0`` (every update is forwarded, as the driver
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
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from streams.crash.inputs import BASE_TIMESTAMP, CrashTestError, InputRecord, load_jsonl
from streams.crash.plan import CrashReport, Kill, KillEvent, KillKind, RunRecord, plan_kills
from streams.crash.workspace import Workspace

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


class CrashTest(Workspace):
    """One crash test: runs of the application in its workspace, killed as planned.

    Args:
        file, inputs, generate, workdir, guarantee, config, poison: the workspace's (see
            :class:`~streams.crash.workspace.Workspace`).
        env: more environment variables for the runs.
        seed: seeds the kill plan (and the choice of poison records).
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
        poison: float = 0.0,
    ) -> None:
        super().__init__(
            file,
            inputs=inputs,
            generate=generate,
            workdir=workdir,
            guarantee=guarantee,
            config=config,
            poison=poison,
            seed=seed,
        )
        self.seed = seed
        self.env = dict(env or {})
        self.run_timeout_s = run_timeout_s
        self.runs: list[RunRecord] = []
        self.kills: list[KillEvent] = []
        self._typical_s = DEFAULT_RUN_ESTIMATE_S
        self._run_seconds: list[float] = []
        #: The first run that ended on its own (the input ran out), and the kills before it.
        self._ran_out: tuple[int, int] | None = None
        self._spawned = 0

    def spawn(self, env: Mapping[str, str] | None = None, *, state_dir: str | None = None) -> _Proc:
        """Start a run of the application in a new process (and process group); with
        ``state_dir``, on that state directory instead of the workspace's."""
        index, self._spawned = self._spawned, self._spawned + 1
        log = os.path.join(self.workdir, "logs", f"run-{index:03d}.log")
        cmd = [sys.executable, "-m", "streams.cli", "run", self.file, "--until-idle"]
        overrides = {**self.overrides, **({"state.dir": state_dir} if state_dir else {})}
        cmd += [a for k, v in overrides.items() for a in ("--config", f"{k}={v}")]
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
            self.offset_commits(),
            self.output_commits(),
            self.txn_sequences(),
        )

    def _progressed(self, proc: _Proc) -> bool:
        """Whether ``proc`` committed a transaction it began (rolling its predecessor's
        PrepareCommit forward at startup does not count)."""
        if self.offset_commits() == proc.base_offsets:
            return False
        if self.guarantee == "at_least_once":
            return True
        now = self.txn_sequences(committed=True)
        return any(seq > proc.base_txns.get(tid, -1) for tid, seq in now.items())

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
                and self.output_commits() - proc.base_outputs >= kill.commits
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

    def check(self, *, kills_planned: int = 0, notes: Sequence[str] = ()) -> CrashReport:
        """Sweep orphans, compare everything with the reference; return the report."""
        report = self.new_report(
            kills_planned=kills_planned,
            kills=list(self.kills),
            runs=list(self.runs),
            notes=list(notes),
        )
        report.errors = [r.error for r in self.runs if r.error]
        self.compare(report)
        return report


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
    poison: float = 0.0,
) -> CrashReport:
    """Run ``file`` under ``kills`` SIGKILLs and check it against the reference.

    Args:
        inputs: ``{topic: path of a JSON-lines file}``, or records.
        generate: records from FILE's ``generate(n)`` (instead of, or besides, inputs).
        report: also write the JSON report there.
        on_run: told each run's record as it ends.
        poison: make this fraction of the input poison (a value no deserializer accepts)
            and check that each lands in the dead-letter topic exactly once and the rest
            of the output equals the reference without them (:mod:`streams.crash.poison`).

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
        poison=poison,
    )
    result = test.run(
        kills, points=points, kinds=kinds, lose_checkpoint=lose_checkpoint, on_run=on_run
    )
    if report is not None:
        Path(report).write_text(result.to_json())
    return result


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
