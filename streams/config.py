"""The public path of :mod:`common.config` (the kernel module it re-exports)."""

from common.config import *  # noqa: F403
