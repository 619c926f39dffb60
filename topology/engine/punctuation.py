"""A task's punctuation queue (Kafka's ``PunctuationQueue``): the stream-time and
wall-clock schedules of its processors, and when each falls due.

The queue decides which punctuators are due and in what order; running one (the record
context a punctuator sees, its error handling, its measurement) is the task's, handed in
as ``run``.
"""

from __future__ import annotations

from collections.abc import Callable

from common.errors import StreamsError
from topology.api.processor import PunctuationType, Punctuator
from topology.engine.context import PunctuationSchedule

#: A time no punctuation reaches (ms): nothing is scheduled.
NEVER = 1 << 62

#: Runs one due punctuator at ``now`` (ms): ``(schedule, now)``.
RunPunctuator = Callable[[PunctuationSchedule, int], None]


class PunctuationQueue:
    """The punctuators a task's processors scheduled.

    Args:
        wall_clock: the task's wall clock (ms), where wall-clock schedules start.
        run: runs one due punctuator (the task's part: record context, errors, metrics).
    """

    __slots__ = ("_run", "_stream", "_wall", "_wall_clock", "next_stream_time")

    def __init__(self, wall_clock: Callable[[], int], run: RunPunctuator) -> None:
        self._wall_clock = wall_clock
        self._run = run
        self._stream: list[PunctuationSchedule] = []
        self._wall: list[PunctuationSchedule] = []
        #: When the next stream-time punctuator is due (``NEVER``: none is scheduled); the
        #: processing compares stream time with it after each record.
        self.next_stream_time = NEVER

    def schedule(
        self, node: str, interval_ms: int, punctuation_type: PunctuationType, punctuator: Punctuator
    ) -> PunctuationSchedule:
        """Schedule ``punctuator`` for processor ``node`` (see ``ProcessorContext.schedule``).

        Stream-time punctuation is aligned to 0 and fires as soon as stream time reaches
        the next multiple of the interval; wall-clock punctuation fires ``interval_ms``
        after scheduling, then every interval.
        """
        if interval_ms < 1:
            raise StreamsError(f"processor {node}: punctuation interval must be >= 1 ms")
        if punctuation_type is PunctuationType.STREAM_TIME:
            sched = PunctuationSchedule(node, interval_ms, punctuation_type, punctuator, 0)
            self._stream.append(sched)
            self.next_stream_time = min(self.next_stream_time, 0)
        else:
            start = self._wall_clock() + interval_ms
            sched = PunctuationSchedule(node, interval_ms, punctuation_type, punctuator, start)
            self._wall.append(sched)
        return sched

    def punctuate_stream_time(self, stream_time: int) -> int:
        """Run the stream-time punctuators due at ``stream_time``; return how many ran."""
        ran = self._punctuate(self._stream, stream_time)
        self.next_stream_time = _next_time(self._stream)
        return ran

    def next_wall_clock_punctuation(self) -> int | None:
        """Return when the next wall-clock punctuator is due (ms), or None if none is
        scheduled."""
        due = _next_time(self._wall)
        return None if due == NEVER else due

    def punctuate_wall_clock(self, now: int) -> int:
        """Run the wall-clock punctuators due at ``now``; return how many ran."""
        return self._punctuate(self._wall, now)

    def _punctuate(self, schedules: list[PunctuationSchedule], now: int) -> int:
        """Run the due ones of ``schedules`` in the order they fell due (cancelled ones
        leave the queue), each moved to its next time on its interval grid."""
        ran = 0
        schedules[:] = [s for s in schedules if not s.cancelled]
        for sched in sorted(schedules, key=lambda s: s.next_time):
            if sched.cancelled or sched.next_time > now:
                continue
            self._run(sched, now)
            sched.advance(now)
            ran += 1
        return ran


def _next_time(schedules: list[PunctuationSchedule]) -> int:
    live = [s.next_time for s in schedules if not s.cancelled]
    return min(live) if live else NEVER
