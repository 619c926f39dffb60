"""Fault campaigns: several instances under a mix of faults, checked exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streams.crash.campaign import Campaign
from streams.crash.campaign_report import RECOVERY_LIMIT_S, CampaignReport, FaultEvent, kinds_of
from streams.crash.inputs import CrashTestError
from streams.crash.instances import Exit
from streams.crash.nemesis import FAULT_KINDS, Nemesis, fill, mount_small_disk, unmount
from streams.crash.plan import CrashReport
from tests.crash.conftest import FAST_JVM, example


def test_a_fault_plan_names_kinds_with_weights() -> None:
    assert kinds_of("all") == list(FAULT_KINDS)
    assert kinds_of("kill:2, pause") == ["kill", "kill", "pause"]
    with pytest.raises(CrashTestError, match="unknown kind 'nap'"):
        kinds_of("nap")
    with pytest.raises(CrashTestError, match="whole number"):
        kinds_of("kill:x")


def test_the_report_tables_every_kind_and_fails_a_slow_recovery() -> None:
    check = CrashReport("app.py", "app", "exactly_once_v2", 0, "/w", 0)
    fast = FaultEvent(1, "pause", "a", "SIGSTOP for 9 s", 3.0, 12.0, 4.5)
    slow = FaultEvent(2, "kill", "b", "SIGKILL", 20.0, 22.0, RECOVERY_LIMIT_S + 1)
    exit_ = Exit("a", 15.0, 1, "error: TaskMigratedError: fenced")
    report = CampaignReport(check, [fast], [exit_], 60.0, 2, "local[2]", False)
    assert report.ok and report.exit_code == 0
    assert report.table()[1].split() == ["pause", "1", "1", "4.5", "4.5"]
    report.faults.append(slow)
    assert not report.ok and "campaign VIOLATED" in report.text()
    assert json.loads(json.dumps(report.to_dict()))["ok"] is False


@pytest.mark.slow  # two instances, four faults: a few minutes
def test_a_short_campaign_of_kills_pauses_and_worker_losses_stays_exactly_once(
    tmp_path: Path,
) -> None:
    faults = "kill,pause,python-worker,fault-point" + (",disk-full" if os.geteuid() == 0 else "")
    args = [
        "crashtest",
        str(example("wordcount")),
        "--generate",
        "3000",
        "--faults",
        faults,
        "--kills",
        "5",
        "--interval",
        "4",
        "--workdir",
        str(tmp_path / "w"),
        "--report",
        str(tmp_path / "report.json"),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "streams.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **FAST_JVM},
        timeout=1800,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["ok"] and report["check"]["exactly_once"]
    assert len(report["faults"]) == 5
    assert all(f["recovery_s"] < RECOVERY_LIMIT_S for f in report["faults"])


def test_a_take_out_fault_avoids_the_instances_a_python_worker_fault_may_still_hit(
    tmp_path: Path,
) -> None:
    """A Python worker fault waits for a worker to kill; a pause of the same instance
    meanwhile took that fault's recovery (75.5 s in an hour's campaign). While it is
    applied, its instances count as recovering: a take-out fault waits or goes elsewhere."""
    campaign = Campaign(
        example("wordcount"), faults=["pause", "python-worker"], generate=10, workdir=tmp_path
    )
    assert campaign._recovering() == set()
    campaign._applying[7] = {"a", "b"}
    assert campaign._recovering() == {"a", "b"}
    del campaign._applying[7]
    assert campaign._recovering() == set()


def test_a_fault_that_cannot_apply_here_says_what_it_needs(tmp_path: Path) -> None:
    nemesis = Nemesis([], None, ["after_prepare"], pause_s=9, seed=0, tick=lambda: None)
    assert "--master local-cluster" in str(nemesis.possible("executor", cluster=False))
    assert nemesis.possible("executor", cluster=True) is None
    assert "object store" in str(nemesis.possible("lost-answers", cluster=False))
    assert "another instance" in str(nemesis.possible("pause", cluster=False))
    assert "unknown fault kind" in str(nemesis.possible("flood", cluster=False))


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small filesystem needs root")
def test_a_small_disk_fills_to_the_last_byte_and_empties(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    mount_small_disk(str(disk), 4)
    try:
        written = fill(str(disk / ".filler"))
        assert 3 << 20 <= written <= 4 << 20
        with pytest.raises(OSError, match="No space left"):
            (disk / "more").write_bytes(b"x" * 65536)
        os.remove(disk / ".filler")
        (disk / "more").write_bytes(b"x" * 65536)
    finally:
        unmount(str(disk))


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small filesystem needs root")
def test_a_campaign_stopped_by_sigterm_leaves_no_instance_and_no_mount(tmp_path: Path) -> None:
    """A CI job's timeout or a supervisor ends the command with SIGTERM: it cleans up as
    on Ctrl-C (its instances stopped, its small disks unmounted) and says it was stopped."""
    work = tmp_path / "work"
    args = ["--generate", "50", "--faults", "disk-full,kill", "--instances", "2"]
    args += ["--duration", "600", "--workdir", str(work)]
    command = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "crashtest", str(example("wordcount")), *args],
        env={**os.environ, **FAST_JVM},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        logs = work / "logs"
        deadline = time.monotonic() + 120
        while not (logs.is_dir() and len(list(logs.iterdir())) >= 2):
            assert command.poll() is None and time.monotonic() < deadline, command.stderr
            time.sleep(0.2)
        command.send_signal(signal.SIGTERM)
        _, err = command.communicate(timeout=120)
    finally:
        command.kill()
    assert command.returncode == 130, err[-2000:]
    assert str(work) not in Path("/proc/mounts").read_text()
    left = subprocess.run(["pgrep", "-af", str(work)], check=False, capture_output=True, text=True)
    assert left.stdout == "", left.stdout
