"""Redrive: each dead-lettered message is re-checked against the current row, under its row
lock, then either replayed through Postgres (due again now, same delivery key) or dropped with
a recorded reason. What cannot be read at all goes to the parking queue, with the reason, for
an operator."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from reminders import db
from reminders.batch import Record, partial_response, read
from reminders.clock import iso
from reminders.consumer import content_check, settle
from reminders.db.instants import unreadable_reason
from reminders.errors import Conflict, InvalidInput
from reminders.observability import logger
from reminders.queue import LeaseMessage
from reminders.runtime import Runtime

TERMINAL = ("sent", "failed", "suppressed", "stale", "unknown", "dead")
OUTCOME_METRICS = {"replayed": "Replayed", "dropped": "Dropped", "parked": "Parked",
                   "dead": "Dead", "suppressed": "Suppressed", "stale": "Stale",
                   "failed": "Failed"}


def process_batch(event: dict[str, Any], rt: Runtime, context: Any = None) -> dict[str, Any]:
    rt = rt.for_function("redrive")
    # Reading the batch's rows writes nothing: a connection found gone there is replaced.
    conn, batch = rt.opening(lambda c: read(event, c))
    counts: dict[str, int] = {}

    def handle(record: Record) -> str:
        message_id = str(record["messageId"])
        message = batch.messages[message_id]
        if isinstance(message, InvalidInput):
            outcome = _park(rt, record, f"unparseable: {message}")
        elif message.delivery_id not in batch.rows:
            outcome = _park(rt, record, f"unknown delivery id {message.delivery_id}")
        else:
            outcome = db.retrying(lambda: decide(rt, conn, message, message_id))
        counts[outcome] = counts.get(outcome, 0) + 1
        return outcome

    answer = partial_response(event, handle)
    for outcome, count in counts.items():
        if outcome in OUTCOME_METRICS:
            rt.metrics.put(OUTCOME_METRICS[outcome], count)
    rt.metrics.flush()
    return answer


def _park(rt: Runtime, record: Record, reason: str) -> str:
    received = (record.get("attributes") or {}).get("ApproximateReceiveCount")
    rt.parking.send_raw(str(record.get("body") or ""), {
        "reason": reason[:250], "source_message_id": str(record["messageId"]),
        "receive_count": str(received or "?")})
    logger.warning("parked", extra={"message_id": record["messageId"], "reason": reason})
    return "parked"


def decide(rt: Runtime, conn: db.Connection, message: LeaseMessage, message_id: str) -> str:
    """Replay or drop one dead-lettered message, recording why, in one transaction that holds
    the delivery's row lock. Returns the decision."""
    now = rt.clock.now()
    with db.transaction(conn):
        ids = [message.delivery_id]
        if not db.fetch_all(conn, "deliveries_lock", {"ids": ids}):
            raise Conflict(f"delivery {message.delivery_id} is held by another transaction; "
                           "the message comes back", retryable=False)
        # As a consumer does first: a lease still pending moves onto its row (the message
        # reached consumers, and each failed before taking it), so it is replayed as one taken.
        # Taken under the row lock this transaction holds (never skipped then): taken before
        # it, a row held a moment earlier kept its lease pending, and the message was dropped
        # as "already due again" with that lease left to expire.
        db.execute(conn, "deliveries_take_leases", {
            "ids": ids, "tokens": [message.lease_token], "now": now})
        (row,) = db.fetch_all(conn, "recheck_load", {"ids": ids}, every_instant=True)
        return _decide_locked(rt, conn, row, message, message_id, now)


def _decide_locked(rt: Runtime, conn: db.Connection, row: db.Row, message: LeaseMessage,
                   message_id: str, now: datetime) -> str:
    state = row["state"]
    if state in TERMINAL:
        verdict = "already sent" if state == "sent" else f"already {state}: {row['reason']}"
        return _drop(conn, row, now, verdict, message_id)
    if state in ("scheduled", "retrying"):
        return _drop(conn, row, now, "already due again; the scanner delivers it", message_id)
    # Leased: replay only a lease this message was about, or one that has expired, and never
    # while a send is in flight (its holder settles it, or the scanner when the lease ends).
    if row["send_attempt"] is not None:
        return _drop(conn, row, now, f"a send is in flight until {iso(row['send_deadline'])}; "
                                     "its holder or the scanner settles it", message_id)
    expired = row["lease_expires_at"] <= now
    if row["lease_token"] != message.lease_token and not expired:
        return _drop(conn, row, now, "held by a newer live lease", message_id)
    token = row["lease_token"]
    unreadable = unreadable_reason(row)
    if unreadable is not None:  # loaded on its own terms: this delivery is parked, alone
        settle(conn, row, token, "failed", unreadable, None, now)
        _drop(conn, row, now, unreadable, message_id)
        return "failed"
    check = content_check(row, now)
    if check.action == "release":  # tenant paused: due again, waits for the resume
        db.execute(conn, "lease_release", {"ids": [row["id"]], "tokens": [token],
                                           "reason": check.reason, "now": now})
        return _drop(conn, row, now, check.reason, message_id)
    if check.action == "settle" and check.state is not None:
        settle(conn, row, token, check.state, check.reason, None, now)
        _drop(conn, row, now, check.reason, message_id)
        return check.state
    # The kind's budget, capped by the deployment's (REMINDERS_REDRIVE_BUDGET; 0 stops all).
    budget = min(row["redrive_budget"], rt.settings.limits.redrive_budget)
    if row["redrives"] >= budget:
        reason = f"redrive budget spent ({row['redrives']} of {budget})"
        settle(conn, row, token, "dead", reason, None, now)
        _drop(conn, row, now, reason, message_id)
        return "dead"
    replayed = db.fetch_one(conn, "delivery_replay", {
        "id": row["id"], "tenant": row["tenant"], "token": token, "now": now,
        "max_empty_leases": rt.settings.limits.max_empty_leases,
        "reason": f"replayed from the dead-letter queue (message {message_id})"})
    if replayed is None:
        return _drop(conn, row, now, "lease changed while deciding", message_id)
    if replayed["state"] == "dead":
        _event(conn, row, now, "parked dead", f"message {message_id}: a poison message")
        return "dead"
    _event(conn, row, now, "replayed", f"message {message_id}; due again now")
    logger.info("replayed", extra={"delivery_key": row["delivery_key"], "message_id": message_id})
    return "replayed"


def _drop(conn: db.Connection, row: db.Row, now: datetime, reason: str, message_id: str) -> str:
    _event(conn, row, now, "dropped", f"{reason} (message {message_id})")
    logger.info("dropped", extra={"delivery_key": row["delivery_key"], "reason": reason,
                                  "message_id": message_id})
    return "dropped"


def _event(conn: db.Connection, row: db.Row, now: datetime, event: str, detail: str) -> None:
    db.execute(conn, "event_add", {"tenant": row["tenant"], "id": row["id"], "now": now,
                                   "actor": "redrive", "event": event, "detail": detail})
