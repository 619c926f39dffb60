"""The commit strategy of each processing guarantee, chosen once per stream thread (see
:mod:`runtime.thread.commit`)."""

from __future__ import annotations

from collections.abc import Mapping

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
    admin: TopicAdmin,
    config: StreamsConfig,
    transactional_id: str,
    sources: Mapping[str, int] | None = None,
) -> CommitStrategy:
    """Return the strategy of ``processing.guarantee`` (``sources``: source topic -> the
    sub-topology reading it, the thread's own: its stable fetches wait only for
    transactions holding offsets of its tasks' partitions)."""
    guarantee = config.processing_guarantee
    strategy: CommitStrategy
    if guarantee == "at_least_once":
        strategy = AtLeastOnce(admin, config, transactional_id)
    elif guarantee == "exactly_once":
        strategy = ExactlyOncePerTask(admin, config, transactional_id)
    else:
        strategy = ExactlyOnceV2(admin, config, transactional_id)
    strategy.sources = sources
    return strategy
