"""What the Spark runtime tests share."""

from __future__ import annotations

from typing import Any


def eos_config(application_id: str, root: str, state_dir: str, **extra: Any) -> dict[str, Any]:
    """An exactly_once_v2 configuration of one instance with string serdes and short
    commit intervals; ``extra`` adds or overrides keys."""
    return {
        "application.id": application_id,
        "topics.root": root,
        "state.dir": state_dir,
        "processing.guarantee": "exactly_once_v2",
        "default.key.serde": "string",
        "default.value.serde": "string",
        "commit.interval.ms": 20,
        "group.initial.rebalance.delay.ms": 0,
        **extra,
    }
