"""The executors of the session's cluster: which have registered, how many are expected,
how many Spark tasks they run at once, and a bounded wait for the expected ones.

A stream thread's first batch places its tasks on the executors its Spark tasks ran on,
and they live there after (:mod:`runtime.thread.placement`). Spark starts running jobs as
soon as one executor has registered (a standalone or ``local-cluster`` master waits for no
share of them, ``spark.scheduler.minRegisteredResourcesRatio`` 0 there); a first batch run
before the second executor registered put every task on the first one for good. So the
first batch waits, as Spark's own scheduler does where it waits, until the expected
executors have registered or ``spark.scheduler.maxRegisteredResourcesWaitingTime`` (Spark's
default 30 s) has passed; after that it runs on those there are.

Expected executors are known from the master (``local-cluster[N, ...]``) or from
``spark.executor.instances`` when dynamic allocation is off; otherwise (a standalone master
offering what its workers have, dynamic allocation) nothing is waited for.

Where the Spark tasks of that first batch ran still decided nothing for sure: Spark runs
a stage's tasks on the cores free when it offers them, and a core still busy (the warm-up's
task of a slow executor) left both of a batch's Spark tasks to the other executor. So the
driver places new tasks itself: the warm-up (:mod:`runtime.spark.warmup`) learns each
executor's host server (:class:`HostServers`), and :class:`~runtime.thread.placement.TaskPlacement`
spreads the tasks over those, whichever executor runs their Spark task.
"""

from __future__ import annotations

import logging
import re
import secrets
import threading
import time

from pyspark import SparkContext

from runtime.tasks.protocol import SECRET_BYTES

log = logging.getLogger(__name__)

#: ``local-cluster[executors, cores each, memory]``.
_LOCAL_CLUSTER = re.compile(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,")
#: Spark's default of ``spark.scheduler.maxRegisteredResourcesWaitingTime``.
DEFAULT_WAIT_S = 30.0
_POLL_S = 0.2

#: Opens the task hosts' TCP connections of the applications this driver process runs
#: (it travels with each plan, as Spark sends its tasks' closures).
HOST_SECRET = secrets.token_hex(SECRET_BYTES)


class HostServers:
    """The task host servers an application's warm-up found: executor id -> the TCP
    address of its server (which knows :data:`HOST_SECRET`)."""

    def __init__(self) -> None:
        self.servers: dict[str, str] = {}
        self.done = threading.Event()

    def found(self, servers: dict[str, str]) -> None:
        self.servers = dict(servers)
        self.done.set()

    def wait(self, timeout_s: float) -> dict[str, str]:
        """Those found, once the warm-up ended or ``timeout_s`` passed (then: none)."""
        self.done.wait(timeout_s)
        return dict(self.servers)


_warmed: dict[str, HostServers] = {}
_warmed_lock = threading.Lock()


def warming(application_id: str) -> HostServers:
    """A new record of ``application_id``'s host servers, for its warm-up to fill."""
    with _warmed_lock:
        _warmed[application_id] = record = HostServers()
    return record


def warmed(application_id: str) -> HostServers | None:
    """The record of ``application_id``'s last warm-up (None: none ran)."""
    with _warmed_lock:
        return _warmed.get(application_id)


def is_local(context: SparkContext) -> bool:
    """Whether the master is ``local``/``local[...]``: the driver is the one executor."""
    master = str(context.master)
    return master == "local" or master.startswith("local[")


def registered(context: SparkContext) -> list[str]:
    """The ids of the executors registered with the driver now (not the driver)."""
    jvm_context = context._jsc.sc()
    ids = context._jvm.scala.jdk.javaapi.CollectionConverters.asJava(  # type: ignore[union-attr]
        jvm_context.getExecutorIds()
    )
    return sorted(str(i) for i in ids)


def expected(context: SparkContext) -> int:
    """How many executors the application asked for (0: not known)."""
    found = _LOCAL_CLUSTER.match(str(context.master))
    if found is not None:
        return int(found.group(1))
    conf = context.getConf()
    if dynamic_allocation(context):
        return 0
    try:
        return max(0, int(conf.get("spark.executor.instances") or 0))
    except ValueError:
        return 0


def dynamic_allocation(context: SparkContext) -> bool:
    """Whether Spark adds and removes executors as the load goes."""
    raw = context.getConf().get("spark.dynamicAllocation.enabled") or "false"
    return raw.strip().lower() == "true"


def slots(context: SparkContext) -> int:
    """How many Spark tasks the executors run at once: the cores of those registered
    (Spark's default parallelism is never below two, and a one-core cluster ran a batch's
    two Spark partitions one after the other: a restart's tasks were opened and restored
    in two halves, 11 s and then 14 s, where their hosts do it side by side); before any
    registered, a ``local-cluster`` master's own count. A local master, or a cluster
    whose cores are not known: Spark's default parallelism."""
    if not is_local(context):
        cores = _registered_cores(context)
        if cores > 0:
            return cores
        found = _LOCAL_CLUSTER.match(str(context.master))  # none registered yet
        if found is not None:
            return int(found.group(1)) * int(found.group(2))
    return int(context.defaultParallelism)


def wait_for_expected(context: SparkContext, what: str) -> list[str]:
    """Wait until the expected executors have registered, at most
    ``spark.scheduler.maxRegisteredResourcesWaitingTime``; return those registered.
    ``what`` names the waiter in the log. Nothing is waited for on a local master."""
    if is_local(context):
        return []
    want = expected(context)
    have = registered(context)
    if len(have) >= want:
        return have
    limit = wait_limit_s(context)
    log.info(
        "%s: waiting up to %.0f s for %d executors to register (%d have: %s)",
        what, limit, want, len(have), ", ".join(have) or "none",
    )  # fmt: skip
    deadline = time.monotonic() + limit
    while len(have) < want and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        have = registered(context)
    if len(have) < want:
        log.warning(
            "%s: %d of %d executors registered after %.0f s; the tasks are placed on "
            "those (spark.scheduler.maxRegisteredResourcesWaitingTime sets the wait)",
            what, len(have), want, limit,
        )  # fmt: skip
    return have


def _registered_cores(context: SparkContext) -> int:
    try:
        backend = context._jsc.sc().schedulerBackend()
        return int(backend.totalCoreCount())
    except Exception:  # another scheduler backend: no such count
        return 0


def wait_limit_s(context: SparkContext) -> float:
    """``spark.scheduler.maxRegisteredResourcesWaitingTime`` in seconds."""
    raw = context.getConf().get("spark.scheduler.maxRegisteredResourcesWaitingTime")
    if not raw:
        return DEFAULT_WAIT_S
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|min|m|h)?\s*", raw)
    if found is None:
        return DEFAULT_WAIT_S
    value, unit = float(found.group(1)), found.group(2) or "ms"  # Spark's unit: ms
    return value * {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}[unit]
