"""The application lifecycle: Kafka's transition table, listener, and the process id."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from common.errors import StreamsError
from runtime.app.app import StreamsApp
from runtime.app.app_state import (
    TRANSITIONS,
    AppState,
    AppStateMachine,
    IllegalStateTransitionError,
)
from runtime.app.process_id import (
    PROCESS_FILE,
    StateDirectoryInUseError,
    claim_state_dir,
    load_or_create_process_id,
    release_state_dir,
)
from topology import StreamsBuilder

LEGAL = {
    ("CREATED", "REBALANCING"),
    ("CREATED", "PENDING_SHUTDOWN"),
    ("REBALANCING", "RUNNING"),
    ("REBALANCING", "PENDING_SHUTDOWN"),
    ("REBALANCING", "PENDING_ERROR"),
    ("RUNNING", "REBALANCING"),
    ("RUNNING", "RUNNING"),
    ("RUNNING", "PENDING_SHUTDOWN"),
    ("RUNNING", "PENDING_ERROR"),
    ("PENDING_SHUTDOWN", "NOT_RUNNING"),
    ("PENDING_ERROR", "ERROR"),
}


@pytest.mark.parametrize(("old", "new"), list(itertools.product(AppState, AppState)))
def test_transition_table_is_kafkas(old: AppState, new: AppState) -> None:
    assert (new in TRANSITIONS[old]) == ((old.value, new.value) in LEGAL)
    machine = AppStateMachine("app")
    machine._state = old
    if (old.value, new.value) in LEGAL:
        machine.transit(new)
        assert machine.state is new
    else:
        with pytest.raises(IllegalStateTransitionError, match=f"from {old.value} to {new.value}"):
            machine.transit(new)


def test_listener_hears_new_and_old_and_cannot_break_the_app() -> None:
    heard: list[tuple[str, str]] = []
    machine = AppStateMachine("app")
    machine.listener = lambda new, old: heard.append((new.value, old.value))
    machine.transit(AppState.REBALANCING)
    machine.transit(AppState.RUNNING)
    machine.listener = lambda new, old: 1 / 0  # type: ignore[func-returns-value]
    machine.transit(AppState.PENDING_SHUTDOWN)
    assert heard == [("REBALANCING", "CREATED"), ("RUNNING", "REBALANCING")]
    assert machine.wait_for(lambda s: s is AppState.PENDING_SHUTDOWN, timeout=0.1)
    assert not machine.wait_for(AppState.is_terminal, timeout=0.05)


def test_process_id_survives_restarts_and_is_per_application(tmp_path: Path) -> None:
    first = load_or_create_process_id(str(tmp_path), "app")
    assert load_or_create_process_id(str(tmp_path), "app") == first
    assert load_or_create_process_id(str(tmp_path), "other") != first
    (tmp_path / "app" / PROCESS_FILE).write_text("{not json")
    with pytest.raises(StreamsError, match="delete it"):
        load_or_create_process_id(str(tmp_path), "app")


def test_one_live_instance_per_state_directory(tmp_path: Path) -> None:
    """A second instance on a state directory in use is refused, naming the holder's pid
    (a paused instance still holds it); the lock dies with its holder."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from runtime.app.process_id import claim_state_dir; "
            "claim_state_dir(sys.argv[1], 'app', object()); print('held', flush=True); "
            "time.sleep(60)",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        mine = object()
        with pytest.raises(StateDirectoryInUseError, match=rf"process {holder.pid} holds"):
            claim_state_dir(str(tmp_path), "app", mine)
        assert claim_state_dir(str(tmp_path), "other", mine)  # another application's: free
        release_state_dir(str(tmp_path), "other", mine)
    finally:
        holder.kill()
        holder.wait()
    first = claim_state_dir(str(tmp_path), "app", mine)  # killed: its lock is gone
    assert first == load_or_create_process_id(str(tmp_path), "app")
    with pytest.raises(StateDirectoryInUseError, match="state.dir=PATH"):
        claim_state_dir(str(tmp_path), "app", object())  # two in one process: refused too
    release_state_dir(str(tmp_path), "app", object())  # not the holder's: still held
    with pytest.raises(StateDirectoryInUseError):
        claim_state_dir(str(tmp_path), "app", object())
    release_state_dir(str(tmp_path), "app", mine)
    assert claim_state_dir(str(tmp_path), "app", mine) == first
    release_state_dir(str(tmp_path), "app", mine)


def test_the_app_follows_its_threads_rebalances(tmp_path: Path) -> None:
    """RUNNING -> REBALANCING when a thread's group starts a rebalance; RUNNING again
    only once every rebalancing thread has rejoined (Kafka's KafkaStreams state)."""
    b = StreamsBuilder()
    b.stream("in").to("out")
    app = StreamsApp(b.build(), {"application.id": "a", "topics.root": str(tmp_path)})
    seen: list[AppState] = []
    app.set_state_listener(lambda new, old: seen.append(new))
    app._machine.transit(AppState.REBALANCING)
    app._machine.transit(AppState.RUNNING)
    app._thread_rebalancing(1, True)
    app._thread_rebalancing(2, True)
    app._thread_rebalancing(1, False)
    assert app.state is AppState.REBALANCING  # thread 2 still rejoins
    app._thread_rebalancing(2, False)
    assert seen == [AppState.REBALANCING, AppState.RUNNING] * 2
    app._machine.transit(AppState.PENDING_SHUTDOWN)
    app._thread_rebalancing(1, True)  # too late: the shutdown wins
    assert app.state is AppState.PENDING_SHUTDOWN
