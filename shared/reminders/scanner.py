"""One scanner tick: reclaim expired leases, lease a bounded batch of due deliveries, publish
``{delivery id, lease token}`` for each, hand back what the queue refused."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from reminders import db
from reminders.clock import iso
from reminders.observability import logger
from reminders.queue import LeaseMessage
from reminders.runtime import Runtime

_SCANNER_LOCK = 0x5343414E


@dataclass
class TickSummary:
    now: str
    queued_before: int
    reclaimed: dict[str, int] = field(default_factory=dict)
    leased: int = 0
    published: int = 0
    released: int = 0
    poisoned: int = 0
    oldest_overdue_seconds: float = 0.0
    overdue: int = 0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def tick(rt: Runtime) -> TickSummary:
    now = rt.clock.now()
    limits = rt.settings.limits
    conn = rt.connection()
    # Queued messages count against the budget too: a paused consumer cannot make us pile up
    # messages for leases that expire and are taken again.
    queued = rt.deliveries.depth()
    summary = TickSummary(now=iso(now), queued_before=queued)
    with db.transaction(conn):
        db.execute(conn, "scanner_lock", {"key": _SCANNER_LOCK})
        reclaimed = db.fetch_all(conn, "lease_reclaim_expired", {
            "now": now, "idempotent_channels": rt.idempotent_channels})
        for row in reclaimed:
            summary.reclaimed[row["state"]] = summary.reclaimed.get(row["state"], 0) + 1
        poisoned = db.fetch_all(conn, "lease_park_poisoned", {
            "now": now, "max_empty_leases": limits.max_empty_leases,
            "batch": limits.scan_batch})
        summary.poisoned = len(poisoned)
        _advance_parked(conn, [r for r in [*reclaimed, *poisoned]
                               if r["state"] in ("unknown", "dead") and r["recurring"]], now)
        leased = db.fetch_all(conn, "lease_due", {
            "now": now, "batch": limits.scan_batch, "budget": limits.inflight_budget,
            "queued": queued, "lease_seconds": limits.lease_seconds,
            "max_empty_leases": limits.max_empty_leases})
    leased.sort(key=lambda r: (r["due_at"], r["id"]))
    summary.leased = len(leased)
    messages = [LeaseMessage(int(r["id"]), r["lease_token"]) for r in leased]
    rejected = rt.deliveries.publish(messages)
    summary.published = len(messages) - len(rejected)
    if rejected:
        summary.released = db.execute(conn, "lease_release", {
            "ids": [r.message.delivery_id for r in rejected],
            "tokens": [r.message.lease_token for r in rejected],
            "reason": "queue refused the message; due again next tick", "now": now})
        logger.warning("publish rejected", extra={
            "rejected": len(rejected), "released": summary.released,
            "first_reason": rejected[0].reason})
    overdue = db.fetch_one(conn, "oldest_overdue", {"now": now}) or {}
    summary.oldest_overdue_seconds = round(float(overdue.get("seconds") or 0.0), 3)
    summary.overdue = int(overdue.get("overdue") or 0)
    rt.metrics.put("OldestOverdueSeconds", summary.oldest_overdue_seconds, "Seconds")
    rt.metrics.put("Leased", summary.leased)
    rt.metrics.put("PublishRejected", len(rejected))
    rt.metrics.flush()
    logger.info("scanner tick", extra=summary.as_json())
    return summary


def _advance_parked(conn: db.Connection, rows: list[db.Row], now: Any) -> None:
    """A delivery parked by the scanner (`unknown`, `dead`) still advances its series."""
    if rows:
        from reminders.series import advance_after_terminal

        for row in rows:
            advance_after_terminal(conn, row["tenant"], int(row["schedule_id"]),
                                   row["recipient"], now)
