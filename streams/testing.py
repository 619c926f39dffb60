"""``TopologyTestDriver`` and the crash-recovery harness (the public testing API).

The driver is :mod:`streams.testkit.driver`, the harness :mod:`streams.crash`.
"""

from __future__ import annotations

from typing import Any

from streams.testkit.driver import *  # noqa: F403

#: Names of :mod:`streams.crash.harness` re-exported here, imported on first use (the harness
#: pulls in the storage and Spark runtime, pyspark included, which the driver does not need).
_CRASHTEST_NAMES = frozenset(
    {"CrashReport", "CrashTest", "CrashTestError", "InputRecord", "crashtest", "load_jsonl"}
)


def __getattr__(name: str) -> Any:
    """Return a name of the crash harness (``from streams.testing import crashtest``)."""
    if name in _CRASHTEST_NAMES:
        from streams.crash import harness  # noqa: PLC0415 - pyspark; the driver alone needs none

        return getattr(harness, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
