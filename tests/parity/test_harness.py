"""The parity harness itself: every case's reference exercises its operator (run on the
driver alone, never xfail), and the comparison fails on a broken runtime."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from runtime.thread.read_plan import BatchReads, ReadPlanner
from tests.parity.cases import ALL_CASES
from tests.parity.harness import Case, Snapshot, assert_same, check_parity, run_on_driver
from tests.parity.test_stateless import CHAIN


def test_there_are_enough_cases_with_unique_names() -> None:
    names = [c.name for c in ALL_CASES]
    assert len(names) >= 20 and len(set(names)) == len(names)
    assert {c.max_poll_records for c in ALL_CASES} == {1, 2, 3, 4, 5}


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in ALL_CASES])
def test_the_driver_reference_exercises_the_operator(case: Case) -> None:
    """The reference is non-empty and covers the case's interesting paths (its check);
    this runs even for cases whose Spark run is a strict xfail, so a fix that makes them
    pass is compared against a reference that is known to be meaningful."""
    reference = run_on_driver(case)
    assert any(reference.outputs.values()), "the driver produced nothing"
    assert case.check is not None, "every case checks what its reference exercises"
    case.check(reference)
    empty = [name for name, contents in reference.stores.items() if not contents]
    assert not empty, f"stores compared while empty: {empty}"
    assert run_on_driver(case) == reference, "the driver run is not deterministic"


def _perturbed(reference: Snapshot, topic: str) -> Snapshot:
    """``reference`` with one record's timestamp moved and another record dropped."""
    per = {k: list(v) for k, v in reference.outputs[topic].items()}
    key = next(iter(per))
    value, ts, headers = per[key][0]
    per[key][0] = (value, ts + 1, headers)
    del per[key][-1]
    return Snapshot({**reference.outputs, topic: per}, reference.stores)


def test_the_comparison_names_each_difference() -> None:
    reference = run_on_driver(CHAIN)
    with pytest.raises(AssertionError) as failure:
        assert_same(_perturbed(reference, "out"), reference)
    message = str(failure.value)
    assert "Spark differs from the TopologyTestDriver" in message
    assert "first difference at #0" in message


def test_a_runtime_that_drops_a_record_fails_the_comparison(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken runtime: the stream thread's read planning (on the Spark driver) skips the
    input record at offset 3, as a lost record would; the parity check must fail."""
    plan = ReadPlanner.plan
    skipped: list[int] = []

    def skipping_plan(
        self: ReadPlanner, topics: list[str], owns: Any, positions: Any, **options: Any
    ) -> Any:
        if positions.get(("in", 0)) == 3 and not skipped:
            positions[("in", 0)] = 4
            skipped.append(3)
        reads: BatchReads = plan(self, topics, owns, positions, **options)
        return reads

    monkeypatch.setattr(ReadPlanner, "plan", skipping_plan)
    case = dataclasses.replace(CHAIN, max_poll_records=3)
    with pytest.raises(AssertionError, match="Spark differs from the TopologyTestDriver") as e:
        check_parity(case, spark, str(tmp_path))
    assert skipped == [3]
    # the fourth input ("e" of k0, ts 13) is the one lost: its single output is missing
    assert "output out key 'E': " in str(e.value), str(e.value)
