"""Fixtures of the store tests: a store kind parameter covering RocksDB and memory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from statestores.context import RecordingCollector, StandaloneContext


@pytest.fixture(params=["rocksdb", "memory"])
def persistent(request: pytest.FixtureRequest) -> bool:
    """Run the test against RocksDB and against the in-memory store."""
    return bool(request.param == "rocksdb")


@pytest.fixture
def collector() -> RecordingCollector:
    return RecordingCollector()


@pytest.fixture
def context(tmp_path: Path, collector: RecordingCollector) -> Iterator[StandaloneContext]:
    yield StandaloneContext(
        state_dir=str(tmp_path / "task"),
        changelog=collector,
        app_config={"statestore.cache.max.bytes": 10 * 1024 * 1024},
    )
