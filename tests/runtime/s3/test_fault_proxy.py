"""The fault-injecting S3 proxy in front of the S3-compatible test server: each kind of
fault does what it says (and a lost answer's write did reach the store); then the
ambiguous commit: the answers of a successful conditional write of a transaction log and
of a topic commit are lost, and the application commits nothing twice and loses nothing."""

from __future__ import annotations

import json
import logging
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.config
import botocore.exceptions
import pytest
from pyspark.sql import SparkSession

from runtime.app.app import StreamsApp
from runtime.storage.committer import TopicCommitter
from runtime.storage.compaction import ChangelogCompactor
from runtime.storage.fs import register_storage_options
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.txn.coordinator import TransactionCoordinator
from streams.crash.s3proxy import FaultProxy, FaultRule
from tests.examples.harness import load_example
from tests.s3server import ACCESS_KEY, REGION, SECRET_KEY, S3Server


@pytest.fixture
def proxy(s3_server: S3Server) -> Iterator[FaultProxy]:
    with FaultProxy(s3_server.endpoint, seed=7, timeout_s=1.0) as running:
        yield running


def client(endpoint: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
        config=botocore.config.Config(
            retries={"total_max_attempts": 1, "mode": "standard"}, read_timeout=5
        ),
    )


def test_each_fault_kind_does_what_it_says(s3_server: S3Server, proxy: FaultProxy) -> None:
    bucket = s3_server.new_bucket()
    via, direct = client(proxy.endpoint), client(s3_server.endpoint)
    via.put_object(Bucket=bucket, Key="a", Body=b"1")  # no rule: forwarded
    for kind, code in (("500", "InternalError"), ("503", "SlowDown")):
        proxy.add(FaultRule(kind, method="GET", count=1))  # type: ignore[arg-type]
        with pytest.raises(botocore.exceptions.ClientError, match=code):
            via.get_object(Bucket=bucket, Key="a")
    for kind in ("reset", "timeout"):
        proxy.add(FaultRule(kind, method="GET", count=1))  # type: ignore[arg-type]
        with pytest.raises(
            (botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError)
        ):
            via.get_object(Bucket=bucket, Key="a")
    proxy.add(FaultRule("latency", method="GET", count=1, latency_ms=400))
    began = time.monotonic()
    assert via.get_object(Bucket=bucket, Key="a")["Body"].read() == b"1"
    assert time.monotonic() - began >= 0.4
    proxy.add(FaultRule("lose-answer", method="PUT", path="/b$", count=1))
    with pytest.raises((botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError)):
        via.put_object(Bucket=bucket, Key="b", Body=b"2")
    assert direct.get_object(Bucket=bucket, Key="b")["Body"].read() == b"2"  # it landed
    assert proxy.summary() == {
        k: 1 for k in ("500", "503", "reset", "timeout", "latency", "lose-answer")
    }
    assert proxy.injected[-1].status == 200  # the store's answer that was lost


def test_the_proxy_counts_requests_by_kind(s3_server: S3Server, proxy: FaultProxy) -> None:
    bucket = s3_server.new_bucket()
    via = client(proxy.endpoint)
    via.put_object(Bucket=bucket, Key="r/topics/t/_delta_log/0.json", Body=b"{}")
    via.put_object(Bucket=bucket, Key="r/topics/t/partition=0/f.parquet", Body=b"1")
    via.get_object(Bucket=bucket, Key="r/topics/t/partition=0/f.parquet")["Body"].read()
    via.head_object(Bucket=bucket, Key="r/topics/t/_delta_log/0.json")
    via.list_objects_v2(Bucket=bucket, Prefix="r/_transactions/")
    via.list_objects_v2(Bucket=bucket, Prefix="r/_transactions/")
    assert dict(proxy.requests) == {
        "PUT _delta_log": 1,
        "PUT data": 1,
        "GET data": 1,
        "HEAD _delta_log": 1,
        "LIST _transactions": 2,
    }


def test_a_burst_of_connections_is_accepted_at_once() -> None:
    """Clients open dozens of connections at once (delta-rs opening a table): none waits
    for a connect retry (Python's default backlog of 5 made 161 of 400 wait a second or
    more, and a chaos run's table opens time out at 30 s)."""
    with FaultProxy("http://127.0.0.1:9") as proxy:  # no request is sent: no target needed
        assert proxy._server is not None
        host, port = proxy._server.server_address[:2]
        opened: list[socket.socket] = []
        slow: list[float] = []

        def connect() -> None:
            began = time.monotonic()
            opened.append(socket.create_connection((str(host), int(port)), timeout=5))
            if time.monotonic() - began > 0.9:  # Linux retries a dropped SYN after 1 s
                slow.append(time.monotonic() - began)

        threads = [threading.Thread(target=connect) for _ in range(400)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for sock in opened:
            sock.close()
    assert len(opened) == 400 and not slow, f"{len(slow)} connects waited: {max(slow or [0]):.1f} s"


def test_a_put_the_store_refuses_is_sent_again(s3_server: S3Server, proxy: FaultProxy) -> None:
    """A plain PUT (a heartbeat, a marker, a staged data file) answered 503 SlowDown more
    often than the SDK's own retries is sent again with backoff: the write lands."""
    root = f"s3://{s3_server.new_bucket()}/root"
    register_storage_options(root, {**s3_server.options(), "AWS_ENDPOINT_URL": proxy.endpoint})
    store = TopicAdmin(root).root
    proxy.add(FaultRule("503", method="PUT", count=6))
    store.write_bytes(store.path("small", "heartbeat"), b"1")
    store.write_file_bytes(store.path("data", "part-0.parquet"), b"22")
    assert proxy.summary() == {"503": 6}
    assert store.read_bytes(store.path("small", "heartbeat")) == b"1"
    assert store.read_bytes(store.path("data", "part-0.parquet")) == b"22"


def test_a_data_file_the_store_refuses_to_read_is_read_again(
    s3_server: S3Server, proxy: FaultProxy
) -> None:
    """Reads of a topic's data files answered 503 more often than the SDK tries (its retry
    quota drains in a storm): the reader reads again, every record comes back once."""
    root = f"s3://{s3_server.new_bucket()}/root"
    register_storage_options(root, {**s3_server.options(), "AWS_ENDPOINT_URL": proxy.endpoint})
    admin = TopicAdmin(root)
    admin.create("t", 1)
    producer = Producer(admin)
    for n in range(10):
        producer.send("t", f"k{n}".encode(), f"v{n}".encode())
    producer.flush()
    refused = proxy.add(
        FaultRule("503", method="GET", path=r"/topics/t/partition.*\.parquet", count=6)
    )
    table = TopicReader(admin).read("t", 0, 0)
    assert refused.hits == 6
    assert table.column("value").to_pylist() == [f"v{n}".encode() for n in range(10)]


def test_a_topic_the_store_refuses_to_open_is_opened_again(
    s3_server: S3Server, proxy: FaultProxy
) -> None:
    """Opening a topic's table for a commit (its log read) answered 503 more often than the
    SDK tries: the open is a read, retried with backoff inside the commit, which lands
    (it failed its batch, and the thread waited out the store, before)."""
    root = f"s3://{s3_server.new_bucket()}/root"
    register_storage_options(root, {**s3_server.options(), "AWS_ENDPOINT_URL": proxy.endpoint})
    admin = TopicAdmin(root)
    admin.create("t", 1)
    refused = proxy.add(FaultRule("503", method="GET", path=r"/topics/t/_delta_log/", count=12))
    committer = TopicCommitter(admin, "t")
    assert committer.table().version() >= 0
    assert refused.hits == 12
    producer = Producer(admin)
    producer.send("t", b"k", b"v")
    producer.flush()
    assert TopicReader(admin).read("t", 0, 0).column("value").to_pylist() == [b"v"]


def test_the_data_files_of_one_read_are_read_side_by_side(
    s3_server: S3Server, proxy: FaultProxy
) -> None:
    """A read across many data files (a restore replays a changelog of one small file per
    batch) asks the store for several at once, and still returns every record once, in
    offset order, though some of the files are refused and read again."""
    root = f"s3://{s3_server.new_bucket()}/root"
    register_storage_options(root, {**s3_server.options(), "AWS_ENDPOINT_URL": proxy.endpoint})
    admin = TopicAdmin(root)
    admin.create("t", 1)
    producer = Producer(admin)
    for n in range(16):  # one file per flush
        producer.send("t", f"k{n}".encode(), f"v{n}".encode())
        producer.flush()
    data = r"/topics/t/partition.*\.parquet"
    refused = proxy.add(FaultRule("503", method="GET", path=data, count=3))
    proxy.add(FaultRule("latency", method="GET", path=data, latency_ms=200))
    reader = TopicReader(admin)
    reader.index("t")  # the log read first: only the data files' requests below
    proxy.peak_in_flight = 0
    table = reader.read("t", 0, 0)
    assert refused.hits == 3
    assert table.column("offset").to_pylist() == list(range(16))
    assert table.column("value").to_pylist() == [f"v{n}".encode() for n in range(16)]
    assert proxy.peak_in_flight >= 4, proxy.peak_in_flight


def test_the_transaction_logs_are_read_once_each_when_listed(
    s3_server: S3Server, proxy: FaultProxy
) -> None:
    """Listing the transactions (a stable offset fetch at every start, the campaign's
    watch) reads each transactional id's log once: a listing and one log's read each."""
    root = f"s3://{s3_server.new_bucket()}/root"
    register_storage_options(root, {**s3_server.options(), "AWS_ENDPOINT_URL": proxy.endpoint})
    coordinator = TransactionCoordinator(TopicAdmin(root))
    ids = [f"app-p{n}-1" for n in range(4)]
    for tid in ids:
        coordinator.init_producer_id(tid, 60_000)
    proxy.requests.clear()
    assert TransactionCoordinator(TopicAdmin(root)).load(ids[0]) is not None
    one_log = sum(proxy.requests.values())
    proxy.requests.clear()
    listed = TransactionCoordinator(TopicAdmin(root)).list()
    assert [meta.transactional_id for meta in listed] == ids
    assert sum(proxy.requests.values()) <= 2 + len(ids) * one_log, (one_log, proxy.requests)


class WordCount:
    """The word count example on a bucket of the test server reached through the proxy:
    its topics, its input (120 lines), its configuration and what it wrote."""

    def __init__(self, s3_server: S3Server, proxy: FaultProxy, state_dir: Path) -> None:
        options = {**s3_server.options(), "AWS_ENDPOINT_URL": proxy.endpoint}
        root = f"s3://{s3_server.new_bucket()}/root"
        register_storage_options(root, options)
        self.example = example = load_example("wordcount")
        self.admin = TopicAdmin(root)
        for topic, partitions in example.TOPICS.items():
            self.admin.create(topic, partitions)
        self.lines = [line for _, line in example.generate(120)]
        producer = Producer(self.admin)
        for n, line in enumerate(self.lines):
            producer.send(example.INPUT, f"line-{n}".encode(), line.encode())
        producer.flush()
        self.config = {
            **example.CONFIG,
            **{f"storage.options.{k}": v for k, v in options.items()},
            "topics.root": root,
            "state.dir": str(state_dir),
            "commit.interval.ms": 100,
            "max.poll.records": 40,
        }

    def run(self, spark: SparkSession) -> None:
        StreamsApp(self.example.build_topology(), self.config, spark=spark).run_until_idle()

    def check_exact(self) -> None:
        """Every word's last count is its count in the input, and no count was written
        twice."""
        example, reader = self.example, TopicReader(self.admin)
        written: dict[str, list[int]] = {}
        for partition in range(example.TOPICS[example.OUTPUT]):
            table = reader.read(example.OUTPUT, partition, 0)
            for key, value in zip(
                table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True
            ):
                count = int.from_bytes(value, "big", signed=True)
                written.setdefault(key.decode(), []).append(count)
        expected = Counter(w for line in self.lines for w in example.WORD.findall(line.lower()))
        assert {w: c[-1] for w, c in written.items()} == dict(expected)
        for word, counts in written.items():
            assert counts == sorted(set(counts)), (word, counts)  # nothing committed twice


def test_the_ambiguous_commit_commits_nothing_twice_and_loses_nothing(
    spark: SparkSession, s3_server: S3Server, proxy: FaultProxy, tmp_path: Path
) -> None:
    """The answers of the first successful conditional write of a transaction log and of
    the word count's output topic are lost, and every request meets a 500, a 503 SlowDown
    or a reset now and then (about 6 %): the writers read back (each write carries its own
    token) instead of retrying blindly, transient errors are retried with backoff; the
    counts are exact and no count is written twice."""
    job = WordCount(s3_server, proxy, tmp_path / "state")
    txn_log = proxy.add(
        FaultRule(
            "lose-answer",
            method="PUT",
            path="/_transactions/.*_delta_log/0*[1-9]",
            conditional=True,
            count=1,
        )
    )
    topic_commit = proxy.add(
        FaultRule(
            "lose-answer",
            method="PUT",
            path=f"/topics/{job.example.OUTPUT}/_delta_log/0*[1-9]",
            conditional=True,
            count=1,
        )
    )
    storm = [
        proxy.add(FaultRule(k, rate=r)) for k, r in (("503", 0.03), ("500", 0.02), ("reset", 0.01))
    ]  # type: ignore[arg-type]
    job.run(spark)
    proxy.rules.clear()  # the checks below read without faults
    assert txn_log.hits == 1 and topic_commit.hits == 1
    lost = [i.status for i in proxy.injected if i.kind == "lose-answer"]
    assert lost == [200, 200]  # both writes had succeeded
    assert all(rule.hits > 0 for rule in storm), proxy.summary()
    job.check_exact()


@pytest.mark.slow  # half a minute of refusals, past every retry
def test_a_store_refusing_writes_longer_than_any_retry_is_waited_out(
    spark: SparkSession,
    s3_server: S3Server,
    proxy: FaultProxy,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every write of the output topic's data files is answered 503 SlowDown for 35 s,
    longer than the SDK's and the project's retries of each write (20 s at most): the
    batch is aborted (nothing of it committed), the thread waits and tries again, and
    once the store answers the counts are exact, none written twice."""
    job = WordCount(s3_server, proxy, tmp_path / "state")
    down = proxy.add(
        FaultRule(
            "503", method="PUT", path=f"/topics/{job.example.OUTPUT}/(?!_delta_log)", seconds=35
        )
    )
    with caplog.at_level(logging.WARNING, logger="runtime.thread.disk_full"):
        job.run(spark)
    assert down.hits > 0
    messages = [r.getMessage() for r in caplog.records]
    assert any("the storage kept failing" in m and "nothing of it committed" in m for m in messages)
    assert any("space is back (or the storage answers)" in m for m in messages), messages
    job.check_exact()


def test_the_command_runs_a_proxy_until_interrupted(s3_server: S3Server) -> None:
    command = [sys.executable, "-m", "streams.cli", "s3-proxy", "--target", s3_server.endpoint]
    bad = subprocess.run(
        [*command, "--fault", "boom:1"], capture_output=True, text=True, check=False
    )
    assert bad.returncode != 0 and "fault kind 'boom': one of 500, 503" in bad.stderr
    process = subprocess.Popen(
        [*command, "--fault", "503:1:GET"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        endpoint = line.split("listening on ")[1].split(",")[0]
        with pytest.raises(urllib.error.HTTPError, match="503"):
            urllib.request.urlopen(f"{endpoint}/any-bucket/key", timeout=10)
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    assert json.loads(err.strip().splitlines()[-1]) == {"forwarded": 0, "injected": {"503": 1}}


def test_a_compacted_file_refused_while_a_read_is_planned_is_read_again(
    s3_server: S3Server, proxy: FaultProxy
) -> None:
    """Planning a read from inside a compacted range reads the file's offset column (the
    offsets have gaps); refused by the store, that read is tried again, as a slice's is
    (a thread's start, fetching its group's positions from the compacted offsets topic,
    ended its instance on one such error)."""
    root = f"s3://{s3_server.new_bucket()}/root"
    register_storage_options(root, {**s3_server.options(), "AWS_ENDPOINT_URL": proxy.endpoint})
    admin = TopicAdmin(root)
    admin.create("c", 1, configs={"cleanup.policy": "compact"})
    producer = Producer(admin)
    for n, key in enumerate("abacabacadae"):  # a file per flush
        producer.send("c", key.encode(), f"v{n}".encode())
        producer.flush()
    done = ChangelogCompactor(admin, "c").compact(
        0, horizon=9, delete_retention_ms=0, now_ms=int(time.time() * 1000)
    )
    assert done.removed > 0
    reader = TopicReader(admin)
    reader.index("c")  # the log read first: only the data files' requests below
    refused = proxy.add(
        FaultRule("503", method="GET", path=r"/topics/c/partition.*\.parquet", count=12)
    )
    start = reader.beginning_offsets("c")[0]

    table = reader.read("c", 0, start + 1)  # from inside the compacted range
    assert refused.hits == 12  # more than the SDK retries itself
    offsets = table.column("offset").to_pylist()
    assert offsets[0] > start and offsets[-3:] == [9, 10, 11]
    assert table.column("value").to_pylist()[-3:] == [b"v9", b"v10", b"v11"]
