"""The streams-eos command line, run as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from streams.cli import COMMANDS, main
from tests.clitools import cli


def test_topics_create_list_describe_alter_delete(
    root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(
            [
                "topics",
                "--root",
                root,
                "--create",
                "--topic",
                "orders",
                "--partitions",
                "3",
                "--config",
                "cleanup.policy=compact",
            ]
        )
        == 0
    )
    assert main(["topics", "--root", root, "--create", "--topic", "audit"]) == 0
    assert main(["topics", "--root", root, "--list"]) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == ["audit", "orders"]
    assert (
        main(["topics", "--root", root, "--alter", "--topic", "orders", "--partitions", "4"]) == 0
    )
    assert main(["topics", "--root", root, "--describe", "--topic", "orders"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-5] == (
        "Topic: orders\tPartitionCount: 4\tFiles: 0\tBytes: 0\tAwaitingVacuum: 0\t"
        "Configs: cleanup.policy=compact"
    )
    assert out[-1] == (
        "\tTopic: orders\tPartition: 3\tLogStartOffset: 0\tLogEndOffset: 0\tRecords: 0\t"
        "Files: 0\tBytes: 0"
    )
    assert main(["topics", "--root", root, "--delete", "--topic", "audit"]) == 0
    assert TopicAdmin(root).list() == ["orders"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["topics", "--create", "--topic", "bad name"], "illegal characters ' '"),
        (["topics", "--create", "--topic", "t", "--partitions", "0"], "out of range"),
        (["topics", "--describe", "--topic", "nope"], "topic 'nope' does not exist"),
        (["topics", "--delete"], "needs --topic"),
        (["get-offsets", "--topic", "nope"], "does not exist"),
        (["console-consume", "--topic", "nope"], "does not exist"),
    ],
)
def test_errors_are_one_line_and_non_zero(
    root: str, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*args, "--root", root]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]
    assert "Traceback" not in err[0]


def test_verbose_adds_the_stack_trace(root: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topics", "--root", root, "--describe", "--topic", "nope", "--verbose"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_missing_root_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("STREAMS_ROOT", raising=False)
    with pytest.raises(SystemExit) as exc:
        main(["topics", "--list"])
    assert exc.value.code == 2
    assert "pass --root PATH or set STREAMS_ROOT" in capsys.readouterr().err


def test_produce_then_consume_with_keys_partitions_offsets(root: str) -> None:
    TopicAdmin(root).create("lines", 3)
    lines = "".join(f"user{i % 4}:line {i}\n" for i in range(20))
    done = cli(
        root,
        "console-produce",
        "--topic",
        "lines",
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
        stdin=lines,
    )
    assert done.returncode == 0, done.stderr
    out = cli(
        root,
        "console-consume",
        "--topic",
        "lines",
        "--from-beginning",
        "--property",
        "print.key=true",
        "--property",
        "print.partition=true",
        "--property",
        "print.offset=true",
        "--timeout-ms",
        "300",
    )
    assert out.returncode == 0, out.stderr
    rows = [line.split("\t") for line in out.stdout.splitlines()]
    assert len(rows) == 20
    assert "Processed a total of 20 messages" in out.stderr
    reader = TopicReader(root)
    for partition, offset, key, value in rows:
        rec = reader.records("lines", int(partition), int(offset), 1)[0]
        assert (rec.key, rec.value) == (key.encode(), value.encode())
    by_partition: dict[str, list[int]] = {}
    for partition, offset, _, _ in rows:
        by_partition.setdefault(partition, []).append(int(offset))
    for offsets in by_partition.values():  # offset order within each partition
        assert offsets == list(range(len(offsets)))


def test_consume_max_messages_and_value_only(root: str) -> None:
    TopicAdmin(root).create("t", 1)
    cli(root, "console-produce", "--topic", "t", stdin="a\nb\nc\n")
    out = cli(root, "console-consume", "--topic", "t", "--from-beginning", "--max-messages", "2")
    assert out.returncode == 0
    assert out.stdout == "a\nb\n"


def test_a_negative_max_messages_is_no_limit_as_kafka(root: str) -> None:
    TopicAdmin(root).create("t", 1)
    cli(root, "console-produce", "--topic", "t", stdin="a\nb\nc\n")
    out = cli(
        root,
        "console-consume",
        "--topic",
        "t",
        "--from-beginning",
        "--max-messages",
        "-1",
        "--timeout-ms",
        "300",
    )
    assert out.returncode == 0
    assert out.stdout == "a\nb\nc\n"


def test_an_internal_topic_is_refused_without_force(root: str) -> None:
    admin = TopicAdmin(root)
    admin.create("__internal", 1)
    done = cli(root, "console-produce", "--topic", "__internal", stdin="x\n")
    assert done.returncode == 1
    assert "__internal is an internal topic" in done.stderr and "--force" in done.stderr
    assert TopicReader(root).end_offsets("__internal") == {0: 0}
    forced = cli(root, "console-produce", "--topic", "__internal", "--force", stdin="x\n")
    assert forced.returncode == 0, forced.stderr
    assert TopicReader(root).end_offsets("__internal") == {0: 1}


def test_consume_without_from_beginning_starts_at_the_end(root: str) -> None:
    TopicAdmin(root).create("t", 1)
    cli(root, "console-produce", "--topic", "t", stdin="old\n")
    out = cli(root, "console-consume", "--topic", "t", "--timeout-ms", "200")
    assert out.returncode == 0 and out.stdout == ""


def test_produce_without_separator_fails_naming_the_line(root: str) -> None:
    TopicAdmin(root).create("t", 1)
    done = cli(
        root,
        "console-produce",
        "--topic",
        "t",
        "--property",
        "parse.key=true",
        stdin="k\tv\nno separator here\n",
    )
    assert done.returncode == 1
    assert "line 2 has no key separator" in done.stderr
    assert TopicReader(root).end_offsets("t") == {0: 1}  # the good line before it landed


def test_a_long_line_is_read_in_linear_time_and_sized_as_kafka(root: str) -> None:
    TopicAdmin(root).create("t", 1)
    line = "x" * 3_000_000 + "\nsmall\n"
    refused = cli(root, "console-produce", "--topic", "t", stdin=line)
    assert refused.returncode == 1
    assert "larger than max_request_size (1048576)" in refused.stderr
    assert "--producer-property max.request.size=BYTES" in refused.stderr
    done = cli(
        root,
        "console-produce",
        "--topic",
        "t",
        "--producer-property",
        "max.request.size=4000000",
        stdin=line,
    )
    assert done.returncode == 0, done.stderr
    values = [r.value for r in TopicReader(root).records("t", 0, 0)]
    assert [len(v or b"") for v in values] == [3_000_000, 5]
    bad = cli(root, "console-produce", "--topic", "t", "--producer-property", "acks=all")
    assert bad.returncode == 1 and "unknown --producer-property 'acks'" in bad.stderr


def test_an_empty_key_separator_is_named(root: str) -> None:
    TopicAdmin(root).create("t", 1)
    done = cli(
        root,
        "console-produce",
        "--topic",
        "t",
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=",
        stdin="k:v\n",
    )
    assert done.returncode == 1
    assert "key.separator is empty" in done.stderr and "unexpected" not in done.stderr


def test_bad_record_names_topic_partition_offset(root: str) -> None:
    TopicAdmin(root).create("t", 1)
    cli(root, "console-produce", "--topic", "t", stdin="12345678\nabc\n")
    out = cli(
        root,
        "console-consume",
        "--topic",
        "t",
        "--from-beginning",
        "--value-deserializer",
        "long",
        "--timeout-ms",
        "200",
    )
    assert out.returncode == 1
    assert "topic=t partition=0 offset=1" in out.stderr


def test_get_offsets_by_time_is_first_offset_at_or_after(root: str) -> None:
    TopicAdmin(root).create("events", 3)
    producer = Producer(root)
    stamps = {
        0: [1000, 3000, 2000, 4000, 2500],  # not monotonic, as CreateTime may be
        1: [500, 600],
        2: [5000, 1000, 7000],
    }
    for partition, times in stamps.items():
        for i, ts in enumerate(times):
            producer.send("events", b"k", b"%d" % i, timestamp=ts, partition=partition)
            if i == 1:
                producer.flush()  # spread over several files
    producer.flush()
    for ts in [0, 1000, 2001, 2600, 4500, 6999, 7001]:
        out = cli(root, "get-offsets", "--topic", "events", "--time", str(ts))
        assert out.returncode == 0, out.stderr
        got = dict(line.rsplit(":", 1) for line in out.stdout.split())
        for partition, times in stamps.items():
            # Kafka's rule: the first offset whose timestamp >= ts; none -> log-end offset.
            want = next((i for i, t in enumerate(times) if t >= ts), len(times))
            assert got[f"events:{partition}"] == str(want), (ts, partition)


def test_get_offsets_latest_earliest_and_partitions(root: str) -> None:
    TopicAdmin(root).create("t", 2)
    producer = Producer(root)
    for i in range(3):
        producer.send("t", None, b"%d" % i, partition=1)
    producer.flush()
    assert cli(root, "get-offsets", "--topic", "t").stdout == "t:0:0\nt:1:3\n"
    assert cli(root, "get-offsets", "--topic", "t", "--time", "-2").stdout == "t:0:0\nt:1:0\n"
    out = cli(root, "get-offsets", "--topic", "t", "--partitions", "1")
    assert out.stdout == "t:1:3\n"


def test_a_command_imports_only_what_it_needs(root: str) -> None:
    """``get-offsets`` imports its own module, not Spark, the topology layer or the other
    commands (each command's imports wait until it runs), and ``--help`` still lists all."""
    TopicAdmin(root).create("events", 2)
    code = (
        "import sys; from streams.cli import main; main(['get-offsets', '--topic', 'events']); "
        "print(sorted(m for m in sys.modules if m.startswith(('streams.cli.', 'pyspark', "
        "'topology', 'statestores', 'prometheus_client'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "STREAMS_ROOT": root},
        check=True,
    )
    assert out.stdout.splitlines() == ["events:0:0", "events:1:0", "['streams.cli.offsets']"]
    listed = cli(root, "--help").stdout
    for command in COMMANDS:
        assert f"    {command}" in listed, command
    assert "invalid choice: 'nope'" in cli(root, "nope").stderr
