"""Shared settings of the crash tests: real processes on local Spark, killed with SIGKILL."""

from __future__ import annotations

from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

#: The JVM of each run starts in about half the time with the C1 compiler only; the runs
#: are short, so nothing is lost.
FAST_JVM = {"JDK_JAVA_OPTIONS": "-XX:TieredStopAtLevel=1"}

#: Small batches (many transactions to kill) that still leave time between kills.
RUN_CONFIG = {
    "commit.interval.ms": "100",
    "max.poll.records": "5",
    "group.initial.rebalance.delay.ms": "0",  # one instance: no one to wait for
}


def example(name: str) -> Path:
    """Return the path of ``examples/<name>.py``, skipping the test when it is missing."""
    path = EXAMPLES / f"{name}.py"
    if not path.is_file():
        pytest.skip(f"examples/{name}.py does not exist (yet): nothing to crash-test")
    return path


def runnable_examples() -> list[str]:
    """Every example that defines build_topology() and generate(n) (what the harness needs)."""
    names = []
    for path in sorted(EXAMPLES.glob("*.py")):
        text = path.read_text()
        if "def build_topology(" in text and "def generate(" in text:
            names.append(path.stem)
    return names
