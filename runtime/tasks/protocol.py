"""The frames between a Spark worker and a task host (and its server).

A frame is a header (a pickled dict) and a body (bytes: an Arrow IPC stream of records or
result rows, or nothing), each preceded by its length. A worker reaches the hosts of its
own executor on Unix sockets, which only the user running them can open. On a cluster it
reaches another executor's hosts over TCP: such a connection first sends the
application's secret (:data:`SECRET_BYTES` random bytes the driver makes and sends with
every batch plan), and the other end reads nothing more, and unpickles nothing, from a
connection without it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import socket
import struct
import tempfile
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from runtime.storage.fs import StorageRoot
from runtime.storage.reader import read_slices
from runtime.storage.slices import TopicSlices

_LENGTHS = struct.Struct(">QQ")

SERVER_SOCKET = "server.sock"
SERVER_LOCK = "server.lock"

#: The length of an application's secret, which opens a TCP connection.
SECRET_BYTES = 32

#: How long a TCP peer has to send the secret, and a connection to open.
AUTH_TIMEOUT_S = 10.0


def socket_dir(state_dir: str, application_id: str) -> str:
    """Return the directory of the sockets of this state directory's hosts (short: a Unix
    socket path has at most 107 bytes)."""
    key = f"{os.path.abspath(state_dir)}\0{application_id}".encode()
    digest = hashlib.sha1(key).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"streams-eos-{os.getuid()}", digest)


def listen_tcp(ip: str) -> tuple[socket.socket, str]:
    """Return a TCP listener on ``ip`` (a free port) and its ``ip:port``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((ip, 0))
    sock.listen(64)
    return sock, f"{ip}:{sock.getsockname()[1]}"


def connect_tcp(address: str, secret: str, timeout_s: float = AUTH_TIMEOUT_S) -> socket.socket:
    """Open an authenticated connection to ``address`` (``ip:port``); the caller closes it.

    Raises:
        OSError: nothing listens there (the executor is gone) or it did not answer in time.
    """
    ip, _, port = address.rpartition(":")
    sock = socket.create_connection((ip, int(port)), timeout=timeout_s)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(bytes.fromhex(secret))
        sock.settimeout(None)
    except OSError:
        sock.close()
        raise
    return sock


def authenticated(conn: socket.socket, secrets: Sequence[str]) -> bool:
    """Read a TCP peer's secret; return whether it is one of ``secrets`` (a Unix socket's
    peer needs none)."""
    if conn.family == socket.AF_UNIX:
        return True
    conn.settimeout(AUTH_TIMEOUT_S)
    try:
        given = _recv_exactly(conn, SECRET_BYTES)
    except (OSError, PeerGoneError):
        return False
    ok = any(hmac.compare_digest(given, bytes.fromhex(s)) for s in secrets)
    if ok:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return ok


def host_socket(directory: str, host: str) -> str:
    """Return the socket path of the host ``host`` (a task's id, or the host it shares)."""
    return os.path.join(directory, f"{host}.sock")


class PeerGoneError(ConnectionError):
    """The other end closed the connection before a whole frame arrived (it died)."""


def send_frame(
    sock: socket.socket, header: dict[str, Any], body: bytes | Sequence[Any] = b""
) -> None:
    """Send one frame; ``body`` is bytes or a sequence of buffers sent one after another
    (Arrow buffers need no copy)."""
    head = pickle.dumps(header, protocol=pickle.HIGHEST_PROTOCOL)
    parts = [body] if isinstance(body, bytes) else list(body)
    size = sum(memoryview(part).nbytes for part in parts)
    sock.sendall(_LENGTHS.pack(len(head), size) + head)
    for part in parts:
        if memoryview(part).nbytes:
            sock.sendall(part)


def recv_frame(sock: socket.socket) -> tuple[dict[str, Any], bytes]:
    """Receive one frame.

    Raises:
        PeerGoneError: the connection closed first.
    """
    head_len, body_len = _LENGTHS.unpack(_recv_exactly(sock, _LENGTHS.size))
    header = pickle.loads(_recv_exactly(sock, head_len))
    if not isinstance(header, dict):
        raise PeerGoneError(f"malformed frame header of type {type(header).__name__}")
    return header, _recv_exactly(sock, body_len) if body_len else b""


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise PeerGoneError(f"connection closed after {got} of {n} bytes")
        got += k
    return bytes(buf)


def table_bytes(table: pa.Table | None) -> bytes:
    """Return ``table`` as an Arrow IPC stream (empty bytes for None)."""
    if table is None:
        return b""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())


def rows_bytes(rows: list[dict[str, Any]]) -> bytes:
    """Return a visit's result rows (dicts of plain values and bytes), pickled: they stay
    Python objects until they leave the Spark task, which makes them Arrow all at once."""
    return pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL)


def read_rows(body: bytes) -> list[dict[str, Any]]:
    """Return the result rows of :func:`rows_bytes` (none for empty bytes)."""
    if not body:
        return []
    rows: list[dict[str, Any]] = pickle.loads(body)
    return rows


# -- a task's input records ---------------------------------------------------------------

#: The columns of a task's input records, per topic.
INPUT_COLUMNS = ("offset", "key", "value", "timestamp", "headers")

#: One piece of a task's input: a topic and its records as file slices to read (the host
#: reads them itself), an Arrow table, or an Arrow IPC stream (a pack shuffled from an
#: earlier level, handed on as it arrived).
InputPiece = tuple[str, Any]


def encode_inputs(pieces: Sequence[InputPiece]) -> tuple[list[tuple[str, str, Any]], list[Any]]:
    """Return the frame header's description of ``pieces`` and the buffers of the body."""
    items: list[tuple[str, str, Any]] = []
    bodies: list[Any] = []
    for topic, piece in pieces:
        if isinstance(piece, TopicSlices):
            items.append(("slices", topic, piece))
            continue
        data = table_bytes(piece) if isinstance(piece, pa.Table) else piece
        items.append(("ipc", topic, memoryview(data).nbytes))
        bodies.append(data)
    return items, bodies


def decode_inputs(
    root: str, items: Sequence[tuple[str, str, Any]], body: bytes
) -> dict[str, pa.Table]:
    """Return each topic's records (``INPUT_COLUMNS``, in the pieces' order) from a frame
    made by :func:`encode_inputs`; file slices are read here."""
    chunks: dict[str, list[pa.Table]] = {}
    view = memoryview(body)
    at = 0
    storage = None
    for kind, topic, payload in items:
        if kind == "slices":
            storage = storage or StorageRoot(root)
            table = read_slices(storage, topic, payload.partition, list(payload.slices))
        else:
            table = pa.ipc.open_stream(pa.py_buffer(view[at : at + payload])).read_all()
            at += payload
        chunks.setdefault(topic, []).append(table.select(list(INPUT_COLUMNS)))
    return {t: pa.concat_tables(c) if len(c) > 1 else c[0] for t, c in chunks.items()}
