"""The Spark worker's side of a task: send the batch to the task's host, return its rows.

:func:`run_on_host` finds the host of a task through the executor's host server (starting
the server when there is none), sends the batch's plan and records, and returns the rows
the host answers. The topology and configuration, the same for every batch, travel once
per host: each request names them by a key the driver computed once, and the host asks
for them only when it does not know that key yet.

A host that dies in the middle of a request (killed, out of memory) costs a retry here:
the server forks a new one, which rebuilds the task from its committed state (a prepared
batch of the dead host's transaction is settled by the outcomes the driver sends).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import pickle
import socket
import time
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from pyspark import cloudpickle

from common.errors import StreamsError
from runtime.tasks.protocol import (
    SERVER_SOCKET,
    InputPiece,
    PeerGoneError,
    encode_inputs,
    host_socket,
    read_table,
    recv_frame,
    send_frame,
    socket_dir,
)
from runtime.tasks.server import fork_server

log = logging.getLogger(__name__)

#: Fields of a batch plan that are the same for every batch: sent once per host.
STATIC_FIELDS = ("topology", "config")
ATTEMPTS = 4
SERVER_START_S = 30.0

_last_plan: list[Any] = [None, b""]  # plan, its pickled per-batch fields


class TaskHostError(StreamsError):
    """A task's host process could not be reached or started. Check that the executor can
    write the temporary directory (the hosts' sockets live there) and its stderr."""


def run_on_host(  # noqa: PLR0917 - one visit of one task
    plan: Any,
    subtopology_id: int,
    partition: int,
    pieces: Sequence[InputPiece],
    topics: list[str],
    level: int = 0,
    earlier: list[int] | None = None,
) -> list[pa.RecordBatch]:
    """Run the visit at ``level`` of task ``<subtopology_id>_<partition>`` in the batch on
    its host (``earlier``: the levels of the batch it ran before) over its input
    ``pieces`` (see :func:`~runtime.tasks.protocol.encode_inputs`); return its rows.

    Raises:
        the task's own exception, re-raised as the host sent it; or TaskHostError.
    """
    config = plan.config
    directory = socket_dir(config.state_dir, config.application_id)
    task_id = f"{subtopology_id}_{partition}"
    items, body = encode_inputs(pieces)
    header: dict[str, Any] = {
        "op": "run",
        "inputs": items,
        "subtopology": subtopology_id,
        "partition": partition,
        "topics": topics,
        "level": level,
        "earlier": earlier or [],
        "static_key": plan.static_key,
        "plan": _dynamic(plan),
    }
    last: BaseException | None = None
    for attempt in range(ATTEMPTS):
        try:
            return _request(host_socket(directory, task_id), header, plan, body)
        except (FileNotFoundError, ConnectionRefusedError, PeerGoneError, ConnectionError) as exc:
            last = exc
            if attempt:
                log.warning("[task %s] host unreachable (%s): starting a new one", task_id, exc)
            _ensure_host(directory, task_id)
    raise TaskHostError(f"[task {task_id}] the task host could not be reached: {last}")


def _request(path: str, header: dict[str, Any], plan: Any, body: list[Any]) -> list[pa.RecordBatch]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        send_frame(sock, header, body)
        answer, payload = recv_frame(sock)
        if answer.get("need_static"):  # a new host: the topology and configuration, once
            send_frame(sock, {**header, "static": static_bytes(plan)}, body)
            answer, payload = recv_frame(sock)
    if not answer.get("ok"):
        raise _error(answer)
    table = read_table(payload)
    return [] if table is None else table.to_batches()


def _error(answer: dict[str, Any]) -> BaseException:
    blob = answer.get("error")
    if blob:
        with contextlib.suppress(Exception):
            exc = pickle.loads(blob)
            if isinstance(exc, BaseException):
                return exc
    return StreamsError(str(answer.get("message", "the task host failed")))


def static_bytes(plan: Any) -> bytes:
    """The fields of ``plan`` that are the same for every batch (topology, configuration),
    pickled with their functions by value."""
    return _cloud_dumps({name: getattr(plan, name) for name in STATIC_FIELDS})


def static_key(topology: Any, config: Any) -> str:
    """Name a plan's static part, ``topology`` and ``config`` (the driver computes it once
    per thread)."""
    return hashlib.sha1(_cloud_dumps({"topology": topology, "config": config})).hexdigest()


def _dynamic(plan: Any) -> bytes:
    """Return the per-batch fields of ``plan``, pickled (cached for the last plan: every
    task of a Spark task shares it)."""
    if _last_plan[0] is plan:
        data: bytes = _last_plan[1]
        return data
    fields = {
        f.name: getattr(plan, f.name)
        for f in dataclasses.fields(plan)
        if f.name not in STATIC_FIELDS
    }
    try:
        data = pickle.dumps(fields, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        data = _cloud_dumps(fields)
    _last_plan[:] = [plan, data]
    return data


def _cloud_dumps(obj: object) -> bytes:
    """Pickle ``obj`` with its functions (a topology's lambdas) by value."""
    data: bytes = cloudpickle.dumps(obj)  # type: ignore[no-untyped-call]
    return data


def _ensure_host(directory: str, task_id: str) -> None:
    """Have the server fork ``task_id``'s host if it has none alive (starting the server
    when there is none)."""
    deadline = time.monotonic() + SERVER_START_S
    started = False
    while True:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(SERVER_START_S)
                sock.connect(os.path.join(directory, SERVER_SOCKET))
                send_frame(sock, {"op": "host", "task": task_id})
                answer, _ = recv_frame(sock)
            if answer.get("ok"):
                return
            raise TaskHostError(f"[task {task_id}] host server: {answer.get('message')}")
        except (FileNotFoundError, ConnectionRefusedError, PeerGoneError) as exc:
            if time.monotonic() > deadline:
                raise TaskHostError(
                    f"[task {task_id}] no host server answered at {directory} within "
                    f"{SERVER_START_S:.0f} s ({exc})"
                ) from exc
            if not started:
                _start_server(directory)
                started = True
            time.sleep(0.05)


def _start_server(directory: str) -> None:
    """Start a server for ``directory`` watching this worker's daemon (whose life is the
    executor's): a fork of this worker, whose daemon imported the task engine already."""
    os.makedirs(directory, exist_ok=True)
    fork_server(directory, os.getppid())


def shutdown_hosts(state_dir: str, application_id: str, timeout_s: float = 30.0) -> bool:
    """Stop the hosts of ``application_id`` on this machine (the application closed);
    return whether a server answered."""
    path = os.path.join(socket_dir(state_dir, application_id), SERVER_SOCKET)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(path)
            send_frame(sock, {"op": "shutdown"})
            recv_frame(sock)
    except (OSError, PeerGoneError):
        return False
    return True
