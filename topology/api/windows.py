"""Window specifications of windowed aggregations, as Kafka's ``TimeWindows``,
``SlidingWindows``, ``SessionWindows`` and ``UnlimitedWindows``.

Durations are epoch milliseconds given as ``int`` or as :class:`datetime.timedelta`. Time
windows are aligned to the epoch: a record at ``ts`` falls in every window
``[start, start + size)`` with ``start`` a multiple of the advance, ``start >= 0`` and
``start <= ts < start + size`` (Kafka's ``TimeWindows.windowsFor``).

A window closes when stream time passes its end plus the grace period; a record for a
closed window is dropped and counted as a dropped record. Each spec also settles the
retention its window store needs (Kafka's defaults): ``size + grace`` (time windows),
``2 * time difference + grace`` (sliding), ``gap + grace`` (sessions).

Example:
    >>> TimeWindows.of_size_with_no_grace(10).advance_by(5).windows_for(12)
    {5: Window(start=5, end=15), 10: Window(start=10, end=20)}
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Self

from statestores.api import Window

#: The largest timestamp (Kafka's ``Long.MAX_VALUE``).
MAX_TIME = (1 << 63) - 1

Duration = int | timedelta


def to_ms(duration: Duration, what: str) -> int:
    """Return ``duration`` in milliseconds; raise ValueError if it is not a duration.

    Example:
        >>> to_ms(timedelta(seconds=2), "size")
        2000
    """
    if isinstance(duration, timedelta):
        return duration // timedelta(milliseconds=1)
    if isinstance(duration, bool) or not isinstance(duration, int):
        raise ValueError(f"{what} must be an int of milliseconds or a timedelta, got {duration!r}")
    return duration


def _non_negative(value: Duration, what: str) -> int:
    ms = to_ms(value, what)
    if ms < 0:
        raise ValueError(f"{what} must not be negative, got {ms} ms")
    return ms


def _positive(value: Duration, what: str) -> int:
    ms = to_ms(value, what)
    if ms <= 0:
        raise ValueError(f"{what} must be larger than zero, got {ms} ms")
    return ms


@dataclass(frozen=True, slots=True)
class TimeWindows:
    """Fixed-size windows: tumbling (advance = size) or hopping (advance < size)."""

    size_ms: int
    advance_ms: int
    grace_ms: int

    @classmethod
    def of_size_with_no_grace(cls, size: Duration) -> TimeWindows:
        """Tumbling windows of ``size`` that close as soon as stream time passes their end.

        Example:
            >>> TimeWindows.of_size_with_no_grace(timedelta(minutes=5)).size_ms
            300000
        """
        size_ms = _positive(size, "window size")
        return cls(size_ms, size_ms, 0)

    @classmethod
    def of_size_and_grace(cls, size: Duration, grace: Duration) -> TimeWindows:
        """Tumbling windows of ``size`` accepting out-of-order records for ``grace`` after
        their end.

        Example:
            >>> TimeWindows.of_size_and_grace(100, 20).grace_ms
            20
        """
        size_ms = _positive(size, "window size")
        return cls(size_ms, size_ms, _non_negative(grace, "grace period"))

    def advance_by(self, advance: Duration) -> TimeWindows:
        """Return hopping windows starting every ``advance`` (``0 < advance <= size``).

        Example:
            >>> TimeWindows.of_size_with_no_grace(10).advance_by(5).advance_ms
            5
        """
        advance_ms = to_ms(advance, "advance")
        if advance_ms <= 0 or advance_ms > self.size_ms:
            raise ValueError(
                f"window advance must lie within (0, {self.size_ms}] ms (the window size), "
                f"got {advance_ms} ms"
            )
        return replace(self, advance_ms=advance_ms)

    def size(self) -> int:
        """The window size in ms."""
        return self.size_ms

    def grace_period_ms(self) -> int:
        """The grace period in ms."""
        return self.grace_ms

    def windows_for(self, timestamp: int) -> dict[int, Window]:
        """Return the windows holding ``timestamp`` by start, ascending (epoch aligned)."""
        size, advance = self.size_ms, self.advance_ms
        start = (max(0, timestamp - size + advance) // advance) * advance
        windows: dict[int, Window] = {}
        while start <= timestamp:
            end = start + size
            windows[start] = Window(start, end if end <= MAX_TIME else MAX_TIME)
            start += advance
        return windows

    def retention_ms(self) -> int:
        """The smallest retention of the window store: size + grace."""
        return self.size_ms + self.grace_ms

    def close_grace_ms(self) -> int:
        """How long after a window's end ``suppress(until_window_closes)`` waits."""
        return self.grace_ms


@dataclass(frozen=True, slots=True)
class SlidingWindows:
    """Windows of ``time_difference`` that slide with the records: every record defines a
    window ``[ts - difference, ts]`` and one starting just after it (both ends inclusive).
    """

    time_difference_ms: int
    grace_ms: int

    @classmethod
    def of_time_difference_with_no_grace(cls, time_difference: Duration) -> SlidingWindows:
        """Sliding windows over records at most ``time_difference`` apart, no grace.

        Example:
            >>> SlidingWindows.of_time_difference_with_no_grace(10).time_difference_ms
            10
        """
        return cls(_non_negative(time_difference, "time difference"), 0)

    @classmethod
    def of_time_difference_and_grace(
        cls, time_difference: Duration, grace: Duration
    ) -> SlidingWindows:
        """Sliding windows over records at most ``time_difference`` apart, with ``grace``.

        Example:
            >>> SlidingWindows.of_time_difference_and_grace(10, 5).grace_ms
            5
        """
        return cls(
            _non_negative(time_difference, "time difference"),
            _non_negative(grace, "grace period"),
        )

    with_no_grace = of_time_difference_with_no_grace

    def size(self) -> int:
        """The window size in ms (the time difference)."""
        return self.time_difference_ms

    def grace_period_ms(self) -> int:
        """The grace period in ms."""
        return self.grace_ms

    def retention_ms(self) -> int:
        """The smallest retention of the window store: 2 * difference + grace."""
        return 2 * self.time_difference_ms + self.grace_ms

    def close_grace_ms(self) -> int:
        """How long after a window's end ``suppress(until_window_closes)`` waits."""
        return self.grace_ms


@dataclass(frozen=True, slots=True)
class SessionWindows:
    """Sessions: records of a key less than ``gap`` apart share one session; a record that
    bridges two sessions merges them."""

    gap_ms: int
    grace_ms: int

    @classmethod
    def of_inactivity_gap_with_no_grace(cls, gap: Duration) -> SessionWindows:
        """Sessions closed by ``gap`` of inactivity, no grace.

        Example:
            >>> SessionWindows.of_inactivity_gap_with_no_grace(timedelta(seconds=5)).gap_ms
            5000
        """
        return cls(_positive(gap, "inactivity gap"), 0)

    @classmethod
    def of_inactivity_gap_and_grace(cls, gap: Duration, grace: Duration) -> SessionWindows:
        """Sessions closed by ``gap`` of inactivity, accepting late records for ``grace``.

        Example:
            >>> SessionWindows.of_inactivity_gap_and_grace(10, 2).grace_ms
            2
        """
        return cls(_positive(gap, "inactivity gap"), _non_negative(grace, "grace period"))

    def inactivity_gap(self) -> int:
        """The inactivity gap in ms."""
        return self.gap_ms

    def grace_period_ms(self) -> int:
        """The grace period in ms."""
        return self.grace_ms

    def retention_ms(self) -> int:
        """The smallest retention of the session store: gap + grace."""
        return self.gap_ms + self.grace_ms

    def close_grace_ms(self) -> int:
        """How long after a session's end ``suppress(until_window_closes)`` waits: gap +
        grace, as a later record may still extend the session (Kafka's
        ``GraphGraceSearchUtil``)."""
        return self.gap_ms + self.grace_ms


@dataclass(frozen=True, slots=True)
class UnlimitedWindows:
    """One window per key from ``start_ms`` to the end of time (Kafka's
    ``UnlimitedWindows``); never closes, so nothing is ever dropped as late."""

    start_ms: int = 0

    @classmethod
    def of(cls) -> UnlimitedWindows:
        """Windows starting at the epoch.

        Example:
            >>> UnlimitedWindows.of().windows_for(7)
            {0: Window(start=0, end=9223372036854775807)}
        """
        return cls()

    def starting_at(self, start: Duration) -> Self:
        """Return windows starting at ``start`` (ms since the epoch)."""
        return replace(self, start_ms=_non_negative(start, "start"))

    @property
    def size_ms(self) -> int:
        """The window size: to the end of time."""
        return MAX_TIME

    @property
    def grace_ms(self) -> int:
        """No grace: the window never closes."""
        return 0

    def size(self) -> int:
        """The window size in ms."""
        return MAX_TIME

    def grace_period_ms(self) -> int:
        """The grace period in ms (0)."""
        return 0

    def windows_for(self, timestamp: int) -> dict[int, Window]:
        """Return the one window holding ``timestamp`` (none before ``start_ms``)."""
        if timestamp < self.start_ms:
            return {}
        return {self.start_ms: Window(self.start_ms, MAX_TIME)}

    def retention_ms(self) -> int:
        """The window store keeps everything."""
        return MAX_TIME

    def close_grace_ms(self) -> int:
        """Unlimited windows never close."""
        return 0


#: Windows aggregated by ``TimeWindowedKStream`` (each record into its fixed windows).
FixedWindows = TimeWindows | UnlimitedWindows
