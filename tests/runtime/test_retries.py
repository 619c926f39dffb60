"""Transient storage errors are retried with backoff, within a time budget."""

from __future__ import annotations

import time

import pytest

from common.errors import CommitOutcomeUnknownError, StorageError
from runtime.storage import retries
from runtime.storage.retries import retried


def test_an_operation_failing_for_good_fails_within_the_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each failure takes 0.2 s (a store answering SlowDown after the SDK's own tries):
    the retries stop once the budget would be passed, not after every attempt."""
    monkeypatch.setattr(retries, "BUDGET_S", 0.5)
    calls = []

    def write() -> None:
        calls.append(time.monotonic())
        time.sleep(0.2)
        raise StorageError("cannot write x: AWS Error SLOW_DOWN")

    started = time.monotonic()
    with pytest.raises(StorageError, match="SLOW_DOWN"):
        retried(write, what="write x")
    assert 2 <= len(calls) < retries.ATTEMPTS
    assert time.monotonic() - started < 0.5 + 0.2 + retries.MAX_S


def test_a_passing_error_is_retried_and_an_unknown_outcome_never() -> None:
    answers: list[BaseException | None] = [OSError("reset"), StorageError("503"), None]

    def flaky() -> str:
        error = answers.pop(0)
        if error is not None:
            raise error
        return "landed"

    assert retried(flaky, what="write y") == "landed"
    calls = 0

    def ambiguous() -> None:
        nonlocal calls
        calls += 1
        raise CommitOutcomeUnknownError("the answer of a conditional write was lost")

    with pytest.raises(CommitOutcomeUnknownError):
        retried(ambiguous, what="append z")
    assert calls == 1


def test_a_first_attempt_that_hung_past_the_budget_is_tried_once_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The process was paused (or the request timed out) in its first attempt, longer
    than the whole budget: the read is tried once more, and answers, rather than leaving
    a commit's outcome unknown."""
    monkeypatch.setattr(retries, "BUDGET_S", 0.2)
    calls = []

    def read_back() -> str:
        calls.append(time.monotonic())
        if len(calls) == 1:
            time.sleep(0.3)  # past the budget
            raise OSError("operation timed out")
        return "landed"

    assert retried(read_back, what="read back") == "landed"
    assert len(calls) == 2


def test_a_thread_whose_work_cannot_be_used_any_more_stops_retrying_at_once() -> None:
    """Within ``abort_when``, a failed attempt is not tried again once the check names a
    reason (a batch whose member left the group can never commit): the reason is raised,
    from the failure. Outside the block, and once the check names none, retries go on."""
    calls: list[int] = []
    reason: list[BaseException | None] = [None]

    def write() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise StorageError("503 SlowDown")
        return "written"

    with retries.abort_when(lambda: reason[0]):
        assert retried(write, what="write x") == "written"  # no reason: retried
        assert len(calls) == 3
        calls.clear()
        reason[0] = RuntimeError("out of the group")
        with pytest.raises(RuntimeError, match="out of the group") as raised:
            retried(write, what="write x")
        assert len(calls) == 1 and isinstance(raised.value.__cause__, StorageError)
    calls.clear()
    assert retried(write, what="write x") == "written"  # the block is over
    assert len(calls) == 3
