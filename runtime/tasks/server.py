"""The host server of an executor: forks the :mod:`task hosts <runtime.tasks.host>`.

One server runs per executor and ``application.id`` (its executor's state directory,
:func:`~runtime.tasks.executor.executor_state_dir`, names its socket directory), forked by the first
Spark worker that needs a task there (:func:`fork_server`: the worker's daemon imported
the task engine before it forked the worker, so the server has it at once; it keeps none
of the worker's sockets). It forks each host from that state, so a host starts in
milliseconds. Its Unix socket and the hosts' live under :func:`socket_dir`.
(``python -m runtime.tasks.server <dir> <pid>`` starts one in a fresh interpreter, which
imports the engine first.)

It answers ``{"op": "host", "task": name}`` with the path of the socket of the host
``name`` (a task's id, or the host it shares: :meth:`~runtime.tasks.contract.BatchPlan.host_of`),
forking that host if it is not alive, ``{"op": "hello", "secret": s}`` (the warm-up) with
the TCP address it listens on, and ``{"op": "shutdown"}`` (the application closed) by
stopping every host. On a cluster (an executor id other than ``driver``) the server and
each host also listen on TCP at the executor's address, so that a worker of another
executor reaches the host of a task that lives here (see :mod:`runtime.tasks.client`):
such a connection must open with a secret the server learnt from its own executor's
workers (:func:`~runtime.tasks.protocol.authenticated`).

It exits, stopping its hosts, when the process it watches (the Spark worker daemon, whose
life is the executor's) ends, or when it has had no request and no live host for
``IDLE_TIMEOUT_S``.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import logging
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable

from runtime.tasks.executor import DRIVER, EXECUTOR_ENV
from runtime.tasks.protocol import (
    SERVER_LOCK,
    SERVER_SOCKET,
    PeerGoneError,
    authenticated,
    host_socket,
    listen_tcp,
    recv_frame,
    send_frame,
)

log = logging.getLogger(__name__)

IDLE_TIMEOUT_S = 600.0
STOP_WAIT_S = 20.0

#: How many applications' secrets a server keeps (the newest ones).
KEPT_SECRETS = 8


class HostServer:
    """Forks and watches the task hosts of one state directory.

    Args:
        directory: the socket directory (:func:`socket_dir`).
        watch_pid: the process whose end ends the server (0: none).
        ip: the executor's address, to listen on TCP there too (None: Unix sockets only).
        serve_host: what a forked host runs (:func:`runtime.tasks.host.serve`).
    """

    def __init__(
        self,
        directory: str,
        watch_pid: int,
        ip: str | None = None,
        *,
        serve_host: Callable[..., None],
    ) -> None:
        self.directory = directory
        self.serve_host = serve_host
        self.watch_pid = watch_pid
        self.ip = ip
        self.hosts: dict[str, int] = {}
        self.host_addresses: dict[str, str] = {}
        self.listener: socket.socket | None = None
        self.tcp: socket.socket | None = None
        self.address = ""
        self.secrets: list[str] = []

    def serve(self) -> None:
        """Accept requests until the watched process ends, a shutdown, or idleness."""
        listener = self.listener or _listen(os.path.join(self.directory, SERVER_SOCKET))
        self.listener = listener
        if self.ip is not None and self.tcp is None:
            self.tcp, self.address = listen_tcp(self.ip)
        listeners = [listener, *([self.tcp] if self.tcp is not None else [])]
        last = time.monotonic()
        try:
            while True:
                ready, _, _ = select.select(listeners, [], [], 0.5)
                if not ready:
                    self._reap()
                    idle = not self.hosts and time.monotonic() - last > IDLE_TIMEOUT_S
                    if idle or not _alive(self.watch_pid):
                        return
                    continue
                last = time.monotonic()
                for ready_listener in ready:
                    conn, _ = ready_listener.accept()
                    with conn:
                        if not authenticated(conn, self.secrets):
                            continue
                        conn.settimeout(30.0)
                        if not self._answer(conn):
                            return
        finally:
            self.stop_hosts()

    def _answer(self, conn: socket.socket) -> bool:
        try:
            header, _ = recv_frame(conn)
        except (PeerGoneError, OSError):
            return True
        op = header.get("op")
        if op == "shutdown":
            self.stop_hosts()
            with contextlib.suppress(OSError):
                send_frame(conn, {"ok": True})
            return False
        if op not in ("host", "hello"):
            send_frame(conn, {"ok": False, "message": f"unknown request {op!r}"})
            return True
        secret = header.get("secret")
        if secret and conn.family == socket.AF_UNIX and secret not in self.secrets:
            self.secrets = [*self.secrets, secret][-KEPT_SECRETS:]  # from this executor
        if op == "hello":  # the warm-up: the secret, and where the server listens
            with contextlib.suppress(OSError):
                send_frame(conn, {"ok": True, "server": self.address})
            return True
        host = str(header["task"])
        self._reap()
        if host not in self.hosts:
            self.hosts[host] = self._fork_host(host)
        answer = {
            "ok": True,
            "path": host_socket(self.directory, host),
            "address": self.host_addresses.get(host, ""),
            "server": self.address,
        }
        with contextlib.suppress(OSError):
            send_frame(conn, answer)
        return True

    def _fork_host(self, host: str) -> int:
        listener = _listen(host_socket(self.directory, host))
        tcp = None
        if self.ip is not None:
            tcp, self.host_addresses[host] = listen_tcp(self.ip)
        server_pid = os.getpid()
        pid = os.fork()
        if pid == 0:  # the host
            code = 0
            try:
                for inherited in (self.listener, self.tcp):
                    if inherited is not None:
                        inherited.close()
                self.serve_host(listener, server_pid, host, tcp, self.secrets, self.address)
            except BaseException:
                log.exception("[task host %s] failed", host)
                code = 1
            finally:
                os._exit(code)
        listener.close()
        if tcp is not None:
            tcp.close()
        log.info("[host server] host %s: pid=%d", host, pid)
        return pid

    def _reap(self) -> None:
        for host, pid in list(self.hosts.items()):
            with contextlib.suppress(ChildProcessError):
                done, _ = os.waitpid(pid, os.WNOHANG)
                if not done:
                    continue
            del self.hosts[host]
            self.host_addresses.pop(host, None)

    def stop_hosts(self) -> None:
        """Ask every host to close its task and exit; kill those that do not in time."""
        for pid in self.hosts.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_S
        while self.hosts and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.02)
        for pid in self.hosts.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in self.hosts.values():
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        self.hosts.clear()


def _listen(path: str) -> socket.socket:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(64)
    return sock


def _alive(pid: int) -> bool:
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str]) -> int:
    """``python -m runtime.tasks.server <socket dir> <pid to watch> [<executor id> <ip>]``
    (an executor other than ``driver`` listens on TCP at ``ip`` too)."""
    directory, watch_pid = argv[0], int(argv[1])
    executor = argv[2] if len(argv) > 2 else DRIVER
    ip = argv[3] if len(argv) > 3 and executor != DRIVER else None
    os.environ[EXECUTOR_ENV] = executor  # the hosts' executor_id()
    os.makedirs(directory, exist_ok=True)
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    lock = open(os.path.join(directory, SERVER_LOCK), "ab")  # noqa: SIM115 - held for life
    deadline = time.monotonic() + STOP_WAIT_S + 10
    while True:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:  # a server runs (or is ending): let it serve
            if _connectable(os.path.join(directory, SERVER_SOCKET)) or time.monotonic() > deadline:
                return 0
            time.sleep(0.05)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # listening before the imports below: a worker asking meanwhile waits for the answer
    # (rather than starting a server of its own)
    listener = _listen(os.path.join(directory, SERVER_SOCKET))
    # the task engine, imported once this process is the executor's server (a worker that
    # lost the race above pays nothing), before any host is forked from it. Spark puts
    # its zipped pyspark first on the path, which is compiled at every import (a zip holds
    # no bytecode cache): an installed pyspark, when there is one, comes first instead.
    sys.path.sort(key=lambda entry: entry.endswith(".zip"))
    from runtime.tasks import host  # noqa: PLC0415 - the engine loads once this listens

    host.warm_up()
    # what is imported lives as long as the process: the collector never scans it again,
    # in this server or in the hosts forked from it (a full collection in a host would)
    gc.freeze()
    server = HostServer(directory, watch_pid, ip, serve_host=host.serve)
    server.listener = listener
    server.serve()
    return 0


def fork_server(directory: str, watch_pid: int, executor: str = DRIVER, ip: str = "") -> None:
    """Start a server for ``directory`` as a fork of this process (a Spark worker, which
    has the task engine imported: its daemon preloads it), not as a fresh interpreter that
    imports it again (about a second before its first host). The server is a grandchild,
    so this process waits for nothing; it closes every descriptor it inherited (Spark's
    sockets) and takes the default signal handlers back."""
    child = os.fork()
    if child:
        os.waitpid(child, 0)  # the middle process exits at once
        return
    code = 1
    try:
        if os.fork():
            code = 0
        else:
            _detach()
            code = main([directory, str(watch_pid), executor, ip])
    except BaseException:  # a server that cannot start: the worker's wait says so
        with contextlib.suppress(BaseException):
            log.exception("[host server] could not start in %s", directory)
    finally:
        os._exit(code)


def _detach() -> None:
    """Leave the forking worker's descriptors and signal handlers behind (its standard
    output and error stay: Spark logs what the server writes there)."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.closerange(3, _max_fd())
    for signum in (signal.SIGCHLD, signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)


def _max_fd() -> int:
    try:
        return int(os.sysconf("SC_OPEN_MAX"))
    except (OSError, ValueError):
        return 4096


def _connectable(path: str) -> bool:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        return False
    finally:
        sock.close()
    return True


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
