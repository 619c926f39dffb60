"""The frames between a Spark worker and a task host (and its server) on a Unix socket.

A frame is a header (a pickled dict) and a body (bytes: an Arrow IPC stream of records or
result rows, or nothing), each preceded by its length. Hosts and workers run the same
installation of the project on the same machine, so pickle is safe here.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import socket
import struct
import tempfile
from typing import Any

import pyarrow as pa

_LENGTHS = struct.Struct(">QQ")

SERVER_SOCKET = "server.sock"
SERVER_LOCK = "server.lock"


def socket_dir(state_dir: str, application_id: str) -> str:
    """Return the directory of the sockets of this state directory's hosts (short: a Unix
    socket path has at most 107 bytes)."""
    key = f"{os.path.abspath(state_dir)}\0{application_id}".encode()
    digest = hashlib.sha1(key).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"streams-eos-{os.getuid()}", digest)


def host_socket(directory: str, task_id: str) -> str:
    """Return the socket path of ``task_id``'s host."""
    return os.path.join(directory, f"{task_id}.sock")


class PeerGoneError(ConnectionError):
    """The other end closed the connection before a whole frame arrived (it died)."""


def send_frame(sock: socket.socket, header: dict[str, Any], body: bytes = b"") -> None:
    """Send one frame."""
    head = pickle.dumps(header, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_LENGTHS.pack(len(head), len(body)) + head)
    if body:
        sock.sendall(body)


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


def batches_bytes(batches: list[pa.RecordBatch], schema: pa.Schema) -> bytes:
    """Return record batches as one Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return bytes(sink.getvalue())


def read_table(body: bytes) -> pa.Table | None:
    """Return the table of an Arrow IPC stream (None for empty bytes)."""
    if not body:
        return None
    return pa.ipc.open_stream(pa.py_buffer(body)).read_all()
