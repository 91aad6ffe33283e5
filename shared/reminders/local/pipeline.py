"""Drive the real Lambda handlers on one machine: a scanner tick, then the consumer and redrive
event-source loops until the queues are idle."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from reminders import runtime, scanner
from reminders.local.event_source import EventSource, Observer, run_until_idle
from reminders.runtime import Runtime


def tick(rt: Runtime, *, observe: Observer | None = None) -> dict[str, Any]:
    """One tick, which does not wait for room: here the consumers run after it, not beside.
    ``observe`` is told of the invocation (the scanner's, as Lambda counts it)."""
    began = time.monotonic()
    try:
        summary = scanner.tick(rt, refill=False).as_json()
    except Exception:
        if observe is not None:
            observe("scanner", time.monotonic() - began, True)
        raise
    if observe is not None:
        observe("scanner", time.monotonic() - began, False)
    return summary


def work(rt: Runtime, *, region: str = "us-east-1", max_seconds: float = 60.0,
         observe: Observer | None = None,
         progress: Callable[[dict[str, Any], float], None] | None = None) -> dict[str, Any]:
    """Run the consumer and redrive handlers until both queues are idle (bounded). Failed
    records and invocation errors are counted in the summary, never raised. ``observe`` is
    told of every invocation; ``progress``, after each round of polls, the summary so far and
    the seconds left before ``max_seconds``."""
    from functions.consumer.handler import handler as consumer_handler
    from functions.redrive.handler import handler as redrive_handler

    runtime.install(rt)
    try:
        # Lambda's poller reads each queue with the role of the function it invokes.
        consumer = EventSource(rt.for_function("consumer").deliveries, consumer_handler,
                               "consumer", region, observe=observe)
        redrive = EventSource(rt.for_function("redrive").dlq, redrive_handler, "redrive",
                              region, observe=observe)
        after_round = None if progress is None else (
            lambda left: progress(summary(False, consumer, redrive), left))
        idle = run_until_idle([consumer, redrive], max_rounds=rt.settings.limits.work_rounds,
                              max_seconds=max_seconds, after_round=after_round)
    finally:
        runtime.install(None)
    return summary(idle, consumer, redrive)


def summary(idle: bool, consumer: EventSource, redrive: EventSource) -> dict[str, Any]:
    """What ``work`` reports: idle (the queues were seen empty), per function the counts and
    the first and last invocation error, and the totals ``reminders work`` exits on."""
    return {"idle": idle, "consumer": consumer.counts.as_json(),
            "redrive": redrive.counts.as_json(),
            "failed_records": consumer.counts.failures + redrive.counts.failures,
            "invocation_errors": consumer.counts.errors + redrive.counts.errors}


def run(rt: Runtime, *, region: str = "us-east-1", max_seconds: float = 60.0,
        observe: Observer | None = None) -> dict[str, Any]:
    """One tick and the work it makes."""
    return {"tick": tick(rt, observe=observe),
            "work": work(rt, region=region, max_seconds=max_seconds, observe=observe)}
