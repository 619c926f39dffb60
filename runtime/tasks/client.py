"""The Spark worker's side of a task: send the batch to the task's host, return its rows.

:func:`run_on_host` finds the host of a task through the executor's host server (starting
the server when there is none), sends the batch's plan and records, and returns the rows
the host answers. The thread's plan (topology, configuration, owner), the same for every
batch, travels once per host: each request names it by its key, and the host asks for it
only when it does not know that key yet.

A host that dies in the middle of a request (killed, out of memory) costs a retry here:
the server forks a new one, which rebuilds the task from its committed state (a prepared
batch of the dead host's transaction is settled by the outcomes the driver sends).

On a cluster a task lives on one executor: the driver's plan names, for each task, the
executor whose host committed its last batch (``BatchPlan.placement``, from the
:data:`~runtime.tasks.contract.PLACED` rows each visit returns). A worker of another
executor sends the visit there over TCP, so a task's stores are opened on one executor only
while it stays there, wherever Spark runs its Spark task. When that executor cannot be
reached (it was lost), the worker's own executor takes the task over: its host restores
the stores from their snapshot and the changelog's tail, and the next plan names it.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import pickle
import socket
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from common.errors import StreamsError
from runtime.tasks.contract import BatchPlan, Row, cloud_dumps
from runtime.tasks.executor import DRIVER, advertised_address, executor_id, executor_state_dir
from runtime.tasks.protocol import (
    SERVER_SOCKET,
    InputPiece,
    PeerGoneError,
    connect_tcp,
    encode_inputs,
    host_socket,
    read_rows,
    recv_frame,
    send_frame,
    socket_dir,
)
from runtime.tasks.server import fork_server

log = logging.getLogger(__name__)

ATTEMPTS = 4
SERVER_START_S = 30.0
#: How many visits a worker keeps sent to its hosts before it reads their answers.
IN_FLIGHT = 16

_last_plan: list[Any] = [None, b""]  # plan, its pickled fields of the batch
_last_thread: list[Any] = [None, b""]  # a thread plan, pickled


class TaskHostError(StreamsError):
    """A task's host process could not be reached or started. Check that the executor can
    write the temporary directory (the hosts' sockets live there) and its stderr."""


@dataclass(frozen=True)
class Visit:
    """One visit of task ``<subtopology>_<partition>`` at ``level`` of a batch: its input
    ``pieces`` (see :func:`~runtime.tasks.protocol.encode_inputs`) of ``topics``, and the
    levels of the batch it ran before (``earlier``)."""

    subtopology: int
    partition: int
    pieces: Sequence[InputPiece]
    topics: list[str]
    level: int = 0
    earlier: list[int] = field(default_factory=list)

    @property
    def task_id(self) -> str:
        """The visited task's id."""
        return f"{self.subtopology}_{self.partition}"


#: The rows a visit's host answered, and on a cluster where it ran (executor id, server).
VisitResult = tuple[list[Row], tuple[str, str] | None]


def run_on_host(  # noqa: PLR0917 - one visit of one task
    plan: BatchPlan,
    subtopology_id: int,
    partition: int,
    pieces: Sequence[InputPiece],
    topics: list[str],
    level: int = 0,
    earlier: list[int] | None = None,
) -> VisitResult:
    """Run the visit at ``level`` of task ``<subtopology_id>_<partition>`` in the batch on
    its host (``earlier``: the levels of the batch it ran before) over its input
    ``pieces`` (see :func:`~runtime.tasks.protocol.encode_inputs`); return its rows, and
    on a cluster where it ran: (executor id, that executor's server address).

    Raises:
        the task's own exception, re-raised as the host sent it; or TaskHostError.
    """
    visit = Visit(subtopology_id, partition, pieces, topics, level, list(earlier or []))
    return _run_visit(plan, visit, *_request(plan, visit))


def run_on_hosts(plan: BatchPlan, visits: Sequence[Visit]) -> Iterator[VisitResult]:
    """Run ``visits`` (of distinct tasks) side by side; yield their results in order.

    Each task lives in a host process (its own, or one it shares beyond ``task.hosts.max``
    hosts: :meth:`~runtime.tasks.contract.BatchPlan.host_of`), so the visits to this
    executor's hosts are sent before their answers are read, up to :data:`IN_FLIGHT` at a
    time: the hosts work in parallel while this worker waits; a task without a live host
    gets one forked before its visit is sent. A host has one visit of this worker at a
    time (it answers its requests one after another: a second request sent before the
    first's answer was read could wait on a host that waits for that read). A visit whose
    host cannot be reached so (it died meanwhile) or that lives on another executor runs
    as :func:`run_on_host` runs it (starting its host, retrying). A visit that ran on a
    host whose answer never arrived is not committed: the retried visit's host rebuilds
    the task from committed state, as after any lost host.

    Raises:
        the first task's own exception, re-raised as its host sent it; or TaskHostError.
    """
    dispatch = _Dispatch(plan, visits)
    upcoming = iter(range(len(visits)))
    try:
        for i in range(len(visits)):
            while len(dispatch.sent) < IN_FLIGHT:
                j = next(upcoming, None)
                if j is None:
                    break
                dispatch.offer(j)
            yield dispatch.result(i)
    finally:
        dispatch.close()


class _Dispatch:
    """The visits of :func:`run_on_hosts` in flight, at most one per host."""

    def __init__(self, plan: BatchPlan, visits: Sequence[Visit]) -> None:
        config = plan.thread.config
        self.plan, self.visits = plan, visits
        self.executor = executor_id()
        self.directory = socket_dir(executor_state_dir(config.state_dir), config.application_id)
        self.hosts = [plan.host_of(visit.task_id) for visit in visits]
        self.sent: dict[int, _Sent] = {}  # visit index -> its request (sock None: run alone)
        self.busy: dict[str, int] = {}  # host -> the index of its visit in flight
        self.waiting: dict[str, collections.deque[int]] = collections.defaultdict(collections.deque)
        self.done: dict[int, VisitResult] = {}

    def offer(self, i: int) -> None:
        """Send visit ``i``, or queue it behind its host's visit in flight."""
        host = self.hosts[i]
        if host in self.busy or self.waiting.get(host):
            self.waiting[host].append(i)
        else:
            self._send(i)

    def result(self, i: int) -> VisitResult:
        """Visit ``i``'s result (every earlier visit's was taken)."""
        while i not in self.done:
            host = self.hosts[i]
            if i not in self.sent:  # queued behind its host's visit in flight
                if host in self.busy:
                    self._settle(self.busy[host])
                else:
                    self.waiting[host].remove(i)
                    self._send(i)
            elif self.sent[i].sock is None and host in self.busy:  # runs alone: not beside one
                self._settle(self.busy[host])
            else:
                self._settle(i)
        return self.done.pop(i)

    def close(self) -> None:
        """Drop the connections of the visits whose answers were not read."""
        for item in self.sent.values():
            if item.sock is not None:
                item.sock.close()

    def _send(self, i: int) -> None:
        visit, host = self.visits[i], self.hosts[i]
        header, body = _request(self.plan, visit)
        placed = self.plan.placement.get(visit.task_id)
        local = placed is None or placed[0] == self.executor
        sock = _send_starting(self.directory, host, header, body, self.plan) if local else None
        self.sent[i] = _Sent(header, body, sock)
        if sock is not None:
            self.busy[host] = i

    def _settle(self, i: int) -> None:
        """Read (or run) visit ``i``'s answer; send its host's next queued visit."""
        item, host = self.sent.pop(i), self.hosts[i]
        answer = _answer(item.sock, item.header, self.plan, item.body) if item.sock else None
        if self.busy.get(host) == i:
            del self.busy[host]
        if answer is None:
            self.done[i] = _run_visit(self.plan, self.visits[i], item.header, item.body)
        else:
            server = str(answer[0].get("server", ""))
            self.done[i] = (
                _rows(*answer),
                (self.executor, server) if self.executor != DRIVER else None,
            )
        queue = self.waiting.get(host)
        if queue and host not in self.busy:
            self._send(queue.popleft())


@dataclass
class _Sent:
    """A visit's request, and the connection its answer arrives on (None: not sent)."""

    header: dict[str, Any]
    body: list[Any]
    sock: socket.socket | None


def _request(plan: BatchPlan, visit: Visit) -> tuple[dict[str, Any], list[Any]]:
    """The frame header and body of ``visit``."""
    items, body = encode_inputs(visit.pieces)
    header: dict[str, Any] = {
        "op": "run",
        "inputs": items,
        "subtopology": visit.subtopology,
        "partition": visit.partition,
        "topics": visit.topics,
        "level": visit.level,
        "earlier": visit.earlier,
        "thread_key": plan.thread.key,
        "plan": _dynamic(plan),
        "secret": plan.host_secret,
    }
    return header, body


def _send_local(
    directory: str, host: str, header: dict[str, Any], body: list[Any]
) -> socket.socket | None:
    """Send a visit to the host ``host`` on this executor; return the connection its
    answer arrives on (None: no host took it)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(host_socket(directory, host))
        send_frame(sock, header, body)
    except OSError:  # FileNotFoundError, ConnectionRefusedError, a broken pipe, ...
        sock.close()
        return None
    return sock


def _send_starting(
    directory: str, host: str, header: dict[str, Any], body: list[Any], plan: BatchPlan
) -> socket.socket | None:
    """Send a visit to its host ``host`` on this executor, having the server fork the host
    first when none is alive (the server listens on the host's socket before it forks, so
    the visit waits there while the next host starts): a batch's new hosts start one after
    another but run their first visits side by side. A new host knows no thread plan: its
    first request carries it (asked for only when the answer is read, the new hosts' first
    visits would run one after another). None: no host took it."""
    sock = _send_local(directory, host, header, body)
    if sock is None:
        try:
            _ensure_host(directory, host, plan, executor_id())
        except TaskHostError:
            return None  # run alone, with its retries and their errors
        sock = _send_local(directory, host, {**header, "thread": _thread_bytes(plan)}, body)
    return sock


def _thread_bytes(plan: BatchPlan) -> bytes:
    """The batch's thread plan, pickled (cached for the last thread plan)."""
    if _last_thread[0] is not plan.thread:
        _last_thread[:] = [plan.thread, plan.thread.pickled()]
    data: bytes = _last_thread[1]
    return data


def _answer(
    sock: socket.socket, header: dict[str, Any], plan: BatchPlan, body: list[Any]
) -> tuple[dict[str, Any], bytes] | None:
    """Read the answer of a visit sent on ``sock`` (None: its host died meanwhile)."""
    with sock:
        try:
            answer, payload = recv_frame(sock)
            if answer.get("need_thread"):  # a new host: the thread plan, once
                send_frame(sock, {**header, "thread": _thread_bytes(plan)}, body)
                answer, payload = recv_frame(sock)
        except (PeerGoneError, OSError):
            return None
    return answer, payload


def _run_visit(
    plan: BatchPlan, visit: Visit, header: dict[str, Any], body: list[Any]
) -> VisitResult:
    """Run ``visit`` alone: on the executor it lives on, else here (starting its host when
    none answers, up to ``ATTEMPTS`` times)."""
    config = plan.thread.config
    executor = executor_id()
    directory = socket_dir(executor_state_dir(config.state_dir), config.application_id)
    task_id = visit.task_id
    host = plan.host_of(task_id)
    placed = plan.placement.get(task_id)
    if placed is not None and placed[0] != executor:
        try:
            answer, payload = _run_remote(placed[1], host, header, plan, body)
        except (OSError, PeerGoneError) as exc:
            log.warning(
                "[task %s] executor %s (%s) cannot be reached (%s): executor %s takes the "
                "task over, restoring its stores from their snapshot and changelog",
                task_id,
                placed[0],
                placed[1],
                exc,
                executor,
            )
        else:  # the task's own error, if any, is raised here (not taken for a lost executor)
            return _rows(answer, payload), placed
    last: BaseException | None = None
    for attempt in range(ATTEMPTS):
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.connect(host_socket(directory, host))
                answer, payload = _exchange(sock, header, plan, body)
            break
        except (FileNotFoundError, ConnectionRefusedError, PeerGoneError, ConnectionError) as exc:
            last = exc
            if attempt:
                log.warning("[task %s] host unreachable (%s): starting a new one", task_id, exc)
            _ensure_host(directory, host, plan, executor)
    else:
        raise TaskHostError(f"[task {task_id}] the task host could not be reached: {last}")
    here = (executor, str(answer.get("server", ""))) if executor != DRIVER else None
    return _rows(answer, payload), here


def _run_remote(
    server: str, host: str, header: dict[str, Any], plan: BatchPlan, body: list[Any]
) -> tuple[dict[str, Any], bytes]:
    """Send the visit to the host ``host`` on the executor whose server is at ``server``.

    Raises:
        OSError or PeerGoneError: that executor cannot be reached.
    """
    with connect_tcp(server, plan.host_secret) as sock:
        sock.settimeout(SERVER_START_S)
        send_frame(sock, {"op": "host", "task": host})
        answer, _ = recv_frame(sock)
    address = answer.get("address")
    if not answer.get("ok") or not address:
        raise ConnectionError(f"its host server answered {answer.get('message', answer)}")
    with connect_tcp(str(address), plan.host_secret) as sock:
        return _exchange(sock, header, plan, body)


def _exchange(
    sock: socket.socket, header: dict[str, Any], plan: BatchPlan, body: list[Any]
) -> tuple[dict[str, Any], bytes]:
    """Send the visit on ``sock``; return the host's answer and its payload."""
    send_frame(sock, header, body)
    answer, payload = recv_frame(sock)
    if answer.get("need_thread"):  # a new host: the thread plan, once
        send_frame(sock, {**header, "thread": _thread_bytes(plan)}, body)
        answer, payload = recv_frame(sock)
    return answer, payload


def _rows(answer: dict[str, Any], payload: bytes) -> list[Row]:
    """The result rows of a host's answer.

    Raises:
        the task's own exception, as the host sent it.
    """
    if not answer.get("ok"):
        raise _error(answer)
    return read_rows(payload)


def _error(answer: dict[str, Any]) -> BaseException:
    blob = answer.get("error")
    if blob:
        with contextlib.suppress(Exception):
            exc = pickle.loads(blob)
            if isinstance(exc, BaseException):
                return exc
    return StreamsError(str(answer.get("message", "the task host failed")))


def _dynamic(plan: BatchPlan) -> bytes:
    """Return the batch's own fields of ``plan``, pickled (cached for the last plan: every
    task of a Spark task shares it)."""
    if _last_plan[0] is plan:
        data: bytes = _last_plan[1]
        return data
    fields = plan.batch_fields()
    try:
        data = pickle.dumps(fields, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        data = cloud_dumps(fields)
    _last_plan[:] = [plan, data]
    return data


def _ensure_host(directory: str, host: str, plan: BatchPlan, executor: str) -> None:
    """Have the server fork the host ``host`` if it is not alive (starting the server when
    there is none)."""
    header = {"op": "host", "task": host, "secret": plan.host_secret}
    answer = _ask_server(directory, header, executor, plan.driver_host, f"[host {host}]")
    if not answer.get("ok"):
        raise TaskHostError(f"[host {host}] host server: {answer.get('message')}")


def _ask_server(
    directory: str, header: dict[str, Any], executor: str, driver_host: str, who: str
) -> dict[str, Any]:
    """Send ``header`` to the host server of ``directory`` (starting one when none
    answers); return its answer."""
    deadline = time.monotonic() + SERVER_START_S
    started = False
    while True:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(SERVER_START_S)
                sock.connect(os.path.join(directory, SERVER_SOCKET))
                send_frame(sock, header)
                answer, _ = recv_frame(sock)
            return answer
        except (FileNotFoundError, ConnectionRefusedError, PeerGoneError) as exc:
            if time.monotonic() > deadline:
                raise TaskHostError(
                    f"{who} no host server answered at {directory} within "
                    f"{SERVER_START_S:.0f} s ({exc})"
                ) from exc
            if not started:
                ip = advertised_address(driver_host) if executor != DRIVER else ""
                _start_server(directory, executor, ip)
                started = True
            time.sleep(0.05)


def start_host_server(
    state_dir: str, application_id: str, driver_host: str, secret: str
) -> tuple[str, str]:
    """Start this executor's host server for ``application_id`` unless one answers (the
    warm-up of :mod:`runtime.spark.warmup`, before the first batch needs it), and give it
    the driver's ``secret`` (its TCP connections open with it); return the executor's id
    and the server's TCP address ("" on the driver)."""
    executor = executor_id()
    directory = socket_dir(executor_state_dir(state_dir), application_id)
    header = {"op": "hello", "secret": secret}
    answer = _ask_server(directory, header, executor, driver_host, f"[executor {executor}]")
    if not answer.get("ok"):
        raise TaskHostError(f"[executor {executor}] host server: {answer.get('message')}")
    return executor, str(answer.get("server", ""))


def _start_server(directory: str, executor: str, ip: str) -> None:
    """Start a server for ``directory`` watching this worker's daemon (whose life is the
    executor's): a fork of this worker, whose daemon imported the task engine already."""
    os.makedirs(directory, exist_ok=True)
    fork_server(directory, os.getppid(), executor, ip)


def shutdown_remote_hosts(servers: Iterable[str], secret: str, timeout_s: float = 30.0) -> None:
    """Stop the hosts of the host servers at ``servers`` (TCP addresses of executors of a
    cluster: the application closed); a server that cannot be reached is left (its
    hosts close when idle or when their executor ends)."""
    for server in sorted(servers):
        try:
            with connect_tcp(server, secret) as sock:
                sock.settimeout(timeout_s)
                send_frame(sock, {"op": "shutdown"})
                recv_frame(sock)
        except (OSError, PeerGoneError) as exc:
            log.info("the task hosts at %s were not told to stop: %s", server, exc)


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
