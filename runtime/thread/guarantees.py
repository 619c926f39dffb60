"""The commit strategy of each processing guarantee, chosen once per stream thread (see
:mod:`runtime.thread.commit`)."""

from __future__ import annotations

from common.config import StreamsConfig
from runtime.storage.topics import TopicAdmin
from runtime.thread.commit import CommitStrategy
from runtime.thread.commit_alos import AtLeastOnce
from runtime.thread.commit_eos import ExactlyOncePerTask, ExactlyOnceV2


def query_trigger_ms(config: StreamsConfig) -> int:
    """The trigger interval of a stream thread's query under ``processing.guarantee``
    (what :attr:`CommitStrategy.trigger_interval_ms` says, before a strategy exists)."""
    return 0 if config.processing_guarantee == "at_least_once" else config.commit_interval_ms


def commit_strategy(
    admin: TopicAdmin, config: StreamsConfig, transactional_id: str
) -> CommitStrategy:
    """Return the strategy of ``processing.guarantee``."""
    guarantee = config.processing_guarantee
    if guarantee == "at_least_once":
        return AtLeastOnce(admin, config, transactional_id)
    if guarantee == "exactly_once":
        return ExactlyOncePerTask(admin, config, transactional_id)
    return ExactlyOnceV2(admin, config, transactional_id)
