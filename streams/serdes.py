"""The public path of :mod:`common.serdes` (the kernel module it re-exports)."""

from common.serdes import *  # noqa: F403
