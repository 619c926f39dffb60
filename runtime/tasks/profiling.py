"""Profile the task hosts of a run: ``STREAMS_PROFILE_DIR=<dir>`` makes every host profile
the requests it answers (``cProfile``) and keep its figures in ``<dir>/host-<pid>.prof``,
rewritten after each request, so a run killed at any point leaves them. Read them together
with ``python -m runtime.tasks.profiling <dir> [lines]`` (internal time, the top lines).

The figures are wall-clock time; ``STREAMS_PROFILE_CLOCK=cpu`` makes them the host's CPU
time instead (where several hosts share few cores, their wall-clock time counts the time
they waited for one).
"""

from __future__ import annotations

import cProfile
import glob
import os
import pstats
import sys
import time
from collections.abc import Callable
from typing import TypeVar

PROFILE_DIR_ENV = "STREAMS_PROFILE_DIR"
PROFILE_CLOCK_ENV = "STREAMS_PROFILE_CLOCK"
T = TypeVar("T")


class HostProfile:
    """The profile of one host (inactive when ``STREAMS_PROFILE_DIR`` is not set)."""

    def __init__(self) -> None:
        directory = os.environ.get(PROFILE_DIR_ENV)
        cpu = os.environ.get(PROFILE_CLOCK_ENV) == "cpu"
        timer = time.process_time if cpu else time.perf_counter
        self._profile = cProfile.Profile(timer) if directory else None
        self._path = os.path.join(directory, f"host-{os.getpid()}.prof") if directory else ""

    def run(self, fn: Callable[[], T]) -> T:
        """Call ``fn`` (profiled when active), then keep the figures so far."""
        profile = self._profile
        if profile is None:
            return fn()
        profile.enable()
        try:
            return fn()
        finally:
            profile.disable()
            os.makedirs(os.path.dirname(self._path), exist_ok=True)
            profile.dump_stats(self._path)


def main(argv: list[str]) -> int:
    """Print the top lines of every host's profile under ``argv[0]``, merged."""
    files = sorted(glob.glob(os.path.join(argv[0], "host-*.prof")))
    if not files:
        print(f"no host profile under {argv[0]}", file=sys.stderr)
        return 1
    stats = pstats.Stats(*files)
    stats.sort_stats("tottime").print_stats(int(argv[1]) if len(argv) > 1 else 30)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
