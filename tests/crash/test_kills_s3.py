"""The word count SIGKILLed five times with its storage root on S3 (an S3-compatible server
started by the test) ends exactly as the reference run: the transaction and group logs
append with the store's conditional writes, topics, snapshots and staged files live in the
bucket, and every run reaches it through ``storage.options.*`` keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.crash.harness import crashtest
from tests.crash.conftest import FAST_JVM, RUN_CONFIG, example
from tests.s3server import S3Server, s3_root, s3_server

__all__ = ["s3_root", "s3_server"]


@pytest.mark.slow
def test_five_kills_with_the_root_on_s3_leave_exactly_the_reference(
    s3_server: S3Server, s3_root: str, tmp_path: Path
) -> None:
    report = crashtest(
        example("wordcount"),
        generate=300,
        kills=5,
        seed=11,
        workdir=tmp_path,
        config={
            **RUN_CONFIG,
            **s3_server.config(),
            "max.poll.records": "2",
            "topics.root": s3_root,
            "statestore.snapshot.interval": "3",
        },
        env=FAST_JVM,
    )
    print(report.text())
    assert report.exactly_once, report.text()
    assert len(report.kills) == 5 and report.restarts == 5
    assert report.duplicates == report.losses == 0
    assert report.records_out == report.records_expected > 0
    assert report.stores and all(s["ok"] for s in report.stores)
