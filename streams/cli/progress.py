"""What a person running ``streams-eos`` sees: a line per batch, progress bars, a log file.

* :class:`BatchLines` prints one line per batch (or per ``--progress-interval`` seconds):
  records in and out, lag, commit and batch time, rate.
* :class:`ProgressBar` draws a bar for a long step (``--generate``, ``console-produce``
  of a large file, crash-test runs): redrawn in place on a terminal, a line per tenth
  otherwise.
* :func:`log_to_file` sends the logs (Python's and the Spark JVM's) to a file, keeping
  stderr for the progress and the one-line errors (``--verbose`` keeps them on stderr).
"""

from __future__ import annotations

import glob
import json
import logging
import os
import sys
import threading
import time
from typing import IO, TYPE_CHECKING, Any

from common.conf import LOG_FILE_ENV
from topology.engine.task_metrics import RESTORE_PROGRESS

if TYPE_CHECKING:  # the runtime's thread modules import Spark: not for console-produce
    from runtime.thread.progress import BatchProgress


class BatchLines:
    """Prints batch progress (a :meth:`StreamsApp.add_progress_listener` listener).

    Args:
        interval_s: 0: a line per batch; else a line per interval summing its batches.
        out: where to print (stderr).
    """

    def __init__(self, interval_s: float = 0.0, out: IO[str] | None = None):
        self.interval_s = interval_s
        self.out = out or sys.stderr
        self._lock = threading.Lock()
        self._pending: list[BatchProgress] = []
        self._since = time.monotonic()

    def __call__(self, progress: BatchProgress) -> None:
        with self._lock:
            if self.interval_s <= 0:
                self._print(progress.line() + _rate(progress.records_in, progress.batch_ms))
                return
            self._pending.append(progress)
            if time.monotonic() - self._since >= self.interval_s:
                self._flush()

    def flush(self) -> None:
        """Print what the current interval gathered."""
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        batches, self._pending = self._pending, []
        self._since = time.monotonic()
        if not batches:
            return
        first, last = batches[0], batches[-1]
        n = len(batches)
        records_in = sum(b.records_in for b in batches)
        batch_ms = sum(b.batch_ms for b in batches)
        self._print(
            f"batches {first.batch_id}-{last.batch_id} ({n}): in {records_in:,} "
            f"out {sum(b.records_out for b in batches):,} lag {last.lag:,} "
            f"commit {sum(b.commit_ms for b in batches) / n:.0f} ms "
            f"batch {batch_ms / n:.0f} ms" + _rate(records_in, batch_ms)
        )

    def _print(self, line: str) -> None:
        print(line, file=self.out, flush=True)


def _rate(records: int, ms: float) -> str:
    return f" ({records / (ms / 1000):,.0f} records/s)" if records and ms > 0 else ""


class ProgressBar:
    """A progress bar of ``total`` steps for ``what``, on stderr.

    On a terminal it is redrawn in place; otherwise (a log, a pipe) a line is printed at
    each tenth, so logs stay short.
    """

    WIDTH = 30

    def __init__(self, what: str, total: int, out: IO[str] | None = None):
        self.what = what
        self.total = max(total, 0)
        self.out = out or sys.stderr
        self.done = 0
        self._tty = bool(getattr(self.out, "isatty", lambda: False)())
        self._tenth = -1
        self._started = time.monotonic()

    def update(self, n: int = 1) -> None:
        """``n`` more steps are done."""
        self.done = min(self.done + n, self.total) if self.total else self.done + n
        self._draw(final=False)

    def close(self) -> None:
        """The step is over: draw the bar complete (with its time) and end the line."""
        self._draw(final=True)

    def __enter__(self) -> ProgressBar:
        self._draw(final=False)
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is None:
            self.close()
        elif self._tty:
            print(file=self.out, flush=True)

    def _draw(self, *, final: bool) -> None:
        fraction = self.done / self.total if self.total else 1.0
        tenth = int(fraction * 10)
        if not self._tty and not final and tenth == self._tenth:
            return
        self._tenth = tenth
        filled = int(fraction * self.WIDTH)
        bar = "#" * filled + "." * (self.WIDTH - filled)
        text = f"{self.what} [{bar}] {self.done:,}/{self.total:,}"
        if final:
            text += f" in {time.monotonic() - self._started:.1f} s"
        if self._tty:
            end = "\n" if final else ""
            print(f"\r{text}", end=end, file=self.out, flush=True)
        else:
            print(text, file=self.out, flush=True)


class RestoreWatch(threading.Thread):
    """Draws a progress bar while the tasks of this machine restore their stores (from the
    ``restore-progress.json`` files they keep in their state directories; see
    :class:`topology.engine.task_metrics.RestoreStats`). A cluster's executors restore on
    their own disks: their progress shows in the metrics (``restore-total``,
    ``restore-remaining-records-total``), not here.

    Args:
        state_dir: the application's ``state.dir``.
        application_id: the application.
        out: where to draw (stderr).
    """

    def __init__(self, state_dir: str, application_id: str, out: IO[str] | None = None):
        super().__init__(name="restore-watch", daemon=True)
        self.patterns = [
            os.path.join(state_dir, application_id, "*", RESTORE_PROGRESS),
            os.path.join(state_dir, "executor-*", application_id, "*", RESTORE_PROGRESS),
        ]
        self.out = out
        self.stopped = threading.Event()
        self._bar: ProgressBar | None = None

    def run(self) -> None:
        while not self.stopped.wait(0.5):
            self.poll()
        if self._bar is not None:
            self._bar.close()

    def poll(self) -> None:
        """Look at the progress files once and draw."""
        restored = total = 0
        stores: set[str] = set()
        for path in [p for pattern in self.patterns for p in glob.glob(pattern)]:
            try:
                with open(path, encoding="utf-8") as f:
                    progress = json.load(f)
            except (OSError, ValueError):  # removed or being replaced
                continue
            for store, (done, of) in progress.items():
                stores.add(store)
                restored += done
                total += of
        if total:
            what = f"restoring {', '.join(sorted(stores))}"
            if self._bar is None or self._bar.total != total:
                if self._bar is not None:
                    self._bar.close()
                self._bar = ProgressBar(what, total, self.out)
            self._bar.update(restored - self._bar.done)
        elif self._bar is not None:
            self._bar.done = self._bar.total
            self._bar.close()
            self._bar = None

    def stop(self) -> None:
        """Stop watching."""
        self.stopped.set()


class _NoTraceback(logging.Formatter):
    """One line per record on stderr: the tracebacks go to the log file."""

    def format(self, record: logging.LogRecord) -> str:
        saved = record.exc_info, record.exc_text, record.stack_info
        record.exc_info = record.exc_text = record.stack_info = None
        try:
            return super().format(record).splitlines()[0]
        finally:
            record.exc_info, record.exc_text, record.stack_info = saved


def log_to_file(path: str) -> None:
    """Send every log record (INFO and up, with tracebacks) to ``path``, and only one-line
    warnings and errors to stderr; the Spark JVM started after this logs to ``path`` only."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.StreamHandler) and not isinstance(
            handler, logging.FileHandler
        ):
            handler.setFormatter(_NoTraceback("%(levelname)s %(name)s: %(message)s"))
    file_handler = logging.FileHandler(path, encoding="utf-8")
    file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    file_handler.setLevel(logging.INFO)
    root.addHandler(file_handler)
    root.setLevel(min(root.level or logging.WARNING, logging.INFO))
    for handler in root.handlers:
        if not isinstance(handler, logging.FileHandler):
            handler.setLevel(max(handler.level, logging.WARNING))
            # py4j reports each error a Python callback raised, before the run's own line
            handler.addFilter(lambda record: not record.name.startswith("py4j"))
    os.environ[LOG_FILE_ENV] = path
