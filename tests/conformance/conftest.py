"""The conformance suite: scenarios from Apache Kafka's Kafka Streams tests.

Each test module is named after the Kafka test class it rewrites (``test_ktable_filter.py``
for ``KTableFilterTest``) and each scenario's docstring names the Kafka method it comes
from. The inputs and the expected outputs are Kafka's; the code is this project's. Every
scenario runs under both engines (``processing.engine``), with the topology tests'
fixtures: ``engine`` (autouse, both engines) and ``drive(topology, **config)``.
"""

from __future__ import annotations

from tests.topology.conftest import CONFIG, I, L, S, drive, engine

__all__ = ["CONFIG", "I", "L", "S", "drive", "engine"]
