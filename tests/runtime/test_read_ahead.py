"""A log read from far behind is read ahead, several versions at once, and applies to
the same index as one read version by version; a bounded refresh stops where it is told,
and a damaged version met while reading ahead is reported as it is when read alone."""

from __future__ import annotations

import threading
import time

import pytest

from common.errors import StorageError
from runtime.storage import delta_log, topic_log
from runtime.storage.delta_log import LogDamageError, log_path
from runtime.storage.producer import Producer
from runtime.storage.topic_log import TopicLog
from runtime.storage.topics import TopicAdmin


@pytest.fixture(autouse=True)
def _no_snapshots(monkeypatch: pytest.MonkeyPatch) -> None:
    """The logs here are read from their first version: no index snapshot in between."""
    monkeypatch.setattr(topic_log, "SNAPSHOT_EVERY", 1_000)


def _commits(admin: TopicAdmin, n: int) -> None:
    admin.create("t", 3)
    producer = Producer(admin)
    for i in range(n):
        producer.send("t", b"k%d" % i, b"v%d" % i, partition=i % 3)
        producer.flush()


def _fresh(admin: TopicAdmin) -> TopicLog:
    return TopicLog(admin.root, "t", admin.table_path("t"))


def test_a_log_far_behind_is_read_ahead_into_the_same_index(
    admin: TopicAdmin, monkeypatch: pytest.MonkeyPatch
) -> None:
    _commits(admin, 60)
    busy, peak, lock = [0], [0], threading.Lock()
    read = delta_log.read_entry

    def slow_read(root, table, version):  # type: ignore[no-untyped-def]
        with lock:
            busy[0] += 1
            peak[0] = max(peak[0], busy[0])
        try:
            time.sleep(0.01)  # a round trip to a store
            return read(root, table, version)
        finally:
            with lock:
                busy[0] -= 1

    monkeypatch.setattr(topic_log, "read_entry", slow_read)
    index = _fresh(admin).refresh()
    assert index.version == 60 and index.end_offsets() == {0: 20, 1: 20, 2: 20}
    assert peak[0] >= 8  # read several at once
    one_by_one = _fresh(admin)
    one_by_one_index = one_by_one.refresh(upto=1)
    for version in range(2, 61):
        one_by_one_index = one_by_one.refresh(upto=version)
    assert one_by_one_index.to_json() == index.to_json()


def test_a_bounded_refresh_reads_no_further(admin: TopicAdmin) -> None:
    _commits(admin, 40)
    log = _fresh(admin)
    assert log.refresh(upto=17).version == 17
    assert [e.version for e in log.last_entries] == list(range(0, 18))
    assert log.refresh().version == 40
    assert [e.version for e in log.last_entries] == list(range(18, 41))


def test_a_damaged_version_read_ahead_is_reported_by_its_version(admin: TopicAdmin) -> None:
    _commits(admin, 30)
    path = log_path(admin.root, admin.table_path("t"), 20)
    admin.root.write_bytes(path, b'{"commitInfo": {}}\n{"add": {"path": ')  # garbage
    with pytest.raises((LogDamageError, StorageError), match="20"):
        _fresh(admin).refresh()
