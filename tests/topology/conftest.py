"""Shared helpers of the topology tests: serdes and a driver factory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from common.serdes import Serdes
from streams.testing import TopologyTestDriver
from topology import Topology
from topology.engine.columnar import ENGINES

S = Serdes.String()
L = Serdes.Long()
I = Serdes.Integer()  # noqa: E741

CONFIG = {
    "application.id": "app",
    "default.key.serde": "string",
    "default.value.serde": "string",
}


@pytest.fixture(autouse=True, params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """Every topology test runs under both engines (``processing.engine``): their outputs
    must be the same. The tests' configurations carry it (``drive`` puts it in)."""
    return str(request.param)


@pytest.fixture
def drive(engine: str) -> Iterator[Any]:
    """Return ``drive(topology, **config)`` -> a driver closed after the test, under the
    test's ``engine`` unless the config names one."""
    drivers: list[TopologyTestDriver] = []

    def make(topology: Topology, **extra: Any) -> TopologyTestDriver:
        options = {
            k: extra.pop(k) for k in ("initial_wall_clock_time_ms", "partitions") if k in extra
        }
        config = {**CONFIG, "processing.engine": engine, **extra}
        driver = TopologyTestDriver(topology, config, **options)
        drivers.append(driver)
        return driver

    yield make
    for driver in drivers:
        driver.close()
