"""A task host: the long-lived process that holds tasks on an executor.

Spark's Python workers come and go (Spark reuses, replaces and kills them, and hands any
partition to any idle worker), so a task does not live in one: each task lives in a host
process forked by the executor's :mod:`host server <runtime.tasks.server>` (a host of its
own, or beyond ``task.hosts.max`` hosts one it shares with other tasks, see
:meth:`~runtime.tasks.contract.BatchPlan.host_of`), and the worker that runs the task's
Spark task sends it the batch over a Unix socket and hands back what it returns. The host
keeps each task's directory lock for as long as it holds the task, so two writers never
open one RocksDB; a worker that Spark kills loses nothing.

A host serves one request at a time (a task's batches are sequential; tasks sharing a host
take turns) and exits, closing its tasks, when its server goes away, when told to, or after
``IDLE_TIMEOUT_S`` without a request; a killed host leaves only what the next one restores
(KIP-892).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import select
import signal
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.acero  # Arrow's grouping, loaded before hosts fork
import pyarrow.compute as pc
from pyspark import cloudpickle  # noqa: F401 - unpickling a topology needs it

import statestores.stores  # noqa: F401 - a task's stores
from runtime.storage.fs import register_storage_options
from runtime.tasks.contract import BatchPlan, ThreadPlan
from runtime.tasks.manager import TaskManager
from runtime.tasks.profiling import HostProfile
from runtime.tasks.protocol import (
    PeerGoneError,
    authenticated,
    decode_inputs,
    recv_frame,
    rows_bytes,
    send_frame,
)
from topology.engine.columnar import collection_paused

log = logging.getLogger(__name__)

#: A host without a request for this long closes its task and exits.
IDLE_TIMEOUT_S = 1800.0


class _StopError(Exception):
    """SIGTERM: close the task and exit."""


def warm_up() -> None:
    """Load what the task engine loads on first use, so that every host forked afterwards
    has it already: Arrow's compute functions load pandas when first called (this module
    imports the rest at its top: Acero, cloudpickle, the stores' module)."""
    column = pa.array(["warm"], pa.string())
    pc.filter(column, pc.equal(column, "warm"))


def serve(  # noqa: PLR0917 - what the server hands its host
    listener: socket.socket,
    server_pid: int,
    host: str,
    tcp: socket.socket | None = None,
    secrets: Sequence[str] = (),
    server_address: str = "",
) -> None:
    """Serve requests on ``listener`` (and ``tcp``, whose peers must send one of
    ``secrets`` first) until the server is gone, a stop, or idleness. Answers name
    ``server_address``, where other executors reach the server of this one."""
    manager = TaskManager()
    known = _Known(secrets=list(secrets), server=server_address)
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    listeners = [listener, *([tcp] if tcp is not None else [])]
    profile = HostProfile()
    last = time.monotonic()
    try:
        while True:
            ready, _, _ = select.select(listeners, [], [], 1.0)
            if not ready:
                if os.getppid() != server_pid or time.monotonic() - last > IDLE_TIMEOUT_S:
                    return
                continue
            last = time.monotonic()
            conn, _ = ready[0].accept()
            with conn:
                if not authenticated(conn, known.secrets):
                    continue
                conn.settimeout(None)
                if not profile.run(lambda: _handle(conn, manager, known)):  # noqa: B023
                    return
    except _StopError:
        return
    finally:
        manager.close_all()
        log.info("[task host %s] closed", host)


def _raise_stop(signum: int, frame: Any) -> None:
    raise _StopError


@dataclass
class _Known:
    """What a host keeps between requests besides its tasks: the last thread plan (by
    its key), the secrets that open a TCP connection,
    and its server's TCP address (named in every answer)."""

    secrets: list[str]
    server: str
    threads: dict[str, ThreadPlan] = field(default_factory=dict)


def _handle(conn: socket.socket, manager: TaskManager, known: _Known) -> bool:
    """Answer one request; return False when told to stop."""
    try:
        header, body = recv_frame(conn)
    except (PeerGoneError, OSError):
        return True
    if header.get("op") == "stop":
        send_frame(conn, {"ok": True})
        return False
    secret = header.get("secret")
    if secret and conn.family == socket.AF_UNIX and secret not in known.secrets:
        known.secrets.append(secret)  # from this executor's worker: trusted
    try:
        thread = known.threads.get(header["thread_key"])
        if thread is None and header.get("thread") is None:
            send_frame(conn, {"need_thread": True})
            header, body = recv_frame(conn)
        if thread is None:
            thread = pickle.loads(header["thread"])
            known.threads = {header["thread_key"]: thread}
        plan = BatchPlan(thread=thread, **pickle.loads(header["plan"]))
        register_storage_options(thread.root, thread.config.storage_options)
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
        send_frame(conn, {"ok": True, "server": known.server}, rows_bytes(rows))
    except OSError:  # the worker is gone (Spark killed it): the batch's outcome decides
        log.info("[task host] the worker left before the result was sent")
    return True


def _run(manager: TaskManager, plan: BatchPlan, header: dict[str, Any], body: Any) -> Any:
    """Run the request's visit of its task; return its rows."""
    return manager.run(
        plan,
        header["subtopology"],
        header["partition"],
        decode_inputs(plan.thread.root, header.get("inputs", ()), body),
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
