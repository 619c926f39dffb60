"""Run the streams-eos command line in a new process, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys


def cli(root: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``streams-eos ARGS`` with ``STREAMS_ROOT=root``; return the finished process."""
    env = {**os.environ, "STREAMS_ROOT": root}
    return subprocess.run(
        [sys.executable, "-m", "streams.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
