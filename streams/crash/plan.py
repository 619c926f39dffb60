"""The kill plan and the report of the crash harness (:mod:`streams.crash.harness`).

A plan spreads its kills over three kinds:

* ``fault``: the process kills itself at a named point of the commit protocol
  (``STREAMS_FAULT_POINT``, see :mod:`runtime.txn.faults`), on the ``hit``-th time it gets
  there; the points are taken in a shuffled round so that every point is used (under
  at_least_once the one point is ``before_offsets_commit``);
* ``random``: the harness SIGKILLs it at a random wall-clock moment of the run (a fraction
  of the run's typical length: during startup, processing or a commit);
* ``commit``: the harness SIGKILLs it the moment a new commit of an output, repartition
  or changelog table appears (seen from outside, so it works under every guarantee: under
  at_least_once it lands between the outputs and the positions, where duplicates come from).
"""

from __future__ import annotations

import json
import random
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

KillKind = Literal["fault", "random", "commit"]
KILL_KINDS: tuple[KillKind, ...] = ("fault", "random", "commit")
GUARANTEES = ("exactly_once_v2", "exactly_once", "at_least_once")
_FIXED = ("before_prepare", "after_prepare", "before_complete", "after_complete")


@dataclass(frozen=True, slots=True)
class Kill:
    """One planned kill (see the module docstring for the kinds)."""

    kind: KillKind
    point: str | None = None
    hit: int = 1
    fraction: float = 0.5
    commits: int = 1

    def describe(self) -> str:
        """Return a short label: ``fault:after_prepare#2``, ``random``, ``commit#1``."""
        if self.kind == "fault":
            return f"fault:{self.point}#{self.hit}"
        if self.kind == "commit":
            return f"commit#{self.commits}"
        return "random"


def fault_points(participants: int, guarantee: str = "exactly_once_v2") -> list[str]:
    """Return every fault point of a commit with ``participants`` participant tables
    (at_least_once has no transaction: its one point is before the positions commit)."""
    if guarantee == "at_least_once":
        return ["before_offsets_commit"]
    middle = [f"after_participant_{k}" for k in range(1, participants + 1)]
    return [_FIXED[0], _FIXED[1], *middle, _FIXED[2], _FIXED[3]]


def plan_kills(
    n: int,
    *,
    seed: int,
    guarantee: str,
    points: list[str],
    kinds: tuple[KillKind, ...] | None = None,
    max_hit: int = 2,
) -> list[Kill]:
    """Return ``n`` kills: half at fault ``points`` (all of them in turn, shuffled), the
    rest at random moments and at commits. (Under at_least_once the one fault point is
    ``before_offsets_commit``; see :func:`fault_points`.)"""
    rng = random.Random(seed)
    if kinds is None:
        kinds = KILL_KINDS if points else ("commit", "random")
    if "fault" in kinds and not points:
        raise ValueError("fault-point kills need fault points")
    cycle = _cycle(kinds)
    deck: list[str] = []
    kills = []
    for i in range(n):
        kind = cycle[i % len(cycle)]
        if kind == "fault":
            if not deck:
                deck = list(points)
                rng.shuffle(deck)
            kills.append(Kill("fault", point=deck.pop(), hit=rng.randint(1, max_hit)))
        elif kind == "random":
            kills.append(Kill("random", fraction=rng.uniform(0.05, 1.0)))
        else:
            kills.append(Kill("commit", commits=rng.randint(1, max_hit)))
    return kills


def _cycle(kinds: tuple[KillKind, ...]) -> list[KillKind]:
    """Fault kills every other time when they are allowed, the other kinds in between."""
    others: list[KillKind] = [k for k in kinds if k != "fault"]
    if "fault" not in kinds:
        return others
    if not others:
        return ["fault"]
    out: list[KillKind] = []
    for other in others:
        out.extend(("fault", other))
    return out


@dataclass
class KillEvent:
    """A kill that happened: which run, what kind, where, how far into the run."""

    run: int
    kind: str
    point: str
    seconds: float
    phase: str


@dataclass
class RunRecord:
    """One process of the crash test."""

    run: int
    exit_code: int | None
    seconds: float
    killed: bool
    recovery_s: float | None
    log: str
    error: str | None = None


@dataclass
class CrashReport:
    """The outcome of a crash test; ``exactly_once`` is the verdict (exit code 0)."""

    file: str
    application_id: str
    guarantee: str
    seed: int
    workdir: str
    kills_planned: int
    kills: list[KillEvent] = field(default_factory=list)
    runs: list[RunRecord] = field(default_factory=list)
    records_in: int = 0
    records_expected: int = 0
    records_out: int = 0
    duplicates: int = 0
    losses: int = 0
    misplaced: int = 0
    reordered: int = 0
    stores: list[dict[str, Any]] = field(default_factory=list)
    open_transactions: list[str] = field(default_factory=list)
    staged_swept: int = 0
    staged_left: list[str] = field(default_factory=list)
    offsets_lag: dict[str, int] = field(default_factory=dict)
    #: With poison: the dead-letter check (streams.crash.poison.DeadLetterCheck's fields).
    dead_letters: dict[str, Any] | None = None
    diff: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def restarts(self) -> int:
        """How many times the application was started again after the first run."""
        return max(0, len(self.runs) - 1)

    @property
    def recovery_times(self) -> list[float]:
        """Seconds from each restart to its first commit (or its clean end, if idle)."""
        return [r.recovery_s for r in self.runs[1:] if r.recovery_s is not None]

    @property
    def recovery_p50(self) -> float | None:
        """The median recovery time, in seconds."""
        times = self.recovery_times
        return round(statistics.median(times), 3) if times else None

    @property
    def recovery_max(self) -> float | None:
        """The longest recovery time, in seconds."""
        times = self.recovery_times
        return round(max(times), 3) if times else None

    @property
    def exactly_once(self) -> bool:
        """Whether every check held: outputs and stores equal the reference, nothing
        hanging, no staged file left, every input covered by the committed positions."""
        stores_ok = all(s["ok"] for s in self.stores)
        return not (
            self.errors
            or self.duplicates
            or self.losses
            or self.misplaced
            or self.reordered
            or not stores_ok
            or self.open_transactions
            or self.staged_left
            or self.offsets_lag
            or (self.dead_letters is not None and not self.dead_letters["ok"])
        )

    @property
    def exit_code(self) -> int:
        """0 when exactly-once held, else 1."""
        return 0 if self.exactly_once else 1

    def to_dict(self) -> dict[str, Any]:
        """Return the report as JSON-able data (what ``--report`` writes)."""
        data = asdict(self)
        data.update(
            restarts=self.restarts,
            recovery_s=self.recovery_times,
            recovery_p50_s=self.recovery_p50,
            recovery_max_s=self.recovery_max,
            exactly_once=self.exactly_once,
        )
        return data

    def to_json(self) -> str:
        """Return :meth:`to_dict` as indented JSON."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    def text(self) -> str:
        """Return the human-readable report (what the command prints)."""
        verdict = "HELD" if self.exactly_once else "VIOLATED"
        lines = [
            f"crash test of {self.file} (application.id={self.application_id}, "
            f"{self.guarantee}, seed={self.seed})",
            f"kills: {len(self.kills)} of {self.kills_planned} planned; restarts: {self.restarts}",
        ]
        lines += [
            f"  run {k.run}: {k.kind} {k.point} at {k.seconds:.1f}s ({k.phase})" for k in self.kills
        ]
        lines += [
            f"recovery: p50={_secs(self.recovery_p50)} max={_secs(self.recovery_max)} "
            f"over {len(self.recovery_times)} restarts",
            f"records: in={self.records_in} out={self.records_out} "
            f"expected={self.records_expected}",
            f"duplicates={self.duplicates} losses={self.losses} misplaced={self.misplaced} "
            f"reordered keys={self.reordered}",
        ]
        for s in self.stores:
            lines.append(
                f"store {s['store']}: {'equal' if s['ok'] else 'DIFFERS'} (entries={s['entries']}"
                f" missing={s['missing']} extra={s['extra']} different={s['different']})"
            )
            lines += [f"  local {x}" for x in s["local"]]
        lines.append(f"open transactions: {', '.join(self.open_transactions) or 'none'}")
        lines.append(
            f"staged files: {self.staged_swept} swept, {len(self.staged_left)} left"
            + "".join(f"\n  {p}" for p in self.staged_left[:5])
        )
        lag = ", ".join(f"{k}={v}" for k, v in self.offsets_lag.items())
        lines.append(f"committed positions: {'past the input' if not lag else 'behind: ' + lag}")
        lines += _dead_letter_lines(self.dead_letters)
        if self.diff:
            lines.append("first mismatches:")
            lines += [f"  {d}" for d in self.diff]
        lines += [f"error: {e}" for e in self.errors]
        lines += [f"note: {n}" for n in self.notes]
        lines.append(f"exactly-once {verdict}")
        return "\n".join(lines)


def _dead_letter_lines(check: dict[str, Any] | None) -> list[str]:
    if check is None:
        return []
    verdict = "each poison record once" if check["ok"] else "DIFFERS"
    lines = [
        f"dead letters ({check['topic']}): {verdict} (poison={check['expected']} "
        f"found={check['found']} duplicates={check['duplicates']} losses={check['losses']} "
        f"strays={check['strays']})"
    ]
    return lines + [f"  {d}" for d in check["diff"]]


def _secs(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}s"
