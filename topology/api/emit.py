"""When a windowed aggregation forwards its results (Kafka's ``EmitStrategy``, KIP-825).

``EmitStrategy.on_window_update()`` (the default) forwards every update of a window, as a
table's updates. ``EmitStrategy.on_window_close()`` forwards each window once, its final
aggregate, when stream time passes the window's close (its end plus the grace period);
records arriving later for it are dropped. Give it to a windowed stream with
``TimeWindowedKStream.emit_strategy`` or ``SessionWindowedKStream.emit_strategy``.

How often a closing node looks for closed windows is Kafka's internal key
:data:`EMIT_INTERVAL_KEY` (wall-clock ms, default 1000; 0: after every record).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

#: Kafka's ``StreamsConfig.InternalConfig.EMIT_INTERVAL_MS_KSTREAMS_WINDOWED_AGGREGATION``.
EMIT_INTERVAL_KEY = "__emit.interval.ms.kstreams.windowed.aggregation__"
#: Its default: a closing node looks for closed windows at most once a second.
DEFAULT_EMIT_INTERVAL_MS = 1000


class StrategyType(enum.Enum):
    """The kinds of emit strategy, with Kafka's codes."""

    ON_WINDOW_UPDATE = 0
    ON_WINDOW_CLOSE = 1


@dataclass(frozen=True, slots=True)
class EmitStrategy:
    """When a windowed aggregation forwards its results.

    Example:
        >>> EmitStrategy.on_window_close().type
        <StrategyType.ON_WINDOW_CLOSE: 1>
    """

    type: StrategyType

    @staticmethod
    def on_window_close() -> EmitStrategy:
        """Forward each window once, when it closes (stream time > window end + grace)."""
        return EmitStrategy(StrategyType.ON_WINDOW_CLOSE)

    @staticmethod
    def on_window_update() -> EmitStrategy:
        """Forward every update of a window (the default)."""
        return EmitStrategy(StrategyType.ON_WINDOW_UPDATE)

    @property
    def on_close(self) -> bool:
        """Whether windows are forwarded once, when they close."""
        return self.type is StrategyType.ON_WINDOW_CLOSE

    def __str__(self) -> str:
        return self.type.name


#: The default strategy.
ON_WINDOW_UPDATE = EmitStrategy.on_window_update()
