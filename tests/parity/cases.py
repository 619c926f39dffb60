"""Every parity case, by family (for the tests that run them all)."""

from __future__ import annotations

from tests.parity import (
    test_aggregations,
    test_cogroup,
    test_emit_final,
    test_joins,
    test_processor_api,
    test_stateless,
    test_versioned,
    test_windows,
)
from tests.parity.harness import Case

ALL_CASES: list[Case] = [
    *test_stateless.CASES,
    *test_aggregations.CASES,
    *test_cogroup.CASES,
    *test_windows.CASES,
    *test_emit_final.CASES,
    *test_joins.CASES,
    *test_processor_api.CASES,
    *test_versioned.CASES,
]
