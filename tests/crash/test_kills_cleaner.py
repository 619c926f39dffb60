"""Five kills while the log cleaner runs every second: retention checks, repartition
purges, merges of small files, changelog compaction, vacuums after two seconds and the
cleanup of Delta log commits as soon as a checkpoint covers them. The outputs still hold
exactly the reference, and the cleaning really happened."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from streams.crash.harness import crashtest
from tests.crash.conftest import FAST_JVM, RUN_CONFIG, example

AGGRESSIVE = {
    **RUN_CONFIG,
    "max.poll.records": "2",
    "num.stream.threads": "2",  # the repartition topic goes through storage: purged
    "statestore.snapshot.interval": "3",
    "log.retention.check.interval.ms": "1000",
    "log.cleaner.backoff.ms": "1000",
    "repartition.purge.interval.ms": "1000",
    "log.segment.delete.delay.ms": "2000",
    "log.delta.retention.ms": "60000",  # the least allowed
}


@pytest.mark.slow
def test_five_kills_with_the_log_cleaner_running_every_second(tmp_path: Path) -> None:
    report = crashtest(
        example("wordcount"),
        generate=300,
        kills=5,
        seed=23,
        workdir=tmp_path,
        config=AGGRESSIVE,
        env=FAST_JVM,
    )
    print(report.text())  # the figures, shown with -s
    assert report.exactly_once, report.text()
    assert len(report.kills) == 5 and report.restarts == 5
    assert report.duplicates == report.losses == 0
    assert report.records_out == report.records_expected > 0
    assert report.stores and all(s["ok"] for s in report.stores)
    root = str(tmp_path / "root")
    admin = TopicAdmin(root)
    reader = TopicReader(root)
    (repartition,) = [t for t in admin.list() if t.endswith("-repartition")]
    assert any(s > 0 for s in reader.beginning_offsets(repartition).values()), "not purged"
    rewritten = {p.name.split("-")[0] for p in Path(root, "topics").rglob("*.parquet")}
    assert {"merged", "compacted"} <= rewritten, rewritten
