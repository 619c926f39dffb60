"""Default configuration files shipped with spark-streams-eos (the package ``common.conf``).

- ``streams-defaults.properties``: every configuration key with its default, commented.
- ``log4j2.properties``: keeps Spark's JVM logging quiet (WARN and above), or sends it
  to a file.
"""

from __future__ import annotations

from pathlib import Path

CONF_DIR = Path(__file__).resolve().parent
DEFAULTS_FILE = CONF_DIR / "streams-defaults.properties"
LOG4J2_FILE = CONF_DIR / "log4j2.properties"
#: When set, the file the Spark JVM of a session the project builds logs to, instead of
#: stderr (``streams-eos run`` without ``--verbose``; see log4j2.properties).
LOG_FILE_ENV = "STREAMS_LOG_FILE"
