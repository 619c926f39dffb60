"""Shared fixtures: a fresh storage root per test, with real Delta tables (delta-rs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from runtime.spark.session import get_or_create_session
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin


@pytest.fixture
def root(tmp_path: Path) -> str:
    """Return a new, empty storage root."""
    path = tmp_path / "storage"
    path.mkdir()
    return str(path)


@pytest.fixture
def admin(root: str) -> TopicAdmin:
    return TopicAdmin(root)


@pytest.fixture
def producer(admin: TopicAdmin) -> Producer:
    return Producer(admin)


@pytest.fixture
def reader(root: str) -> TopicReader:
    """A reader with its own admin, so it sees the log as another process would."""
    return TopicReader(root)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local[2] SparkSession for the whole test session (started on first use)."""
    session = get_or_create_session("spark-streams-eos-tests", master="local[2]")
    yield session
    session.stop()
