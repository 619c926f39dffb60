"""Which Spark executor a Python process works for, and what it keeps of its own there.

On a cluster every executor keeps its tasks' stores in a state directory of its own,
``<state.dir>/executor-<id>``, as executors on separate machines would (two executors of one
machine never share a store); in local mode the one executor is the driver and keeps them
in ``state.dir`` itself. Spark tells a Python worker nothing of its executor, so its id is
read from the executor JVM's command line (``--executor-id``, every cluster manager's
executor backend takes it; Kubernetes sets ``SPARK_EXECUTOR_ID`` too). The host server of
an executor passes it on to its task hosts (``STREAMS_EXECUTOR_ID``).

An executor of a cluster is reached by the others at :func:`advertised_address`: the
interface its machine uses towards the driver, or ``SPARK_LOCAL_IP`` when set.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket

#: The id of the executor that a host server and its task hosts work for.
EXECUTOR_ENV = "STREAMS_EXECUTOR_ID"

#: The executor id of local mode (Spark's own name for the driver's executor).
DRIVER = "driver"

#: How many parent processes are looked at for the executor's JVM.
_ANCESTORS = 4


@functools.cache
def executor_id() -> str:
    """Return Spark's id of the executor this process works for (``driver`` in local mode
    and in the driver's own process)."""
    for name in (EXECUTOR_ENV, "SPARK_EXECUTOR_ID"):
        value = os.environ.get(name)
        if value:
            return value
    pid = os.getppid()
    for _ in range(_ANCESTORS):
        if pid <= 1:
            break
        args = _command_line(pid)
        if "--executor-id" in args[:-1]:
            return args[args.index("--executor-id") + 1]
        if args and os.path.basename(args[0]) == "java":
            break  # the JVM that started this process is no executor backend: the driver
        pid = _parent(pid)
    return DRIVER


def executor_state_dir(state_dir: str) -> str:
    """Return the state directory of this process's executor (``state_dir`` itself in
    local mode)."""
    executor = executor_id()
    base = os.path.abspath(state_dir)
    return base if executor == DRIVER else os.path.join(base, f"executor-{executor}")


def advertised_address(driver_host: str) -> str:
    """Return the IP address other executors reach this one at: ``SPARK_LOCAL_IP`` when
    set, else the address of the interface that routes to ``driver_host``."""
    local_ip = os.environ.get("SPARK_LOCAL_IP")
    if local_ip:
        return local_ip
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((driver_host or "127.0.0.1", 9))  # no packet is sent
        address: str = probe.getsockname()[0]
        return address
    return "127.0.0.1"


def _command_line(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return 0
    # the command name (field 2) may hold spaces: the parent pid follows its ")"
    return int(stat[stat.rindex(b")") + 2 :].split()[1])
