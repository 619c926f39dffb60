"""What a fault campaign (:mod:`streams.crash.campaign`) reports, and its fault plans."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from streams.crash.inputs import CrashTestError
from streams.crash.instances import Exit
from streams.crash.nemesis import FAULT_KINDS
from streams.crash.plan import CrashReport

#: Every recovery must take less than this.
RECOVERY_LIMIT_S = 60.0


@dataclass
class FaultEvent:
    """One fault: what, where, when (seconds into the campaign), and its recovery."""

    index: int
    kind: str
    target: str
    detail: str
    at_s: float
    healed_s: float
    recovery_s: float | None = None
    exits: list[str] = field(default_factory=list)

    @property
    def recovered(self) -> bool:
        """Whether every instance committed again within the limit."""
        return self.recovery_s is not None and self.recovery_s < RECOVERY_LIMIT_S


@dataclass
class CampaignReport:
    """The outcome: the faults, the instances' own ends, and the exactly-once check."""

    check: CrashReport
    faults: list[FaultEvent]
    exits: list[Exit]
    seconds: float
    instances: int
    master: str
    object_store: bool
    background: dict[str, int] = field(default_factory=dict)
    #: Requests the instances sent the object store, by kind (the proxy's count).
    requests: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Exactly once, and every fault recovered from within the limit."""
        return self.check.exactly_once and all(f.recovered for f in self.faults)

    @property
    def exit_code(self) -> int:
        """0 when :attr:`ok`, else 1."""
        return 0 if self.ok else 1

    def table(self) -> list[str]:
        """One line per fault kind: count, recovered, recovery p50 and max."""
        lines = [f"{'fault':<16} {'count':>5} {'recovered':>9} {'p50 s':>7} {'max s':>7}"]
        for kind, events in sorted(_by_kind(self.faults).items()):
            times = [f.recovery_s for f in events if f.recovery_s is not None]
            p50 = f"{statistics.median(times):.1f}" if times else "-"
            top = f"{max(times):.1f}" if times else "-"
            done = sum(f.recovered for f in events)
            lines.append(f"{kind:<16} {len(events):>5} {done:>9} {p50:>7} {top:>7}")
        return lines

    def text(self) -> str:
        """The human-readable report."""
        kinds = len({f.kind for f in self.faults})
        lines = [
            f"fault campaign: {len(self.faults)} faults of {kinds} kinds in "
            f"{self.seconds / 60:.1f} min; {self.instances} instances on {self.master}"
            f"{', root on an object store behind the fault proxy' if self.object_store else ''}",
            *self.table(),
        ]
        if self.background:
            shown = ", ".join(f"{k} x{v}" for k, v in sorted(self.background.items()))
            lines.append(f"background storage faults: {shown}")
        if self.requests:
            total = sum(self.requests.values())
            top = sorted(self.requests.items(), key=lambda kv: -kv[1])[:8]
            lines.append(
                f"object store requests: {total / self.seconds:.1f}/s; "
                + ", ".join(f"{k} {v / self.seconds:.1f}/s" for k, v in top)
            )
        lines += [
            f"  #{f.index} {f.at_s:7.1f}s {f.kind} on {f.target}: {f.detail}; recovered in "
            f"{'NOT' if f.recovery_s is None else f'{f.recovery_s:.1f} s'}"
            + "".join(f"\n      {e}" for e in f.exits)
            for f in self.faults
        ]
        lines.append(f"instances ended on their own and were restarted: {len(self.exits)}")
        lines.append(self.check.text())
        verdict = "HELD" if self.ok else "VIOLATED"
        lines.append(f"campaign {verdict}: exactly-once and every recovery under 60 s")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able data (``--report``)."""
        data = asdict(self)
        data["check"] = self.check.to_dict()
        data["ok"] = self.ok
        data["table"] = self.table()
        return data


def _by_kind(events: Sequence[FaultEvent]) -> dict[str, list[FaultEvent]]:
    out: dict[str, list[FaultEvent]] = {}
    for event in events:
        out.setdefault(event.kind, []).append(event)
    return out


def kinds_of(spec: str) -> list[str]:
    """The fault kinds of a ``--faults`` plan: ``all``, or kinds separated by commas,
    each optionally weighted (``kill:2,pause``: kills twice as often).

    Raises:
        CrashTestError: an unknown kind or a bad weight.
    """
    if spec.strip() == "all":
        return list(FAULT_KINDS)
    kinds: list[str] = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        kind, _, weight = part.partition(":")
        if kind not in FAULT_KINDS:
            raise CrashTestError(
                f"--faults: unknown kind {kind!r}; one of {', '.join(FAULT_KINDS)}"
            )
        if weight and not weight.isdigit():
            raise CrashTestError(f"--faults {part!r}: the weight must be a whole number")
        kinds += [kind] * int(weight or 1)
    if not kinds:
        raise CrashTestError("--faults: no fault kind given")
    return kinds
