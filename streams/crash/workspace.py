"""A crash test's workspace: the application under test and the storage its runs share.

:class:`Workspace` loads FILE and its input, and owns the storage root (``root/``, or a
``topics.root`` given), the state directory (``state/``) and the logs (``logs/``) under
its workdir. Before the runs it creates the topics and produces the input
(:meth:`~Workspace.setup`); while they go it counts commits, from outside the processes;
after them it compares what they left with the reference run (:meth:`~Workspace.compare`).
The runs and their kills are :class:`~streams.crash.harness.CrashTest`'s.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from common.errors import ConfigError
from runtime.app.internal_topics import plan_topics
from runtime.app.topology_file import build_config, build_topology_of, load_topology_file
from runtime.spark.checkpoint import checkpoint_location
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.txn.coordinator import TransactionCoordinator
from runtime.txn.state import TransactionState
from streams.crash.check import (
    Reference,
    compare_outputs,
    compute_reference,
    offsets_lag,
    open_transactions,
    output_topics,
    read_topic,
    record_formatter,
    sweep_and_list_staged,
)
from streams.crash.inputs import CrashTestError, InputRecord, generated
from streams.crash.plan import GUARANTEES, CrashReport, fault_points
from streams.crash.poison import (
    check_rejected,
    compare_dead_letters,
    is_poison,
    poison_config,
    poison_positions,
    poison_records,
)
from streams.crash.stores import compare_store, local_store_dirs, restore_changelog

#: Settings of every run unless the caller's config sets them. Time retention is off: the
#: inputs replay history (BASE_TIMESTAMP is long past), and every record is compared.
RUN_DEFAULTS = {"commit.interval.ms": "100", "max.poll.records": "10", "log.retention.ms": "-1"}


class Workspace:
    """The application under test, with its storage root, state directory and logs.

    Args:
        file: the topology file (as for ``streams-eos run``).
        inputs: records to produce before the first run.
        generate: or ask FILE's ``generate(n)`` for ``n`` records of its ``INPUT``.
        workdir: where the root (``root/``), state (``state/``) and logs go (default: new).
            A ``topics.root`` in ``config`` (an object store's URI, with its
            ``storage.options.*``) puts the root there instead; it must be empty.
        guarantee: ``processing.guarantee`` of the runs.
        config: more ``--config`` pairs for the runs.
        poison: the fraction of the input made poison (see :mod:`streams.crash.poison`).
        seed: chooses the poison records.

    Raises:
        ConfigError: an unknown guarantee, or FILE's configuration is invalid.
        CrashTestError: there is no input.
    """

    def __init__(
        self,
        file: str | os.PathLike[str],
        *,
        inputs: Sequence[InputRecord] = (),
        generate: int | None = None,
        workdir: str | os.PathLike[str] | None = None,
        guarantee: str = "exactly_once_v2",
        config: Mapping[str, object] | None = None,
        poison: float = 0.0,
        seed: int = 0,
    ) -> None:
        if poison:
            config = poison_config(config)
        if guarantee not in GUARANTEES:
            raise ConfigError(f"guarantee {guarantee!r}: expected one of {', '.join(GUARANTEES)}")
        self.file = str(file)
        self.seed = seed
        self.workdir = str(workdir or tempfile.mkdtemp(prefix="crashtest-"))
        configured_root = str((config or {}).get("topics.root") or "")
        self.root = configured_root or os.path.join(self.workdir, "root")
        self.state_dir = os.path.join(self.workdir, "state")
        #: Every state directory whose local stores are checked (a campaign's instances').
        self.state_dirs = [self.state_dir]
        self.guarantee = guarantee
        self.overrides = {
            **RUN_DEFAULTS,
            **{k: str(v) for k, v in (config or {}).items()},
            "processing.guarantee": guarantee,
            "topics.root": self.root,
            "state.dir": self.state_dir,
            "statestore.cache.max.bytes": "0",
        }
        self.module = load_topology_file(self.file)
        records = list(inputs) + (generated(self.module, generate) if generate else [])
        self.records = poison_records(records, poison, seed)
        self.poison = poison
        if not self.records:
            raise CrashTestError("no input: give input files (--input TOPIC=PATH) or --generate")
        self.config = build_config(
            self.module,
            root=self.root,
            properties=None,
            overrides=[f"{k}={v}" for k, v in self.overrides.items()],
        )
        self.topology = build_topology_of(self.module, str(self.file))
        self.application_id = self.config.application_id
        self.poisoned: list[tuple[str, int, int]] = []
        self._reference: Reference | None = None

    # -- before the runs -----------------------------------------------------------------

    def setup(self, *, produce: bool = True) -> None:
        """Create the topics, produce the input (unless a campaign feeds it over its
        run: :meth:`produce`), plan the internal topics."""
        os.makedirs(os.path.join(self.workdir, "logs"), exist_ok=True)
        self.admin = admin = TopicAdmin(self.root)
        local = "://" not in self.root
        if (local and os.path.isdir(self.root) and os.listdir(self.root)) or admin.list():
            raise CrashTestError(
                f"{self.root} already holds a crash test (it has topics): its input would be "
                "produced twice; give a new --workdir (or an empty topics.root)"
            )
        default_partitions = self.config.num_partitions
        for topic, n in dict(getattr(self.module, "TOPICS", {}) or {}).items():
            admin.create(topic, int(n), if_not_exists=True)
        for topic in sorted({r.topic for r in self.records}):
            admin.create(topic, default_partitions, if_not_exists=True)
        if produce:
            self.produce(self.records)
        if self.poison:
            check_rejected(self.topology, self.config, self.records)
            self.poisoned = poison_positions(admin, {r.topic for r in self.records})
        self.plan = plan_topics(self.topology, admin, self.application_id, config=self.config)
        self.outputs = output_topics(self.topology, self.application_id)
        self.partitions = {t: admin.num_partitions(t) for t in self.outputs}

    def produce(self, records: Sequence[InputRecord]) -> None:
        """Produce ``records`` to their topics, in their order."""
        producer = Producer(self.admin)
        for r in records:
            key, value, headers = r.raw()
            producer.send(r.topic, key, value, timestamp=r.timestamp, headers=headers or None)
        producer.flush()

    def reference(self) -> Reference:
        """Return the reference run's outputs and stores (computed once)."""
        if self._reference is None:
            inputs = {t: self.admin.num_partitions(t) for t in {r.topic for r in self.records}}
            clean = [r for r in self.records if not is_poison(r.value)]
            self._reference = compute_reference(
                self.topology, self.config, clean, self.partitions, inputs
            )
        return self._reference

    def fault_points(self) -> list[str]:
        """Every fault point of this application's commits (its participants + offsets)."""
        return fault_points(len(self.plan.outputs) + 1, self.guarantee)

    def checkpoint_dir(self) -> str:
        """Spark's checkpoint directory of the application."""
        return checkpoint_location(self.config, self.admin.root).removeprefix("file://")

    # -- while they go ---------------------------------------------------------------------

    def txn_sequences(self, *, committed: bool = False) -> dict[str, int]:
        """The sequence of every transactional id's latest (or latest committed)
        transaction."""
        if self.guarantee == "at_least_once":
            return {}
        return {
            m.transactional_id: m.txn_sequence
            for m in TransactionCoordinator(self.admin).list()
            if not committed or m.state is TransactionState.COMPLETE_COMMIT
        }

    def offset_commits(self) -> int:
        """The commits of ``__consumer_offsets`` so far."""
        return self._log_entries(["__consumer_offsets"])

    def output_commits(self) -> int:
        """The commits of the output, repartition and changelog tables so far."""
        return self._log_entries(sorted(self.plan.outputs))

    def _log_entries(self, topics: Sequence[str]) -> int:
        """The commits of ``topics``' Delta logs (on a local root or an object store): the
        newest version + 1 of each (old commits may have been cleaned up)."""
        root = self.admin.root
        total = 0
        for topic in topics:
            path = f"{self.admin.table_path(topic)}/_delta_log"
            versions = [
                int(info.base_name[:20])
                for info in root.list_dir(path)
                if info.base_name.endswith(".json") and info.base_name[:20].isdigit()
            ]
            total += max(versions, default=-1) + 1
        return total

    # -- after them ------------------------------------------------------------------------

    def new_report(self, **fields: Any) -> CrashReport:
        """A report of this workspace's test, with ``fields`` (kills, runs, notes...)."""
        return CrashReport(
            file=self.file,
            application_id=self.application_id,
            guarantee=self.guarantee,
            seed=self.seed,
            workdir=self.workdir,
            records_in=len(self.records),
            **fields,
        )

    def compare(self, report: CrashReport) -> None:
        """Sweep orphans, compare outputs and stores with the reference, into ``report``."""
        ref = self.reference()
        reader = TopicReader(self.root)
        actual = {t: read_topic(reader, t) for t in self.outputs}
        show = record_formatter(self.topology, self.config)
        out = compare_outputs(
            ref.outputs,
            actual,
            self.partitions,
            show,
            unordered=ref.unordered,
            unstable=ref.unstable,
        )
        if out.unordered_keys or out.unstable_keys:
            report.notes.append(
                f"{out.unordered_keys} output keys have an order, and {out.unstable_keys} "
                "their values, that depend on how input partitions interleave: compared as "
                "multisets, and by count only, respectively"
            )
        report.records_expected, report.records_out = out.records_expected, out.records_out
        report.duplicates, report.losses = out.duplicates, out.losses
        report.misplaced, report.reordered, report.diff = out.misplaced, out.reordered, out.diff
        report.stores = self._check_stores(ref, reader)
        report.open_transactions = open_transactions(self.admin)
        report.staged_swept, report.staged_left = sweep_and_list_staged(self.admin, self.root)
        report.offsets_lag = offsets_lag(self.admin, self.application_id, self.plan.sources)
        dead_letters = self.config.errors_dead_letter_queue_topic_name
        if self.poison and dead_letters:
            check = compare_dead_letters(self.admin, dead_letters, self.poisoned)
            report.dead_letters = {**check.__dict__, "ok": check.ok}

    def _check_stores(self, ref: Reference, reader: TopicReader) -> list[dict[str, Any]]:
        changelogs = self.topology.changelog_topics(self.application_id)
        out = []
        for name, expected in sorted(ref.stores.items()):
            topic = changelogs[name]
            restored = restore_changelog(reader, topic)
            ends = reader.end_offsets(topic)
            checks = [
                compare_store(
                    name,
                    ref.store_kinds[name],
                    expected=expected,
                    restored=restored,
                    local_dirs=local_store_dirs(state_dir, self.application_id, name),
                    changelog_ends=ends,
                    unstable=ref.unstable_store_keys.get(name),
                )
                for state_dir in self.state_dirs
            ]
            check = checks[0]
            for state_dir, other in zip(self.state_dirs[1:], checks[1:], strict=True):
                check.local += [f"{os.path.basename(state_dir)}: {x}" for x in other.local]
                check.local_mismatches += other.local_mismatches
            out.append({**check.__dict__, "ok": check.ok})
        return out
