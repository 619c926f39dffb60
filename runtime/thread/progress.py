"""What a stream thread tells about each batch it ran (Spark's ``StreamingQueryProgress``
in this runtime's terms)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class BatchProgress:
    """One batch of one stream thread.

    Attributes:
        thread: the thread's transactional id.
        batch_id: Spark's batch id.
        batches: the batches the thread has run (this one included).
        records_in: records the batch read from its input topics.
        records_out: records it wrote to output topics (not repartition or changelog
            topics).
        lag: records left in the thread's input partitions after it.
        commit_ms: its commit phase (ms).
        batch_ms: the whole batch (ms).
    """

    thread: str
    batch_id: int
    batches: int
    records_in: int
    records_out: int
    lag: int
    commit_ms: float
    batch_ms: float

    def as_dict(self) -> dict[str, Any]:
        """The fields as a dict (for JSON)."""
        return asdict(self)

    def line(self) -> str:
        """One line for a person watching a run."""
        return (
            f"batch {self.batch_id}: in {self.records_in:,} out {self.records_out:,} "
            f"lag {self.lag:,} commit {self.commit_ms:.0f} ms batch {self.batch_ms:.0f} ms"
        )
