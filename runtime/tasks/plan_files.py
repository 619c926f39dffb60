"""A batch's plan handed to the Spark task on this machine through a file.

On a local master a batch's levels run in one Spark task on this machine (``BatchPlan.fused``).
Its job can then be the same DataFrame at every batch: the plan is not pickled into the
job's function but written here, and the Spark task reads it when it starts. Spark plans
such a query once (analysis, optimisation, code generation) and each batch only runs it:
about 25 ms a batch less than a new ``mapInArrow`` (whose function, pickled with the plan,
is new each time), and the thread plan (the topology and its functions) is pickled once
per thread instance instead of at every batch.

The files live beside the task hosts' sockets: ``thread-<key>.pickle`` (a
:class:`ThreadPlan`, written once) and ``batch-<thread>.pickle`` (the batch's own fields),
replaced before each job, deleted when the thread closes. A stream thread runs one job at
a time, so the Spark task of a job always reads its own batch's plan; a retried Spark task
reads it again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import pickle
import tempfile

from common.errors import StreamsError
from runtime.tasks.contract import BatchPlan, ThreadPlan, cloud_dumps
from runtime.tasks.executor import executor_state_dir
from runtime.tasks.protocol import socket_dir

#: The thread plans this process has read (key -> plan): each is read once.
_threads: dict[str, ThreadPlan] = {}
#: How many thread plans a process keeps (an application's threads, and a few before).
_THREADS_KEPT = 16


def plan_path(thread: ThreadPlan) -> str:
    """The file of the batch plans of stream thread instance ``thread``."""
    owner = hashlib.sha1(thread.owner.encode()).hexdigest()[:16]
    return os.path.join(_directory(thread), f"batch-{owner}.pickle")


def remove_plans(thread: ThreadPlan) -> None:
    """Delete the plan files of stream thread instance ``thread`` (it closed)."""
    for path in (plan_path(thread), _thread_file(thread)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def write_plan(path: str, plan: BatchPlan) -> None:
    """Write ``plan`` at ``path`` (its thread plan beside it, once), replacing the last.

    Raises:
        StreamsError: the file could not be written.
    """
    directory = os.path.dirname(path)
    thread_file = _thread_file(plan.thread)
    fields = {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)}
    fields["thread"] = plan.thread.key
    try:
        os.makedirs(directory, exist_ok=True)
        if not os.path.exists(thread_file):
            _replace(thread_file, plan.thread.pickled())
        _replace(path, cloud_dumps((thread_file, fields)))
    except OSError as exc:
        raise StreamsError(f"cannot write the batch plan {path}: {exc}") from exc


def read_plan(path: str) -> BatchPlan:
    """The batch plan last written at ``path``.

    Raises:
        StreamsError: the file is missing or unreadable.
    """
    try:
        with open(path, "rb") as f:
            thread_file, fields = pickle.loads(f.read())
        key = fields["thread"]
        thread = _threads.get(key)
        if thread is None:
            with open(thread_file, "rb") as f:
                thread = pickle.loads(f.read())
            if len(_threads) >= _THREADS_KEPT:  # instances that ended long ago
                _threads.clear()
            _threads[key] = thread
    except (OSError, pickle.UnpicklingError, EOFError, KeyError) as exc:
        raise StreamsError(f"cannot read the batch plan {path}: {exc}") from exc
    fields["thread"] = thread
    return BatchPlan(**fields)


def _directory(thread: ThreadPlan) -> str:
    """Where this machine's task hosts of ``thread``'s application have their sockets."""
    config = thread.config
    return socket_dir(executor_state_dir(config.state_dir), config.application_id)


def _thread_file(thread: ThreadPlan) -> str:
    return os.path.join(_directory(thread), f"thread-{thread.key}.pickle")


def _replace(path: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".plan-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
