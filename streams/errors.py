"""The public path of :mod:`common.errors` (the kernel module it re-exports)."""

from common.errors import *  # noqa: F403
