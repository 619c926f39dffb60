"""A user's mistakes get one line naming what to fix, never "unexpected ... report it"."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.conf import LOG_FILE_ENV
from runtime.storage.topics import TopicAdmin
from streams.cli import main

GOOD = """
from topology import StreamsBuilder

CONFIG = {"application.id": "mistakes"}


def build_topology():
    builder = StreamsBuilder()
    builder.stream("in").to("out")
    return builder.build()
"""


@pytest.fixture(autouse=True)
def _restore_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``run`` sends the process's logs to a file (``log_to_file``): undo it after each
    test, so no handler, filter or ``STREAMS_LOG_FILE`` outlives the test in this process."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    states = [(h, h.level, list(h.filters), h.formatter) for h in handlers]
    monkeypatch.delenv(LOG_FILE_ENV, raising=False)
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    for handler, hlevel, filters, formatter in states:
        handler.setLevel(hlevel)
        handler.filters[:] = filters
        handler.setFormatter(formatter)
    root.setLevel(level)
    os.environ.pop(LOG_FILE_ENV, None)


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line]
    assert len(err) == 1, err
    assert "unexpected" not in err[0] and "report it" not in err[0]
    assert "Traceback" not in err[0]
    return err[0]


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (GOOD.replace("def build_topology():", "def build_topology()"), "line 7: expected ':'"),
        ("import no_such_module_here\n" + GOOD, "imports 'no_such_module_here'"),
        (GOOD.replace("return builder.build()", "return builder"), "return builder.build()"),
        (GOOD.replace("return builder.build()", "return 42"), "returned int, not a Topology"),
        (GOOD.replace("builder.stream", "1 / 0\n    builder.stream"), "line 9: build_topology()"),
        ("raise RuntimeError('bad setup')\n" + GOOD, "line 1 failed while it was loaded"),
    ],
)
def test_a_broken_topology_file_is_one_line_naming_file_and_line(
    tmp_path: Path, source: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "topo.py"
    file.write_text(source)
    for command in (["describe", str(file)], ["run", str(file), "--root", str(tmp_path / "r")]):
        assert main(command) == 1
        line = one_error_line(capsys)
        assert line.startswith("error: topology file ") and str(file) in line, line
        assert message in line, line


def test_an_unwritable_state_dir_is_named_with_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "topo.py"
    file.write_text(GOOD)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where a directory should be")
    code = main(
        ["run", str(file), "--root", str(tmp_path / "r"), "--config", f"state.dir={blocker}/x"]
    )
    assert code == 1
    line = one_error_line(capsys)
    assert line.startswith("error: state.dir: cannot write") and "state.dir=PATH" in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permissions")
def test_a_state_dir_without_permission_is_named_with_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "topo.py"
    file.write_text(GOOD)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert (
        main(["run", str(file), "--root", str(tmp_path / "r"), "--config", f"state.dir={locked}"])
        == 1
    )
    assert "state.dir: cannot write" in one_error_line(capsys)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["get-offsets", "--topic", "t", "--time", "-3"], "--time: -3 is not supported"),
        (["get-offsets", "--topic", "t", "--time", "soon"], "'soon' is not -1 (latest)"),
        (["topics", "--list", "--bogus"], "unrecognized arguments: --bogus"),
        (["status"], "the following arguments are required: --application-id"),
    ],
)
def test_a_bad_cli_argument_is_one_line(
    root: str, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    TopicAdmin(root).create("t", 1)
    with pytest.raises(SystemExit) as exc:
        main([*args, "--root", root])
    assert exc.value.code == 2
    line = one_error_line(capsys)
    assert message in line and line.endswith("--help)"), line


def test_a_root_that_does_not_exist_is_reported_not_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-root"
    monkeypatch.setenv("STREAMS_ROOT", str(missing))
    assert main(["topics", "--list"]) == 2
    line = one_error_line(capsys)
    assert f"the storage root {missing} (STREAMS_ROOT) does not exist" in line
    assert not missing.exists()
    # creating a topic creates the root
    assert main(["topics", "--create", "--topic", "t"]) == 0
    assert missing.is_dir()


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("streams-eos ")


def test_describe_needs_no_root_even_when_streams_root_does_not_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "topo.py"
    file.write_text(GOOD)
    monkeypatch.setenv("STREAMS_ROOT", str(tmp_path / "not-yet"))
    assert main(["describe", str(file)]) == 0
    assert capsys.readouterr().out.startswith("Topologies:")
