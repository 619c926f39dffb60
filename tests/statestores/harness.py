"""A task's stores wired to real Delta changelogs, as the runtime wires them.

Used in-process by the tests and, through ``python -m tests.statestores.harness``, by the
subprocesses the crash tests kill.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from common.serdes import Serdes
from runtime.state.adapters import (
    CoordinatorTransactionOutcomes,
    ProducerChangelogCollector,
    RootSnapshotStorage,
    TopicChangelogReader,
    create_changelog_topics,
)
from runtime.storage.topics import TopicAdmin
from runtime.txn.producer import TransactionalProducer
from runtime.txn.state import TransactionState
from statestores.state_manager import ProcessorStateManager
from statestores.stores import Stores

APP = "app"
STORE = "counts"
TID = "app-tid"


class Task:
    """One task (partition 0) with one key-value store ``counts`` (str -> str)."""

    def __init__(
        self,
        root: str,
        state_dir: str,
        *,
        persistent: bool = True,
        eos: bool = True,
        outcomes: bool = True,
        snapshots: bool = True,
        config: dict[str, Any] | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> None:
        self.admin = TopicAdmin(root)
        create_changelog_topics(self.admin, APP, {STORE: {"cleanup.policy": "compact"}}, 1)
        self.producer = TransactionalProducer(self.admin, TID)
        self.producer.init_transactions()  # rolls a crashed PrepareCommit forward
        self.reader = TopicChangelogReader(self.admin)
        app_config = dict(config or {})
        self.manager = ProcessorStateManager(
            application_id=APP,
            task_id="0_0",
            partition=0,
            state_dir=state_dir,
            app_config=app_config,
            changelog=ProducerChangelogCollector(self.producer, APP, 0),
            changelog_reader=self.reader,
            transaction_outcomes=(
                CoordinatorTransactionOutcomes(
                    self.producer.coordinator, [f"{APP}-{STORE}-changelog"]
                )
                if outcomes
                else None
            ),
            snapshots=RootSnapshotStorage(root) if snapshots else None,
            transactional=eos,
        )
        factory = (
            Stores.persistent_key_value_store if persistent else Stores.in_memory_key_value_store
        )
        self.store: Any = Stores.key_value_store_builder(
            factory(STORE), Serdes.String(), Serdes.String()
        ).build()
        if cancelled is not None:  # the restoration stops when this says so
            self.manager.cancelled = cancelled
        self.eos = eos
        try:
            self.store.init(self.manager)
        except BaseException:  # as a task host closes a task whose build failed
            self.close()
            raise

    def begin(self) -> None:
        self.producer.begin_transaction()

    def prepare(self) -> None:
        # the sequence of the open transaction (assigned when it registers participants)
        snap = self.producer.coordinator.load(TID)
        assert snap is not None
        ongoing = snap.meta.state is TransactionState.ONGOING
        sequence = snap.meta.txn_sequence + (0 if ongoing else 1)
        self.manager.prepare_commit(TID if self.eos else None, sequence)

    def commit(self) -> None:
        """The three phases: prepare the stores, commit the producer, apply the stores."""
        self.prepare()
        self.producer.commit_transaction()
        self.manager.commit()

    def write(self, items: dict[str, str | None]) -> None:
        self.begin()
        for key, value in items.items():
            self.store.put(key, value)
        self.commit()

    def state(self) -> dict[str, str]:
        return dict(self.store.all())

    def close(self) -> None:
        self.manager.close()
        self.producer.close()


def _crash_run(root: str, state_dir: str, point: str) -> None:
    """Commit v1, then write v2 and die with SIGKILL at ``point``."""
    task = Task(root, state_dir)
    task.write({f"k{i:03d}": "v1" for i in range(100)})
    task.begin()
    for i in range(0, 150):
        task.store.put(f"k{i:03d}", "v2")
    task.store.delete("k000")
    task.prepare()
    if point == "before_commit":
        os.kill(os.getpid(), signal.SIGKILL)
    task.producer.commit_transaction()  # STREAMS_FAULT_POINT may kill inside
    if point == "after_commit":
        os.kill(os.getpid(), signal.SIGKILL)
    task.manager.commit()
    print("committed", flush=True)


if __name__ == "__main__":
    _crash_run(sys.argv[1], sys.argv[2], sys.argv[3])
