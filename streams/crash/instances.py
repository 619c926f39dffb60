"""The application instances of a fault campaign (:mod:`streams.crash.campaign`).

Each instance is one ``streams-eos run FILE`` process with a state directory of its own,
started in a process group of its own: its Spark driver JVM, and on ``local-cluster`` its
executor JVMs, and every Python worker and task host belong to the group, so a kill or a
pause reaches the whole instance, as a machine's failure would. The campaign restarts an
instance that ended on its own (a supervisor's job), noting how it ended.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from runtime.app.process_id import PROCESS_FILE


@dataclass
class Exit:
    """An instance's process that ended without the campaign ending it."""

    instance: str
    at_s: float
    code: int | None
    reason: str


@dataclass
class Instance:
    """One ``streams-eos run`` process of the application, restarted as needed.

    Args:
        name: ``a``, ``b``, ...
        file: the topology file.
        state_dir: its own ``state.dir``.
        log_dir: where each start's log goes (``<name>-<start>.log``).
        overrides: ``--config`` pairs of every start.
        env: its environment (besides the campaign's).
    """

    name: str
    file: str
    state_dir: str
    log_dir: str
    overrides: Mapping[str, str]
    application_id: str
    env: Mapping[str, str] = field(default_factory=dict)
    popen: subprocess.Popen[bytes] | None = None
    starts: int = 0
    log: str = ""
    paused: bool = False
    #: Kept down on purpose (a fault): the supervisor leaves it be.
    held: bool = False

    def start(self, env: Mapping[str, str] | None = None) -> None:
        """Start the instance (a previous process still running is killed first)."""
        if self.alive():
            self.kill()
        self.log = os.path.join(self.log_dir, f"{self.name}-{self.starts:03d}.log")
        self.starts += 1
        cmd = [sys.executable, "-m", "streams.cli", "run", "--verbose", self.file]
        overrides = {**self.overrides, "state.dir": self.state_dir}
        cmd += [a for k, v in overrides.items() for a in ("--config", f"{k}={v}")]
        with open(self.log, "wb") as out:
            self.popen = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env, **(env or {})},
                start_new_session=True,
            )
        self.paused = False

    def alive(self) -> bool:
        """Whether its process runs (a paused one does)."""
        return self.popen is not None and self.popen.poll() is None

    def ended(self) -> int | None:
        """Its exit code once its process ended on its own (None: it runs, or was never
        started)."""
        return None if self.popen is None else self.popen.poll()

    def kill(self) -> None:
        """SIGKILL the whole instance (driver, JVMs, workers) and wait for it."""
        if self.popen is None:
            return
        self._signal_tree(signal.SIGKILL)
        self.popen.wait()
        self.paused = False

    def pause(self) -> None:
        """Stop every process of the instance (SIGSTOP): a frozen machine."""
        self._signal_tree(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """Let a paused instance go on (SIGCONT)."""
        self._signal_tree(signal.SIGCONT)
        self.paused = False

    def stop(self, timeout_s: float = 90.0) -> int | None:
        """Stop the instance as Ctrl-C would (SIGINT to its driver); kill it after
        ``timeout_s``; return its exit code."""
        if self.popen is None:
            self.sweep()
            return None
        if self.paused:
            self.resume()
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout_s)
        code = self.popen.poll()
        self._signal_tree(signal.SIGKILL)  # what the driver left behind (JVMs, workers)
        self.popen.wait()
        self.sweep()
        return code

    def sweep(self) -> None:
        """SIGKILL any process started as this instance that its handle does not know of
        (one started as a signal interrupted its start: Popen never returned it). Looked
        for twice: a child between its fork and its exec does not show its arguments yet."""
        mark = f"state.dir={self.state_dir}"
        for look in range(2):
            time.sleep(0.3 * look)
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit() or int(entry.name) == os.getpid():
                    continue
                with contextlib.suppress(OSError):
                    argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
                    if mark in argv:
                        os.killpg(os.getpgid(int(entry.name)), signal.SIGKILL)

    def pids(self, program: str, argument: str) -> list[int]:
        """The processes of the instance running ``program`` (the end of its first
        argument: ``java``, ``python``) with ``argument`` among its arguments."""
        return sorted(
            pid
            for pid, argv in self._tree().items()
            if os.path.basename(argv[0]).startswith(program) and argument in argv[1:]
        )

    def _tree(self) -> dict[int, list[str]]:
        """Every process of the instance and its command line: its process group's and
        their descendants (Spark's Python worker daemon makes a group of its own)."""
        if self.popen is None:
            return {}
        table: dict[int, tuple[int, list[str]]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
                if os.getpgid(int(entry.name)) == self.popen.pid:
                    ppid = self.popen.pid  # in the group: counts as the instance's
                table[int(entry.name)] = (ppid, argv)
        mine = {self.popen.pid}
        while more := {pid for pid, (ppid, _) in table.items() if ppid in mine} - mine:
            mine |= more
        return {pid: table[pid][1] for pid in mine if pid in table}

    def process_id(self) -> str | None:
        """Its process id (its transactional ids' middle part), once it started once."""
        path = os.path.join(self.state_dir, self.application_id, PROCESS_FILE)
        try:
            with open(path, encoding="utf-8") as f:
                return str(json.load(f)["processId"])
        except (OSError, ValueError, KeyError):
            return None

    def last_error(self) -> str:
        """The last ``error:`` line of its current log (or its last line)."""
        try:
            lines = Path(self.log).read_text(errors="replace").splitlines()
        except OSError:
            return ""
        errors = [line for line in lines if line.startswith("error:")]
        return (errors or lines or [""])[-1][:400]

    def _signal_tree(self, sig: int) -> None:
        """Signal the group and every descendant (the worker daemons, outside it)."""
        for pid in self._tree():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        self._signal(sig)

    def _signal(self, sig: int) -> None:
        if self.popen is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, sig)


def wait_until(check: object, timeout_s: float, step_s: float = 0.2) -> float | None:
    """Poll ``check()`` until it holds; return when (monotonic), or None after
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        if callable(check) and check():
            return time.monotonic()
        if time.monotonic() > deadline:
            return None
        time.sleep(step_s)
