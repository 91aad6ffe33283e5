"""``reminders local serve``: the local stack's twin kept running on the wall clock, so that an
app scheduling through the SQL API sees its reminders delivered with no ``reminders work`` by
hand.

It is the twin ``tick`` and ``work`` start (:func:`reminders.local.twin.on_stack.start_twin`),
driven by a loop of its own: the template's schedule rule fires at once and then at every
minute boundary (:meth:`Twin.tick`), and in between the event source mappings are polled
(:meth:`Twin.work`) for at most ``poll_seconds`` at a time, waiting ``idle_seconds`` when both
queues are empty. Each minute it says in one line what it did. It ends when ``stop`` is set
(the command sets it on SIGINT or SIGTERM), at the latest ``poll_seconds`` (and the batch under
way) later, or after ``max_minutes``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from reminders.clock import Clock
from reminders.local.twin.run import Twin

MINUTE = timedelta(minutes=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class Served:
    """What a serve did in all: rule firings, and the mappings' records and failures."""

    ticks: int = 0
    tick_errors: int = 0
    leased: int = 0
    published: int = 0
    records: int = 0
    failures: int = 0

    def as_json(self) -> dict[str, int]:
        return dict(vars(self))


def _next_minute(at: datetime) -> datetime:
    return EPOCH + MINUTE * ((at.astimezone(UTC) - EPOCH) // MINUTE + 1)


def _work_totals(summary: dict[str, Any]) -> tuple[int, int, int, int]:
    """The mappings' cumulative records and failures: consumer's, then redrive's."""
    consumer, redrive = summary["consumer"], summary["redrive"]
    return (int(consumer["records"]), int(consumer["failures"]) + int(consumer["errors"]),
            int(redrive["records"]), int(redrive["failures"]) + int(redrive["errors"]))


def serve(twin: Twin, *, clock: Clock, stop: threading.Event, say: Callable[[str], None],
          max_minutes: int, poll_seconds: float = 2.0, idle_seconds: float = 1.0) -> Served:
    """Run the twin's rule and mappings on ``clock`` (the wall clock) until ``stop`` is set or
    ``max_minutes`` have passed; one line a minute to ``say``. Returns the totals."""
    if max_minutes < 1:
        raise ValueError(f"max_minutes must be at least 1, got {max_minutes}")
    served = Served()
    started = clock.now()
    ends = started + max_minutes * MINUTE
    due = started  # the first firing at once, then at each minute boundary
    line: list[str] = []
    totals = (0, 0, 0, 0)   # the mappings' cumulative counts when the last line was said
    latest = totals

    def said() -> None:
        nonlocal totals
        consumer, c_failed = latest[0] - totals[0], latest[1] - totals[1]
        redrive, r_failed = latest[2] - totals[2], latest[3] - totals[3]
        say(f"{clock.now().strftime('%H:%M:%S')} {'; '.join(line) or 'no rule firing'}; "
            f"consumer {consumer} records ({c_failed} failed), "
            f"redrive {redrive} records ({r_failed} failed)")
        totals = latest
        line.clear()

    while not stop.is_set():
        now = clock.now()
        if now >= ends:
            break
        if now >= due:
            if served.ticks:
                said()
            answer = twin.tick()
            served.ticks += 1
            if "error" in answer:
                served.tick_errors += 1
                error = answer["error"] or {}
                line.append(f"tick failed: {error.get('errorType')}: "
                            f"{error.get('errorMessage')}")
            else:
                served.leased += int(answer.get("leased", 0))
                served.published += int(answer.get("published", 0))
                line.append(f"tick: leased {answer.get('leased', 0)}, published "
                            f"{answer.get('published', 0)}")
            due = _next_minute(now)
        left = (due - clock.now()).total_seconds()
        summary = twin.work(max_seconds=max(0.1, min(poll_seconds, left)))
        latest = _work_totals(summary)
        if summary["idle"]:
            stop.wait(max(0.0, min(idle_seconds, (due - clock.now()).total_seconds())))
    if served.ticks:
        said()
    served.records, served.failures = latest[0] + latest[2], latest[1] + latest[3]
    return served
