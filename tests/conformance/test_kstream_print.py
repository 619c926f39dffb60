"""Kafka's ``KStreamPrintTest``: ``KStream.print`` writes ``[label]: <mapper(key, value)>``
per record; the label defaults to the printed stream's node name, the mapper to
``key, value`` (``null`` for a missing key or value, as Kafka prints it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from common.errors import TopologyError
from tests.conformance.conftest import I, S
from topology import Consumed, Printed, StreamsBuilder

RECORDS = [(0, "zero"), (1, "one"), (2, "two"), (3, "three")]


def printed_lines(drive: Any, printed: Printed) -> None:
    b = StreamsBuilder()
    b.stream("in", Consumed.with_(I, S)).print(printed)
    d = drive(b.build())
    topic = d.create_input_topic("in", I, S)
    for key, value in RECORDS:
        topic.pipe_input(key, value, 0)
    d.close()


def test_print_stream_with_provided_key_value_mapper(drive: Any, tmp_path: Path) -> None:
    """KStreamPrintTest.testPrintStreamWithProvidedKeyValueMapper (to a file)"""
    path = tmp_path / "printed.txt"
    printed = (
        Printed.to_file(str(path))
        .with_key_value_mapper(lambda k, v: f"{k}, {v}")
        .with_label("test-stream")
    )
    printed_lines(drive, printed)
    assert path.read_text().splitlines() == [
        "[test-stream]: 0, zero",
        "[test-stream]: 1, one",
        "[test-stream]: 2, two",
        "[test-stream]: 3, three",
    ]


def test_print_to_standard_output_with_the_default_label_and_mapper(
    drive: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Printed.toSysOut: the label is the stream's node name, the line ``key, value``."""
    b = StreamsBuilder()
    b.stream("in", Consumed.with_(I, S)).print(Printed.to_sys_out())
    d = drive(b.build())
    topic = d.create_input_topic("in", I, S)
    topic.pipe_input(7, "seven", 0)
    topic.pipe_input(None, None, 0)
    assert capsys.readouterr().out.splitlines() == [
        "[KSTREAM-SOURCE-0000000000]: 7, seven",
        "[KSTREAM-SOURCE-0000000000]: null, null",
    ]
    assert "KSTREAM-PRINTER-0000000001" in b.build().nodes


def test_a_blank_or_unwritable_file_is_refused(tmp_path: Path) -> None:
    """Printed.toFile: a blank path, or one that cannot be written, is a topology error."""
    with pytest.raises(TopologyError, match="empty string"):
        Printed.to_file(" ")
    with pytest.raises(TopologyError, match="Unable to write stream to file"):
        Printed.to_file(str(tmp_path / "missing-dir" / "out.txt"))
