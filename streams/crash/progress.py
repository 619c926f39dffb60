"""What a fault campaign's instances did since a fault: the transactions each committed
(from the transaction logs, and from the offsets topic, where each committed transaction
that consumed positions leaves its ``txn`` action), whether a task still restores (from
the instances' own records), and which are caught up (nothing of their partitions waits
for them)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence

from common.errors import StreamsError
from runtime.app.instance_status import read_instances
from runtime.group.coordinator import GroupCoordinator
from runtime.group.state import GroupState
from runtime.storage.committer import TopicCommitter
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.txn.coordinator import TransactionCoordinator
from runtime.txn.offsets import OFFSETS_TOPIC, OffsetsStore
from runtime.txn.state import TransactionState
from streams.crash.instances import Instance


class InstanceProgress:
    """Reads the instances' progress from storage.

    Args:
        admin: the storage root's admin.
        application_id: the application the instances run.
    """

    def __init__(self, admin: TopicAdmin, application_id: str) -> None:
        self.admin = admin
        self.application_id = application_id
        #: The newest committed transaction seen of each transactional id (monotonic).
        self._seen: dict[str, int] = {}
        self._offsets: TopicCommitter | None = None

    def restoring(self, instances: Sequence[Instance]) -> set[str | None]:
        """The process ids of the instances whose records say a task restores (an instance
        recovers once it commits and runs all its tasks); every instance when the records
        cannot be read now."""
        try:
            records = read_instances(self.admin, self.application_id)
        except (StreamsError, OSError):
            return {i.process_id() for i in instances}
        return {
            r.get("process.id")
            for r in records
            if any(t.get("restoring") for t in r.get("threads", ()))
            and r.get("state") not in ("NOT_RUNNING", "ERROR")
        }

    def decided(self) -> dict[str, int]:
        """The newest transaction of each transactional id known to be committed: in
        PrepareCommit (decided) or CompleteCommit now, or seen so before. Polled every
        few seconds, a thread whose batches run back to back is mostly seen Ongoing; its
        seconds-long commit phase on an object store, or the moment after, is what shows;
        so the offsets topic says too which transaction of each id last committed consumed
        positions there (its ``txn`` action), whatever the log shows now."""
        coordinator = TransactionCoordinator(self.admin)
        metas = coordinator.list()
        for meta in metas:
            if meta.state in (TransactionState.PREPARE_COMMIT, TransactionState.COMPLETE_COMMIT):
                tid = meta.transactional_id
                self._seen[tid] = max(meta.txn_sequence, self._seen.get(tid, -1))
        with contextlib.suppress(StreamsError, OSError):
            if self._offsets is None:
                self._offsets = TopicCommitter(self.admin, OFFSETS_TOPIC)
            table = self._offsets.table()  # read once for every id
            for meta in metas:
                tid = meta.transactional_id
                committed = table.transaction_version(tid)
                if committed is not None:
                    self._seen[tid] = max(int(committed), self._seen.get(tid, -1))
        return dict(self._seen)

    def committed_since(
        self, instance: Instance, base: Mapping[str, int], now: Mapping[str, int]
    ) -> bool:
        pid = instance.process_id()
        prefix = f"{self.application_id}-{pid}-"
        return pid is not None and any(
            tid.startswith(prefix) and seq > base.get(tid, -1) for tid, seq in now.items()
        )

    def caught_up(self, instances: Sequence[Instance]) -> set[str]:
        """The process ids of the instances that own partitions in the stable group and
        whose committed positions are at the end of every one of them: nothing waits for
        them (one whose input another instance writes has nothing to commit while a pause
        holds that one). None when the group or the positions cannot be read now."""
        try:
            group = GroupCoordinator(self.admin).describe(self.application_id)
            if group.state is not GroupState.STABLE:
                return set()
            committed = OffsetsStore(self.admin).fetch(self.application_id)
            reader = TopicReader(self.admin)
            ends: dict[str, dict[int, int]] = {}
            done = set()
            for instance in instances:
                pid = instance.process_id()
                owned = [
                    tp
                    for m in group.members
                    if pid is not None and m.member_id.startswith(f"{pid}-")
                    for tp in m.assignment.partitions
                ]
                for topic, _ in owned:
                    if topic not in ends:
                        ends[topic] = reader.end_offsets(topic)
                behind = [(t, p) for t, p in owned if committed.get((t, p), 0) < ends[t][p]]
                if owned and not behind and pid is not None:
                    done.add(pid)
            return done
        except (StreamsError, OSError):
            return set()
