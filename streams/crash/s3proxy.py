"""A fault-injecting proxy for S3-compatible endpoints: what an object store does on a bad
day, on purpose, to check that nothing is lost or doubled.

Point the storage options' endpoint (``storage.options.AWS_ENDPOINT_URL``) at the proxy
instead of the store; every request goes through it, and each rule that matches a request
may inject one fault:

* ``500``: an ``InternalError`` answer; the request never reaches the store;
* ``503``: a ``SlowDown`` answer (S3's throttling); the request never reaches the store;
* ``reset``: the connection is reset before the request reaches the store;
* ``timeout``: no answer for ``timeout_s``, then the connection is closed; the request
  never reaches the store;
* ``latency``: the request waits ``latency_ms`` before it is forwarded;
* ``lose-answer``: the request **reaches the store and takes effect**, then the connection
  is reset instead of the answer: the ambiguous write (did my put-if-absent win?).

A rule matches by method, a regular expression on the path, whether the request is a
conditional write (``If-None-Match`` / ``If-Match``), with a probability ``rate``, at most
``count`` times, for at most ``seconds`` from the first request it matched (a store down
for a while: longer than any retry). Every injected fault is recorded
(:attr:`FaultProxy.injected`)::

    with FaultProxy("http://127.0.0.1:9000", [FaultRule("503", rate=0.05)]) as proxy:
        options["AWS_ENDPOINT_URL"] = proxy.endpoint
        ...
    print(proxy.summary())

``streams-eos s3-proxy --target URL --fault 503:0.05 --fault lose-answer:0.01:PUT`` runs
one in the foreground.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import random
import re
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal
from urllib.parse import unquote, urlsplit

from common.errors import ConfigError

log = logging.getLogger(__name__)

FaultKind = Literal["500", "503", "reset", "timeout", "latency", "lose-answer"]
KINDS: tuple[FaultKind, ...] = ("500", "503", "reset", "timeout", "latency", "lose-answer")
_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade", "te"}
_ERRORS = {
    "500": (500, "InternalError", "We encountered an internal error. Please try again."),
    "503": (503, "SlowDown", "Please reduce your request rate."),
}


@dataclass
class FaultRule:
    """Inject ``kind`` into matching requests (see the module)."""

    kind: FaultKind
    rate: float = 1.0
    method: str | None = None
    path: str | None = None
    conditional: bool | None = None
    count: int | None = None
    latency_ms: int = 0
    seconds: float | None = None
    hits: int = 0
    #: When it first matched a request (monotonic; None: not yet).
    since: float | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"fault kind {self.kind!r}: one of {', '.join(KINDS)}")
        if not 0.0 <= self.rate <= 1.0:
            raise ConfigError(f"fault rate {self.rate}: a probability between 0 and 1")

    @classmethod
    def parse(cls, spec: str) -> FaultRule:
        """``KIND[:RATE[:METHOD[:PATH_REGEX]]]``, e.g. ``503:0.05`` or
        ``lose-answer:1:PUT:_delta_log/``."""
        parts = spec.split(":", 3)
        try:
            rate = float(parts[1]) if len(parts) > 1 and parts[1] else 1.0
        except ValueError as exc:
            raise ConfigError(f"--fault {spec!r}: the rate must be a number") from exc
        method = parts[2].upper() if len(parts) > 2 and parts[2] else None
        path = parts[3] if len(parts) > 3 and parts[3] else None
        return cls(parts[0], rate, method, path)  # type: ignore[arg-type]

    def matches(self, method: str, path: str, conditional: bool) -> bool:
        """Whether a request is this rule's (before its rate is drawn)."""
        found = (
            (self.count is None or self.hits < self.count)
            and (self.method is None or self.method == method)
            and (self.path is None or re.search(self.path, path) is not None)
            and (self.conditional is None or self.conditional == conditional)
        )
        if not found or self.seconds is None:
            return found
        now = time.monotonic()
        if self.since is None:
            self.since = now
        return now - self.since < self.seconds


@dataclass(frozen=True)
class Injected:
    """One fault the proxy injected."""

    kind: str
    method: str
    path: str
    at: float
    status: int | None = None  # the store's answer that was lost (lose-answer)


@dataclass
class FaultProxy:
    """An HTTP proxy to ``target`` that injects the faults of ``rules`` (see the module).

    Args:
        target: the store's endpoint, ``http://host:port``.
        rules: the fault rules, tried in order; the first that matches and draws injects.
        seed: the random seed (faults are reproducible for one order of requests).
        timeout_s: how long a ``timeout`` fault holds the connection.
        port: the port to listen on (0: any free one).
    """

    target: str
    rules: list[FaultRule] = field(default_factory=list)
    seed: int | None = None
    timeout_s: float = 30.0
    port: int = 0
    injected: list[Injected] = field(default_factory=list)
    forwarded: int = 0
    #: Requests seen, by :func:`request_class` ("LIST _transactions", "GET data", ...).
    requests: Counter[str] = field(default_factory=Counter)
    #: The most requests that were in the proxy at once (clients' concurrency).
    peak_in_flight: int = 0

    def __post_init__(self) -> None:
        parts = urlsplit(self.target)
        if parts.scheme != "http" or not parts.hostname:
            raise ConfigError(f"proxy target {self.target!r}: an http://host:port endpoint")
        self._host, self._port = parts.hostname, parts.port or 80
        self._random = random.Random(self.seed)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._in_flight = 0

    @property
    def endpoint(self) -> str:
        """Where clients reach the proxy."""
        assert self._server is not None, "start() the proxy first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultProxy:
        """Listen and serve on a background thread."""
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self._server = _Server(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add(self, rule: FaultRule) -> FaultRule:
        """Add a rule while the proxy runs; return it (its ``hits`` count up)."""
        with self._lock:
            self.rules.append(rule)
        return rule

    def remove(self, rule: FaultRule) -> None:
        """Stop injecting ``rule`` (no error when it is gone)."""
        with self._lock:
            self.rules = [r for r in self.rules if r is not rule]

    def summary(self) -> dict[str, int]:
        """How many faults of each kind were injected."""
        return dict(Counter(i.kind for i in self.injected))

    def choose(self, method: str, path: str, conditional: bool) -> FaultRule | None:
        """The rule that injects into this request, if any (counted as a hit)."""
        with self._lock:
            self.requests[request_class(method, path)] += 1
            for rule in self.rules:
                if rule.matches(method, path, conditional) and self._random.random() < rule.rate:
                    rule.hits += 1
                    return rule
        return None

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """Count a request in flight while it is served."""
        with self._lock:
            self._in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1

    def record(self, kind: str, method: str, path: str, status: int | None = None) -> None:
        """Note an injected fault."""
        with self._lock:
            self.injected.append(Injected(kind, method, path, time.time(), status))
        log.info("[s3-proxy] %s on %s %s", kind, method, path)

    def forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        """Send the request to the store; return its status, reason, headers and body."""
        conn = http.client.HTTPConnection(self._host, self._port, timeout=120)
        try:
            conn.request(method, path, body=body, headers=headers)
            answer = conn.getresponse()
            data = answer.read()
            kept = [(k, v) for k, v in answer.getheaders() if k.lower() not in _HOP]
            with self._lock:
                self.forwarded += 1
            return answer.status, answer.reason, kept, data
        finally:
            conn.close()


class _Server(ThreadingHTTPServer):
    #: Python's default listen backlog is 5: a burst of connections (delta-rs opens a
    #: table with dozens at once) overflowed it, and each dropped SYN cost the client a
    #: connect retry after 1, 3, 7 s... up to its 30 s timeout ("operation timed out" on
    #: a GET no fault was injected into). An object store accepts them all; so does this.
    request_queue_size = 1024

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that went away, or a connection reset on purpose: nothing to say."""
        log.debug("[s3-proxy] connection from %s ended abruptly", client_address)


class _Handler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        return

    def finish(self) -> None:
        """Flush what is left, unless the connection was reset on purpose."""
        with contextlib.suppress(OSError, ValueError):
            super().finish()

    def _serve(self) -> None:
        with self.owner.serving():
            self._serve_one()

    def _serve_one(self) -> None:
        proxy = self.owner
        method, path = self.command, self.path
        body = self._body()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        headers["Content-Length"] = str(len(body))
        conditional = any(h.lower() in ("if-none-match", "if-match") for h in headers)
        rule = proxy.choose(method, path, conditional)
        kind = None if rule is None else rule.kind
        if kind in _ERRORS:
            status, code, message = _ERRORS[kind]
            proxy.record(kind, method, path)
            self._answer(
                status, "Error", [("Content-Type", "application/xml")], _xml(code, message)
            )
            return
        if kind == "reset":
            proxy.record(kind, method, path)
            self._reset()
            return
        if kind == "timeout":
            proxy.record(kind, method, path)
            time.sleep(proxy.timeout_s)
            self.close_connection = True
            return
        if kind == "latency" and rule is not None:
            proxy.record(kind, method, path)
            time.sleep(rule.latency_ms / 1000)
        status, reason, answer_headers, data = proxy.forward(method, path, headers, body)
        if kind == "lose-answer":
            proxy.record(kind, method, path, status)
            self._reset()
            return
        self._answer(status, reason, answer_headers, data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _serve  # noqa: N815 - http.server's names

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline().strip():
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _answer(
        self, status: int, reason: str, headers: list[tuple[str, str]], data: bytes
    ) -> None:
        self.send_response_only(status, reason)
        head = self.command == "HEAD"  # its Content-Length is the object's, kept as is
        for name, value in headers:
            if head or name.lower() != "content-length":
                self.send_header(name, value)
        if not head:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self.wfile.flush()

    def _reset(self) -> None:
        """Reset the connection (RST, not a clean close)."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()


#: What a request's path is about, by the first of these names in it (else "other").
_AREAS = (
    "_transactions",
    "heartbeats",
    "_groups",
    "_streams_index",
    "txn-staging",
    "_delta_log",
    "_apps",
    "partition=",
)


def request_class(method: str, path: str) -> str:
    """``METHOD area`` of a request: a GET listing a prefix is ``LIST``; the area is the
    first of :data:`_AREAS` its path (or listed prefix) names, ``data`` for a data file."""
    target, _, query = path.partition("?")
    if method == "GET" and "list-type=" in query:
        method, target = "LIST", query
    target = unquote(target)
    area = next((a for a in _AREAS if a in target), "other")
    return f"{method} {'data' if area == 'partition=' else area}"


def _xml(code: str, message: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
        f"<Message>{message}</Message><RequestId>proxy</RequestId></Error>"
    ).encode()
