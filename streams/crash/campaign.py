"""A fault campaign: several instances of a topology under a mix of faults, checked
exactly once at the end (Jepsen's nemesis, on one machine).

::

    report = run_campaign("examples/wordcount.py", generate=20_000, duration_s=3600,
                          faults=FAULT_KINDS, instances=2, master="local-cluster[2,1,1024]",
                          object_store=True)
    print(report.text())

1. The topics are created on the root (with ``object_store``: a bucket of an S3-compatible
   server started here, which the instances reach through the fault proxy); the input is
   fed over the campaign, in order, a slice a second, so the instances always have work.
2. ``instances`` processes of ``streams-eos run FILE`` (state directories of their own)
   share the application's tasks through its consumer group. An instance that ends on its
   own (a fenced zombie, a full disk) is restarted, as a supervisor would, and its end is
   noted with the fault that caused it.
3. Faults are applied (:mod:`streams.crash.nemesis`; the kinds in turn, from a shuffled
   deck) and healed in two lanes at once: those that take an instance out (kill, fault
   point, pause, executor, full disk) one at a time, each once the last recovered and on
   an instance no other fault's recovery waits for; the others (object store, Python
   workers) every ``interval_s`` or so over them. A fault's
   **recovery** is the time from its healing until every instance it hit has committed a
   transaction again and runs all its tasks (its record names none restoring; a storage
   fault hits every instance no take-out fault holds); an instance a storage or Python
   worker fault hit has recovered too once nothing waits for it (its committed positions
   are at the end of each of its partitions: its input may come from an instance a pause
   holds, and then it has nothing to commit).
4. Once the faults are over and the input is all fed, the instances catch up, are stopped,
   and the outputs and stores are compared with the TopologyTestDriver's reference (as the
   crash test does: :mod:`streams.crash.check`).
"""

from __future__ import annotations

import os
import random
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from runtime.storage.fs import register_storage_options
from streams.crash.campaign_report import RECOVERY_LIMIT_S, CampaignReport, FaultEvent
from streams.crash.check import offsets_lag
from streams.crash.inputs import CrashTestError, InputRecord
from streams.crash.instances import Exit, Instance, wait_until
from streams.crash.nemesis import TAKE_OUT_KINDS, Nemesis, mount_small_disk, unmount
from streams.crash.progress import InstanceProgress
from streams.crash.s3proxy import FaultProxy, FaultRule
from streams.crash.s3server import start_server
from streams.crash.workspace import Workspace

#: Settings of every instance unless the caller's config sets them: short timeouts, so
#: that a paused or killed instance's tasks move within seconds.
CAMPAIGN_DEFAULTS = {
    "commit.interval.ms": "200",
    "max.poll.records": "50",
    "session.timeout.ms": "6000",
    "heartbeat.interval.ms": "500",
    "transaction.timeout.ms": "8000",
    "group.initial.rebalance.delay.ms": "1000",
}
#: On an object store (every group heartbeat a few requests through the proxy, and a
#: faulty one at that) the timeouts are longer, so that a slow answer is not a lost member,
#: the log ends are checked less often, and a batch may read more (its commits take
#: seconds: a backlog on one partition drained at 65 records a second, 500 a batch; the
#: batch sizer keeps each batch near its target whatever the bound).
#: The session timeout is Kafka's default, longer than an instance's restart there: a
#: killed instance comes back as the same static member (``group.instance.id``) and takes
#: its tasks back without a rebalance, as Kafka's static membership is used.
OBJECT_STORE_DEFAULTS = {
    "session.timeout.ms": "45000",
    "heartbeat.interval.ms": "3000",
    "transaction.timeout.ms": "20000",
    "poll.ms": "2000",
    "max.poll.records": "2000",
    "log.cleaner.backoff.ms": "30000",
}

#: How long the instances may take, once the faults are over and the input is all fed,
#: to process what is left (a campaign's backlog on a loaded machine can be large).
DRAIN_LIMIT_S = 1800


class Campaign(Workspace):
    """A fault campaign of ``file`` (see the module).

    Args:
        file, inputs, generate, workdir, config, seed: as for the crash test's workspace.
        faults: the fault kinds to mix (:data:`~streams.crash.nemesis.FAULT_KINDS`).
        instances: how many instances share the tasks.
        master: Spark's master of each instance (``local-cluster[2,1,1024]``); default
            local mode.
        object_store: put the root on an S3-compatible server started here, behind the
            fault proxy (the storage faults need it).
        storage_faults: a background rate of storage errors (500, 503, resets) through
            the whole campaign, besides the storage faults of the mix.
        env: more environment variables of the instances.
    """

    def __init__(
        self,
        file: str | os.PathLike[str],
        *,
        faults: Sequence[str],
        inputs: Sequence[InputRecord] = (),
        generate: int | None = None,
        workdir: str | os.PathLike[str] | None = None,
        config: Mapping[str, object] | None = None,
        seed: int = 0,
        instances: int = 2,
        master: str | None = None,
        object_store: bool = False,
        storage_faults: float = 0.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        remote = object_store or bool(storage_faults)
        defaults = {**CAMPAIGN_DEFAULTS, **(OBJECT_STORE_DEFAULTS if remote else {})}
        settings: dict[str, object] = {**defaults, **(config or {})}
        self.proxy: FaultProxy | None = None
        self._server: subprocess.Popen[bytes] | None = None
        direct: dict[str, str] = {}
        if remote:
            self._server, server = start_server()
            self.proxy = FaultProxy(server.endpoint, seed=seed, timeout_s=10.0).start()
            direct = server.options()
            settings["topics.root"] = f"s3://{server.new_bucket()}/root"
            proxied = {**direct, "AWS_ENDPOINT_URL": self.proxy.endpoint}
            settings.update({f"storage.options.{k}": v for k, v in proxied.items()})
        super().__init__(
            file, inputs=inputs, generate=generate, workdir=workdir, config=settings, seed=seed
        )
        if direct:  # the campaign itself reads the store directly, past the proxy
            register_storage_options(self.root, direct)
        self.storage_faults = storage_faults
        self.master = master or "local[2]"
        self.kinds = list(faults)
        self.seed = seed
        env = {"PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", "python"), **(env or {})}
        if master:
            env["SPARK_MASTER"] = master
        overrides = {k: v for k, v in self.overrides.items() if k != "state.dir"}
        self.instances = [
            Instance(
                name,
                self.file,
                os.path.join(self.workdir, f"state-{name}"),
                os.path.join(self.workdir, "logs"),
                overrides,
                self.application_id,
                env,
            )
            for name in "abcdefgh"[:instances]
        ]
        self.state_dirs = [i.state_dir for i in self.instances]
        self.exits: list[Exit] = []
        self._started = time.monotonic()
        self._stopping = False
        self._fed = threading.Event()
        self._rush = threading.Event()
        self._closed = False
        #: The faults whose recovery is awaited: index -> (event, sequences at healing,
        #: the instances it hit).
        self._watching: dict[int, tuple[FaultEvent, dict[str, int], list[str]]] = {}
        self._events: list[FaultEvent] = []
        self._lock = threading.RLock()
        #: The instance a take-out fault holds until it recovered.
        self._taken_out: str | None = None
        #: The instances a Python worker fault being applied may hit (it waits for a
        #: worker to kill): index -> their names.
        self._applying: dict[int, set[str]] = {}
        self._lane_error: BaseException | None = None
        self._watched = 0.0
        self._on_fault: Callable[[FaultEvent], None] | None = None
        self._progress: InstanceProgress | None = None

    def run(
        self,
        *,
        duration_s: float | None = None,
        count: int | None = None,
        interval_s: float = 8.0,
        on_fault: Callable[[FaultEvent], None] | None = None,
    ) -> CampaignReport:
        """Run the campaign for ``duration_s`` seconds or ``count`` faults; return the
        report. ``on_fault`` is told each fault once its recovery is known."""
        self._on_fault = on_fault
        if duration_s is None and count is None:
            raise CrashTestError("a campaign needs a duration or a number of faults")
        self.setup(produce=False)
        pause_s = max(self.config.session_timeout_ms, self.config.transaction_timeout_ms) / 1000 + 3
        nemesis = Nemesis(
            self.instances,
            self.proxy,
            self.fault_points(),
            pause_s=pause_s,
            seed=self.seed,
            tick=self._tick,
        )
        cluster = self.master.startswith(("local-cluster", "spark://"))
        for kind in self.kinds:
            why = nemesis.possible(kind, cluster)
            if why is not None:
                raise CrashTestError(why)
        if "disk-full" in self.kinds:
            for instance in self.instances:
                mount_small_disk(instance.state_dir)
        background = self._background_faults()
        # the input lasts as long as the faults and their recoveries (a recovery shows as
        # a commit: an instance that caught up with an input already all fed commits
        # nothing, and the last fault before the end looked unrecovered)
        # (a take-out fault lasts up to its recovery limit: the input must outlast them)
        feed_s = (
            (duration_s + 2 * RECOVERY_LIMIT_S)
            if duration_s
            else ((count or 0) * (interval_s + 2 * RECOVERY_LIMIT_S))
        )
        feeder = threading.Thread(target=self._feed, args=(feed_s,), daemon=True)
        events: list[FaultEvent] = []
        try:
            self._started = time.monotonic()
            feeder.start()
            for instance in self.instances:
                instance.start()
            self._wait_committing(timeout_s=300)
            events = self._faults(nemesis, duration_s, count, interval_s)
            self._rush.set()
            self._fed.wait()
            self._drain()
        finally:
            self._rush.set()
            self._stopping = True
            for instance in self.instances:
                instance.stop()
            if self.proxy is not None:
                for rule in background:
                    self.proxy.remove(rule)
        report = self.new_report(kills_planned=0)
        self.compare(report)
        self.close()
        return CampaignReport(
            report,
            events,
            self.exits,
            round(time.monotonic() - self._started, 1),
            len(self.instances),
            self.master,
            self.proxy is not None,
            {r.kind: r.hits for r in background},
            dict(self.proxy.requests) if self.proxy is not None else {},
        )

    def close(self) -> None:
        """Stop the proxy and the server; unmount the small disks (once)."""
        if self._closed:
            return
        self._closed = True
        if self.proxy is not None:
            self.proxy.stop()
        if self._server is not None:
            self._server.terminate()
            self._server.wait(10)
        if "disk-full" in self.kinds:
            for instance in self.instances:
                unmount(instance.state_dir)

    # -- the loop ------------------------------------------------------------------------

    def _faults(
        self, nemesis: Nemesis, duration_s: float | None, count: int | None, interval_s: float
    ) -> list[FaultEvent]:
        """Apply faults until the duration or the count is reached, in two lanes at once
        (Jepsen's schedule): the faults that take an instance out one at a time, each
        once the last one recovered, so another instance can always take the tasks; the
        others (object store, Python workers) every ``interval_s`` after the last one
        healed, over whatever else goes on. Each fault's recovery is measured on the
        instances it hit (a storage fault: those no take-out fault holds)."""
        end = None if duration_s is None else self._started + duration_s
        take_out = [k for k in self.kinds if k in TAKE_OUT_KINDS]
        others = [k for k in self.kinds if k not in TAKE_OUT_KINDS]
        lanes = [
            threading.Thread(
                target=self._lane,
                args=(nemesis, kinds, end, count, interval_s, lane, lane == 0),
                name=f"campaign-lane-{lane}",
                daemon=True,
            )
            for lane, kinds in enumerate((take_out, others))
            if kinds
        ]
        for lane in lanes:
            lane.start()
        while any(lane.is_alive() for lane in lanes):
            self._sleep(0.5)
        if self._lane_error is not None:
            raise self._lane_error
        # the last faults' recoveries
        wait_until(lambda: self._tick() or not self._watching, 2 * RECOVERY_LIMIT_S + 5)
        return sorted(self._events, key=lambda e: e.index)

    def _lane(  # noqa: PLR0917 - one lane's share of _faults
        self,
        nemesis: Nemesis,
        kinds: Sequence[str],
        end: float | None,
        count: int | None,
        interval_s: float,
        lane: int,
        one_at_a_time: bool,
    ) -> None:
        rng = random.Random(self.seed + 1 + lane)
        deck: list[str] = []
        try:
            while not self._stopping and (end is None or time.monotonic() < end):
                with self._lock:
                    if count is not None and len(self._events) >= count:
                        return
                    index = len(self._events) + 1
                    self._events.append(FaultEvent(index, "", "", "", self._now(), 0.0))
                if not deck:
                    deck = list(kinds)
                    rng.shuffle(deck)
                kind = deck.pop()
                event = self._apply(nemesis, index, kind)
                if one_at_a_time:
                    # the next once this one recovered (or certainly did not): each
                    # recovery is its own fault's, not the sum of several
                    wait_until(
                        lambda i=event.index: i not in self._watching, 2 * RECOVERY_LIMIT_S + 5
                    )
                    self._taken_out = None
                time.sleep(rng.uniform(0.5, 1.5) * interval_s)
        except BaseException as exc:  # the main thread raises it
            self._lane_error = exc

    def _apply(self, nemesis: Nemesis, index: int, kind: str) -> FaultEvent:
        """Apply fault ``index`` of ``kind``; start watching its recovery."""
        exits_before = len(self.exits)
        event = self._events[index - 1]
        event.kind = kind
        avoid = [self._taken_out or ""]
        if kind in TAKE_OUT_KINDS:
            # not an instance still recovering from another fault: that recovery would
            # take this one's time too (a pause right after a storage fault doubled it)
            wait_until(lambda: len(self._recovering()) < len(self.instances), RECOVERY_LIMIT_S)
            avoid = sorted(self._recovering())
        event.target = nemesis.pick(kind, avoid)
        if kind in TAKE_OUT_KINDS:
            self._taken_out = event.target
        elif kind == "python-worker":  # a take-out fault waits for it: it may wait itself
            self._applying[index] = {i.name for i in self.instances if i.name not in avoid}
        try:
            applied = nemesis.apply(kind, event.target, avoid)
        finally:
            self._applying.pop(index, None)
        event.target, event.detail, event.healed_s = applied.target, applied.detail, self._now()
        event.exits = [
            f"{e.instance} ended (code {e.code}): {e.reason}" for e in self.exits[exits_before:]
        ]
        if applied.target != "storage":
            hit = [applied.target]
        else:
            hit = [i.name for i in self.instances if i.name != self._taken_out]
        with self._lock:
            self._watching[event.index] = (event, self.progress.decided(), hit)
        return event

    def _watch(self) -> None:
        """Note the recovery of every fault whose instances all committed again since it
        was healed; give up on one after twice the limit."""
        if not self._watching or time.monotonic() - self._watched < 2.0:
            return
        self._watched = time.monotonic()
        now, at = self.progress.decided(), self._now()
        restoring = self.progress.restoring(self.instances)
        idle: set[str] | None = None  # read once, when a fault that allows it waits
        for index, (event, base, hit) in list(self._watching.items()):
            instances = [i for i in self.instances if i.name in hit]
            if event.kind not in TAKE_OUT_KINDS and idle is None:
                idle = self.progress.caught_up(self.instances)
            # an instance a fault did not take out has recovered once it committed again,
            # or once nothing waits for it (its input comes from an instance a pause holds)
            caught_up = idle if event.kind not in TAKE_OUT_KINDS and idle else set()
            if all(
                (self.progress.committed_since(i, base, now) or i.process_id() in caught_up)
                and i.process_id() not in restoring
                for i in instances
            ):
                event.recovery_s = round(at - event.healed_s, 1)
            elif at - event.healed_s <= 2 * RECOVERY_LIMIT_S:
                continue
            del self._watching[index]
            if self._on_fault is not None:
                self._on_fault(event)

    def _recovering(self) -> set[str]:
        """The instances a fault hit that have not recovered from it yet, and those a
        Python worker fault being applied may hit (a pause on an instance whose Python
        worker fault waited for a worker took that fault's recovery: 75.5 s)."""
        applying = {name for names in list(self._applying.values()) for name in names}
        return applying | {name for _, _, hit in list(self._watching.values()) for name in hit}

    @property
    def progress(self) -> InstanceProgress:
        """What the instances committed, and whether they restore."""
        if self._progress is None:
            self._progress = InstanceProgress(self.admin, self.application_id)
        return self._progress

    def _wait_committing(self, timeout_s: float) -> float | None:
        """Wait until every instance committed a transaction; return when."""

        def committed() -> bool:
            self._supervise()
            now = self.progress.decided()
            return all(self.progress.committed_since(i, {}, now) for i in self.instances)

        return wait_until(committed, timeout_s, step_s=1.0)

    def _tick(self) -> bool:
        """Supervise and watch (returns False, for use in conditions); the lanes and the
        main thread take turns."""
        with self._lock:
            self._supervise()
            self._watch()
        return False

    def _supervise(self) -> None:
        """Restart an instance that ended on its own; note how it ended."""
        for instance in self.instances:
            code = instance.ended()
            if code is None or instance.paused or instance.held or self._stopping:
                continue
            self.exits.append(Exit(instance.name, self._now(), code, instance.last_error()))
            instance.kill()  # what its driver left behind
            instance.start()

    def _drain(self) -> None:
        """Let the instances process everything; raise when they cannot within
        :data:`DRAIN_LIMIT_S`."""
        sources = sorted(self.plan.sources)

        def caught_up() -> bool:
            self._tick()
            return not offsets_lag(self.admin, self.application_id, sources)

        done = wait_until(caught_up, DRAIN_LIMIT_S, step_s=2.0)
        self._stopping = True
        if done is None:
            lag = offsets_lag(self.admin, self.application_id, sources)
            raise CrashTestError(
                f"the instances did not catch up within {DRAIN_LIMIT_S // 60} min of the "
                f"faults' end: {lag} records behind per input partition"
            )

    def _feed(self, seconds: float) -> None:
        """Produce the input in order, spread over ``seconds``: every second, what is due
        by then (a produce on a slow store takes its time without falling behind); the
        rest at once when the faults are over (:attr:`_rush`)."""
        records = self.records
        started, done = time.monotonic(), 0
        try:
            while done < len(records):
                due = len(records)
                if not self._rush.is_set():
                    elapsed = time.monotonic() - started
                    due = min(len(records), int(len(records) * elapsed / max(seconds, 1.0)) + 1)
                if due > done:
                    self.produce(records[done:due])
                    done = due
                if done < len(records):
                    self._rush.wait(1.0)  # not _sleep: the main thread supervises
        finally:
            self._fed.set()

    def _background_faults(self) -> list[FaultRule]:
        if self.proxy is None or not self.storage_faults:
            return []
        rate = self.storage_faults / 3
        kinds = ("500", "503", "reset")
        return [self.proxy.add(FaultRule(k, rate=rate)) for k in kinds]  # type: ignore[arg-type]

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._tick()
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))

    def _now(self) -> float:
        return round(time.monotonic() - self._started, 1)
