"""Run the command line as ``python -m streams.cli``."""

from __future__ import annotations

import sys

from streams.cli import main

sys.exit(main())
