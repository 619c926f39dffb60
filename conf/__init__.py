"""Default configuration files shipped with spark-streams-eos (the package ``common.conf``).

- ``streams-defaults.properties``: every configuration key with its default, commented.
- ``log4j2.properties``: keeps Spark's JVM logging quiet (WARN and above).
"""

from __future__ import annotations

from pathlib import Path

CONF_DIR = Path(__file__).resolve().parent
DEFAULTS_FILE = CONF_DIR / "streams-defaults.properties"
LOG4J2_FILE = CONF_DIR / "log4j2.properties"
