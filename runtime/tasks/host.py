"""A task host: the long-lived process that holds one task on an executor.

Spark's Python workers come and go (Spark reuses, replaces and kills them, and hands any
partition to any idle worker), so a task does not live in one: each task lives in a host
process of its own, forked by the executor's :mod:`host server <runtime.tasks.server>`,
and the worker that runs the task's Spark task sends it the batch over a Unix socket and
hands back what it returns. The host keeps the task's directory lock for as long as it
lives, so two writers never open one RocksDB; a worker that Spark kills loses nothing.

A host serves one request at a time (a task's batches are sequential) and exits, closing
its task, when its server goes away, when told to, or after ``IDLE_TIMEOUT_S`` without a
request; a killed host leaves only what the next one restores (KIP-892).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import signal
import socket
import time
from typing import Any

from runtime.tasks.manager import TaskManager
from runtime.tasks.protocol import (
    PeerGoneError,
    batches_bytes,
    decode_inputs,
    recv_frame,
    send_frame,
)
from runtime.tasks.task_runner import ROW_SCHEMA, BatchPlan
from topology.engine.columnar import collection_paused

log = logging.getLogger(__name__)

#: A host without a request for this long closes its task and exits.
IDLE_TIMEOUT_S = 1800.0


class _StopError(Exception):
    """SIGTERM: close the task and exit."""


def warm_up() -> None:
    """Import what the task engine imports on first use (Arrow's compute functions load
    pandas when first called, its grouping lives in Acero; a task's topology is unpickled
    with Spark's cloudpickle; the stores' module is imported by a task's first build), so
    that every host forked afterwards has it already."""
    import pyarrow as pa
    import pyarrow.acero
    import pyarrow.compute as pc
    from pyspark import cloudpickle  # noqa: F401 - unpickling a topology needs it

    import statestores.stores  # noqa: F401 - a task's stores

    column = pa.array(["warm"], pa.string())
    pc.filter(column, pc.equal(column, "warm"))


def serve(listener: socket.socket, server_pid: int, task_id: str) -> None:
    """Serve requests on ``listener`` until the server is gone, a stop, or idleness."""
    manager = TaskManager()
    statics: dict[str, Any] = {}
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    listener.settimeout(1.0)
    last = time.monotonic()
    try:
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                if os.getppid() != server_pid or time.monotonic() - last > IDLE_TIMEOUT_S:
                    return
                continue
            last = time.monotonic()
            with conn:
                conn.settimeout(None)
                if not _handle(conn, manager, statics):
                    return
    except _StopError:
        return
    finally:
        manager.close_all()
        log.info("[task host %s] closed", task_id)


def _raise_stop(signum: int, frame: Any) -> None:
    raise _StopError


def _handle(conn: socket.socket, manager: TaskManager, statics: dict[str, Any]) -> bool:
    """Answer one request; return False when told to stop."""
    try:
        header, body = recv_frame(conn)
    except (PeerGoneError, OSError):
        return True
    if header.get("op") == "stop":
        send_frame(conn, {"ok": True})
        return False
    try:
        static = statics.get(header["static_key"])
        if static is None and header.get("static") is None:
            send_frame(conn, {"need_static": True})
            header, body = recv_frame(conn)
        if static is None:
            static = pickle.loads(header["static"])
            statics.clear()
            statics[header["static_key"]] = static
        plan = BatchPlan(**static, **pickle.loads(header["plan"]))
        with collection_paused():  # the whole visit: processing, flushes, packing
            rows = _run(manager, plan, header, body)
    except (PeerGoneError, BrokenPipeError):
        return True
    except _StopError:
        raise
    except BaseException as exc:  # the worker raises it in its Spark task
        _send_error(conn, exc)
        return True
    try:
        send_frame(conn, {"ok": True}, batches_bytes(rows, ROW_SCHEMA))
    except OSError:  # the worker is gone (Spark killed it): the batch's outcome decides
        log.info("[task host] the worker left before the result was sent")
    return True


def _run(manager: TaskManager, plan: BatchPlan, header: dict[str, Any], body: Any) -> Any:
    """Run the request's visit of its task; return its rows."""
    return manager.run(
        plan,
        header["subtopology"],
        header["partition"],
        decode_inputs(plan.root, header.get("inputs", ()), body),
        header["topics"],
        header.get("level", 0),
        header.get("earlier", []),
    )


def _send_error(conn: socket.socket, exc: BaseException) -> None:
    try:
        payload: bytes | None = pickle.dumps(exc)
    except Exception:
        payload = None
    with contextlib.suppress(OSError):
        send_frame(conn, {"ok": False, "error": payload, "message": f"{type(exc).__name__}: {exc}"})
