"""The public path of :mod:`common.handlers` (the kernel module it re-exports)."""

from common.handlers import *  # noqa: F403
