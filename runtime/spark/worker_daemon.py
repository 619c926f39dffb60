"""The Python worker daemon of the sessions built here: PySpark's own daemon
(``pyspark.daemon``), with the modules of a micro-batch imported once before it forks.

Spark starts ``python -m <spark.python.daemon.module> <worker module>`` and has the daemon
fork one process per Python worker. With PySpark's daemon each worker imports pyarrow,
pandas, deltalake, rocksdict and this project on its own after the fork: about a CPU
second per worker, and a micro-batch of two stages on ``local[2]`` starts four of them.
Imported here, before the fork, the workers share them.

PySpark's daemon imports nothing before it forks, because a thread started by an import
would not exist in the children. The modules here start none that matter: the BLAS pool
of numpy follows ``OMP_NUM_THREADS``, which Spark sets for its workers, and the
allocators' background threads (jemalloc, of pyarrow and deltalake) are made fork-safe
by jemalloc itself, as for any forked Python process. Only the daemon of
``pyspark.worker`` (UDFs, ``mapInArrow``) preloads (Spark starts the data source's
planning workers through ``pyspark.daemon`` itself).
"""

from __future__ import annotations

import gc
import importlib
import sys
import traceback

from pyspark.daemon import manager

#: The worker module whose daemon preloads (Spark passes it as the first argument).
UDF_WORKER = "pyspark.worker"

#: What the workers of a micro-batch import: PySpark's worker, the source's ``read`` and
#: the task runner (through ``runtime.thread.stream_thread``), pandas, which PySpark's Arrow
#: serializers import, and the task engine, for the task host server a worker forks.
PRELOAD = (
    "pyspark.worker",
    "pandas",
    "runtime.spark.source",
    "runtime.thread.stream_thread",
    "runtime.tasks.host",
)


def preload(modules: tuple[str, ...] = PRELOAD) -> None:
    """Import ``modules``; report a failure on stderr and go on (a worker imports what it
    needs itself)."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:
            print(f"worker daemon: could not preload {name}:", file=sys.stderr)
            traceback.print_exc()


def main() -> None:
    """Preload (for the UDF workers' daemon only), then run PySpark's daemon."""
    if len(sys.argv) < 2 or sys.argv[1] == UDF_WORKER:
        preload()

    # PySpark's daemon runs a full collection in a reused worker after every Spark task:
    # with the preloaded modules that scan is most of a short task's cost. Imported
    # modules live as long as the process: frozen, the collector never scans them again.
    gc.freeze()

    manager()


if __name__ == "__main__":
    main()
