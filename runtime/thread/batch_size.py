"""How many records a stream thread's next batch reads: sized from what it measured.

``max.poll.records`` bounds what a batch reads of each partition, but how long a record
takes is the data's: a word count over new words writes a store entry per word, and a batch
that Kafka's defaults would size at a few seconds can run for minutes, past
``max.poll.interval.ms`` (the member is removed from its group) or past
``transaction.timeout.ms`` (its transaction is aborted). A batch is one Spark job whose
partitions run side by side, so its time follows the records it reads of its fullest
partition. The thread therefore keeps, for each kind of batch (the set of topics it reads:
a source topic's batches and a repartition topic's draining batches cost differently), a
cap on the records read per partition:

* a kind's first batch reads at most :data:`FIRST_BATCH_RECORDS` per partition (Kafka's
  default ``max.poll.records``: nothing is known of its records yet);
* after each batch that read records, the cap is scaled by the batch's time against the
  target (a fifth of the batch deadline): after a batch that was full and fast, grown by
  the square root of how far below the target it ended; cut in proportion after a slow
  one, whether it was full or not (a batch slow only because it opened or restored its
  stores costs a few smaller batches);
* it never exceeds ``max.poll.records`` and never falls below one record;
* a batch's time is measured without its commit (the stream thread's ``seconds``): a
  commit costs what the store costs per table, whatever the records, and on a slow
  object store counting it would shrink the batches to a record each while the
  commits stayed as slow;
* what else a batch costs whatever its records (a Spark job, reads of slow storage) is
  told apart from the records' cost by a line fitted through the kind's last batches
  (time against records read): a cut aims at the target with the fixed part taken off,
  and when the fixed part alone reaches the target the records' part is aimed at the
  target instead, never below the cap (fewer records would not make the batch shorter,
  only the backlog longer); slow batches that all read as many records cannot be told
  apart so, and after a few of them the next one reads twice as much (a probe: if the
  records were the cost, the line then says so).

So a batch ends well inside its deadline whatever the data; with Kafka's defaults nothing
changes, and a large ``max.poll.records`` is reached in a few growing batches from 1,000.

What a thread learnt outlives it: the caps and the last batches of each kind are kept in a
small file of the instance's ``state.dir`` (``batch-sizes-<transactional id>.json``,
rewritten after each batch that read records), and the thread started after a restart, a crash or a
rejoin begins from them. Its first batch after a restart otherwise read a whole
``max.poll.records`` of the backlog the restart left, and ran ten times the target before
the first commit (a measured 56 s, against batches of 5 s, on an object store). That
first batch reads a quarter of the recalled cap (:data:`START_SHARE`): it opens the tasks
and restores their stores, and the instance has recovered only once it commits (a
restart's first batch of 2,500 records took 31 s of a 50 s recovery); the batch after it
reads the whole recalled cap again. So does a batch that opens tasks a running thread did
not have (a rebalance moved them to it): it reads a quarter of its kind's cap (of the first
batch's, for a kind it never ran), and the cap is left as it was (the batch's time was the
tasks' opening). While it opens them, the
group's next rebalance waits for it: an instance that came back after a pause waited 25 s
for the other's batch that opened four tasks and read a whole cap.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from collections import deque
from collections.abc import Iterable, Sequence

log = logging.getLogger(__name__)

# Why a square root: were a record's cost the same in any batch, the next batch would end
# near the target however far it grew; but it can grow with the batch (caches overflow,
# stores flush): a count over new keys once cost 0.6 ms a line in batches of 3,400 lines
# and 2.5 ms in batches of 10,000, so a jump of seven times from a fast batch ran to 26 s of
# a 30 s deadline. Grown by the square root of the room left (``target / seconds``), a
# batch whose records cost in proportion to its size (its time the square of it) ends at
# the target, never past it, and one whose records cost the same closes half the distance
# (in ratio) each time. A batch's fixed cost (a Spark job, a commit) counts as its records'
# at first, which only makes the growth more careful. A word count raising
# max.poll.records to 25,000 lines a partition reaches it in its third batch (1,000, then
# about 6,000) where doubling took six.

#: How many of a kind's last batches its fixed cost is fitted through.
RECENT_BATCHES = 8

#: A full batch this far below the target grows by a record at least (the square root
#: rounded down left a cap of 1 at 1 for ever below four times the target).
GROW_AT_LEAST_RATIO = 1.25

#: After this many slow batches of one size in a row, the next one reads twice as much:
#: their fixed cost cannot be told from their records' cost without another size.
PROBE_AFTER = 3

#: What a kind of batch reads of each partition before anything was measured.
FIRST_BATCH_RECORDS = 1000
#: What a restarted thread's first batch of a kind reads of the cap it recalled.
START_SHARE = 0.25
#: The share of the batch deadline a batch aims at.
TARGET_SHARE = 0.2


class BatchSizer:
    """Caps the records each batch reads per partition (see the module).

    Args:
        max_poll_records: the upper bound (``max.poll.records``).
        deadline_ms: the longest a batch may run (``max.poll.interval.ms``, and
            ``transaction.timeout.ms`` when a batch is a transaction).
        name: names the thread in log lines.
        memory: the file the sizes are kept in across restarts (None: not kept).
    """

    def __init__(
        self, max_poll_records: int, deadline_ms: int, *, name: str, memory: str | None = None
    ) -> None:
        self.max_poll_records = max_poll_records
        self.deadline_s = deadline_ms / 1000
        self.target_s = self.deadline_s * TARGET_SHARE
        self.name = name
        self.memory = memory
        self._caps: dict[frozenset[str], int] = {}
        #: The last batches of each kind: (records of the fullest partition, seconds).
        self._recent: dict[frozenset[str], deque[tuple[int, float]]] = {}
        #: The fixed cost last fitted of each kind (kept while its last batches are alike).
        self._fixed: dict[frozenset[str], float] = {}
        #: The caps chosen, in order, for each kind (what a person tuning it looks at).
        self.history: dict[frozenset[str], list[int]] = {}
        #: The caps recalled, resumed after each kind's first batch (see the module).
        self._recalled: dict[frozenset[str], int] = {}
        #: The kinds whose batch in flight reads a share of the cap (it opens tasks).
        self._shared: set[frozenset[str]] = set()
        self._recall()

    def cap(self, topics: Iterable[str], *, opening: bool = False) -> int:
        """The records per partition the next batch reading ``topics`` may read
        (``opening``: it opens tasks; a share, see the module, unless it is a new
        application's first batch)."""
        kind = frozenset(topics)
        cap = self._caps.get(kind)
        ran = bool(self._caps or self._recalled)  # not a new application's first batch
        if cap is None:
            cap = self._caps[kind] = min(self.max_poll_records, FIRST_BATCH_RECORDS)
        if opening and ran and kind not in self._recalled:  # a recalled cap is shared
            self._shared.add(kind)
            return max(1, int(cap * START_SHARE))
        self._shared.discard(kind)
        return cap

    def measured(
        self, topics: Iterable[str], cap: int, fullest: int, seconds: float, *, opened: bool = False
    ) -> None:
        """A batch reading ``topics`` with ``cap`` read ``fullest`` records of its fullest
        partition and took ``seconds`` (``opened``: it opened tasks, restoring their stores):
        size the next one."""
        if fullest <= 0 or seconds <= 0:
            return
        kind = frozenset(topics)
        if kind in self._shared:  # it opened tasks: on with the cap it shared, its time
            self._shared.discard(kind)  # the tasks' opening, not the records'
            return
        recent = self._recent.setdefault(kind, deque(maxlen=RECENT_BATCHES))
        if not opened:  # a time that was the tasks' opening tells nothing of the records
            recent.append((fullest, seconds))
        recalled = self._recalled.pop(kind, None)
        if recalled is not None and opened:  # the start's batch: on from what was learnt
            self._caps[kind] = recalled
            return
        try:
            self._size_next(kind, cap, fullest, seconds, opened)
        finally:
            self._keep()

    def _size_next(
        self, kind: frozenset[str], cap: int, fullest: int, seconds: float, opened: bool
    ) -> None:
        recent = self._recent[kind]
        ratio = self.target_s / seconds
        if ratio >= 1 and fullest < cap:
            return  # the input ran out before the cap: nothing learnt about a bigger batch
        basis = cap if ratio >= 1 else min(cap, fullest)
        fitted = fixed_cost(recent)
        if ratio >= 1:
            # the room left for the records, their own time against it (a fixed cost
            # known from batches of two sizes is no record's: 20 records of a batch costing
            # 3 s before any of them fill a 4 s target five times over, not 1.3)
            fixed = fitted if fitted is not None and fitted < seconds else 0.0
            new = int(basis * math.sqrt((self.target_s - fixed) / (seconds - fixed)))
            if ratio >= GROW_AT_LEAST_RATIO:
                new = max(new, basis + 1)  # a cap of a few records still grows
        elif fitted is None and len(recent) >= PROBE_AFTER and basis < self.max_poll_records:
            # as many slow batches of one size in a row: a line needs two sizes to tell
            # a fixed cost from the records' (a cap cut to one record stayed there for
            # ever, each batch of eight records taking 6 s of commits and reads)
            new = basis * 2
        else:
            fixed = self._fixed[kind] = self._fixed.get(kind, 0.0) if fitted is None else fitted
            if fixed >= self.target_s:
                # the fixed cost alone reaches the target: fewer records would not make
                # the batch shorter, only the backlog longer; the records' own part is
                # aimed at the target instead (never below the cap: a batch reads more
                # for the same fixed cost)
                variable = seconds - fixed
                new = basis * 2 if variable <= 0 else int(basis * self.target_s / variable)
                new = max(basis, new)
            else:
                new = int(basis * (self.target_s - fixed) / (seconds - fixed))
            if seconds < self.deadline_s or opened:
                # a batch inside its deadline is cut by half at most: one slowed by a
                # passing fault (a storage error's retries, a paused disk) is no measure of
                # its records, and cut to its ratio (a batch of 40 records taking 19.6 s
                # of a 20 s deadline, 2 records after it) the next batches read almost
                # nothing while the backlog grows; batches that stay slow halve again. So
                # is one that opened tasks, whatever it took: a restart's first batch,
                # 28 s of opening and restoring, left a cap of one record
                new = max(new, basis // 2)
        new = max(1, min(self.max_poll_records, new))
        if new == self._caps.get(kind):
            return
        self._caps[kind] = new
        self.history.setdefault(kind, []).append(new)
        level = logging.INFO if ratio < 1 else logging.DEBUG
        log.log(
            level,
            "[thread %s] batches reading %s: %d records per partition from now on (a batch of "
            "%d took %.1f s, aiming at %.1f s)",
            self.name,
            sorted(kind),
            new,
            fullest,
            seconds,
            self.target_s,
        )

    def _keep(self) -> None:
        """Write the caps and the last batches to :attr:`memory` (a full or read-only disk
        only costs the memory: the next start learns again)."""
        if self.memory is None:
            return
        kinds = [
            {
                "topics": sorted(kind),
                "cap": self._recalled.get(kind, cap),  # not the start's share
                "recent": list(self._recent.get(kind, ())),
                "fixed": self._fixed.get(kind),
            }
            for kind, cap in self._caps.items()
        ]
        temp = f"{self.memory}.tmp"
        try:
            os.makedirs(os.path.dirname(self.memory), exist_ok=True)
            with open(temp, "w", encoding="utf-8") as f:
                json.dump({"version": 1, "kinds": kinds}, f)
            os.replace(temp, self.memory)
        except OSError as exc:
            log.debug("[thread %s] batch sizes not kept: %s", self.name, exc)
            with contextlib.suppress(OSError):
                os.remove(temp)

    def _recall(self) -> None:
        """Start from what :meth:`_keep` wrote (anything unreadable: from nothing)."""
        if self.memory is None:
            return
        try:
            with open(self.memory, encoding="utf-8") as f:
                kinds = json.load(f)["kinds"]
            for entry in kinds:
                kind = frozenset(str(t) for t in entry["topics"])
                recalled = max(1, min(self.max_poll_records, int(entry["cap"])))
                self._recalled[kind] = recalled
                self._caps[kind] = max(1, int(recalled * START_SHARE))
                recent = [(int(n), float(t)) for n, t in entry["recent"]]
                self._recent[kind] = deque(recent, maxlen=RECENT_BATCHES)
                if entry.get("fixed") is not None:
                    self._fixed[kind] = float(entry["fixed"])
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.info("[thread %s] batch sizes of the last run not read (%s)", self.name, exc)
            self._caps.clear()
            self._recent.clear()
            self._fixed.clear()
            self._recalled.clear()
            return
        if self._caps:
            log.info(
                "[thread %s] batch sizes of the last run: %s",
                self.name,
                ", ".join(f"{sorted(k)} {c}" for k, c in sorted(self._recalled.items(), key=str)),
            )


def fixed_cost(batches: Sequence[tuple[int, float]]) -> float | None:
    """The seconds a batch costs whatever its records: the intercept of the least-squares
    line through ``batches`` ((records, seconds) pairs), at least 0 and at most the
    quickest batch's time; None while their sizes do not differ (nothing tells the parts
    apart: the last estimate stands, at first 0, every second counted as the records')."""
    sizes = {n for n, _ in batches}
    if len(sizes) < 2:
        return None
    mean_n = sum(n for n, _ in batches) / len(batches)
    mean_t = sum(t for _, t in batches) / len(batches)
    spread = sum((n - mean_n) ** 2 for n, _ in batches)
    slope = sum((n - mean_n) * (t - mean_t) for n, t in batches) / spread
    if slope <= 0:  # bigger batches were not slower: nothing shows a record's cost
        return min(t for _, t in batches)
    quickest = min(t for _, t in batches)
    return max(0.0, min(mean_t - slope * mean_n, quickest))
