"""Drive the real Lambda handlers on one machine: a scanner tick, then the consumer and redrive
event-source loops until the queues are idle."""

from __future__ import annotations

from typing import Any

from reminders import runtime, scanner
from reminders.local.event_source import EventSource, run_until_idle
from reminders.runtime import Runtime


def tick(rt: Runtime) -> dict[str, Any]:
    return scanner.tick(rt).as_json()


def work(rt: Runtime, *, region: str = "us-east-1", max_seconds: float = 60.0) -> dict[str, Any]:
    """Run the consumer and redrive handlers until both queues are idle (bounded)."""
    from functions.consumer.handler import handler as consumer_handler
    from functions.redrive.handler import handler as redrive_handler

    runtime.install(rt)
    try:
        consumer = EventSource(rt.deliveries, consumer_handler, "consumer", region)
        redrive = EventSource(rt.dlq, redrive_handler, "redrive", region)
        idle = run_until_idle([consumer, redrive], max_rounds=rt.settings.limits.work_rounds,
                              max_seconds=max_seconds)
    finally:
        runtime.install(None)
    return {"idle": idle,
            "consumer": {"batches": consumer.counts.batches, "records": consumer.counts.records,
                         "failures": consumer.counts.failures},
            "redrive": {"batches": redrive.counts.batches, "records": redrive.counts.records,
                        "failures": redrive.counts.failures}}


def run(rt: Runtime, *, region: str = "us-east-1", max_seconds: float = 60.0) -> dict[str, Any]:
    """One tick and the work it makes."""
    return {"tick": tick(rt), "work": work(rt, region=region, max_seconds=max_seconds)}
