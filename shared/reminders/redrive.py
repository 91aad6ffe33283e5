"""Redrive: each dead-lettered message is re-checked against the current row, then either
replayed through Postgres (due again now, same delivery key) or dropped with a recorded reason.
What cannot be read at all goes to the parking queue, with the reason, for an operator."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from reminders import db
from reminders.batch import partial_response, read
from reminders.consumer import close_open_attempt, content_check, settle
from reminders.errors import InvalidInput
from reminders.observability import logger
from reminders.queue import LeaseMessage
from reminders.runtime import Runtime

TERMINAL = ("sent", "failed", "suppressed", "stale", "unknown", "dead")


def process_batch(event: dict[str, Any], rt: Runtime, context: Any = None) -> dict[str, Any]:
    conn = rt.connection()
    batch = read(event, conn)

    def handle(record: SQSRecord) -> str:
        message = batch.messages[record.message_id]
        if isinstance(message, InvalidInput):
            return _park(rt, record, f"unparseable: {message}")
        row = batch.rows.get(message.delivery_id)
        if row is None:
            return _park(rt, record, f"unknown delivery id {message.delivery_id}")
        return decide(rt, conn, row, message, record.message_id)

    return partial_response(event, handle, context)


def _park(rt: Runtime, record: SQSRecord, reason: str) -> str:
    rt.parking.send_raw(record.body or "", {
        "reason": reason[:250], "source_message_id": record.message_id,
        "receive_count": str(record.attributes.approximate_receive_count or "?")})
    logger.warning("parked", extra={"message_id": record.message_id, "reason": reason})
    return "parked"


def decide(rt: Runtime, conn: db.Connection, row: db.Row, message: LeaseMessage,
           message_id: str) -> str:
    """Replay or drop one dead-lettered message, recording why. Returns the decision."""
    now = rt.clock.now()
    state = row["state"]
    if state in TERMINAL:
        verdict = "already sent" if state == "sent" else f"already {state}: {row['reason']}"
        return _drop(conn, row, now, verdict, message_id)
    if state in ("scheduled", "retrying"):
        return _drop(conn, row, now, "already due again; the scanner delivers it", message_id)
    # Leased: replay only a lease this message was about, or one that has expired.
    expired = row["lease_expires_at"] <= now
    if row["lease_token"] != message.lease_token and not expired:
        return _drop(conn, row, now, "held by a newer live lease", message_id)
    token = row["lease_token"]
    check = content_check(row, now)
    with db.transaction(conn):
        if check.action == "release":  # tenant paused: due again, waits for the resume
            db.execute(conn, "lease_release", {"ids": [row["id"]], "tokens": [token],
                                               "reason": check.reason, "now": now})
            return _drop(conn, row, now, check.reason, message_id)
        if check.action == "settle" and check.state is not None:
            settle(conn, row, token, check.state, check.reason, None, now)
            return _drop(conn, row, now, check.reason, message_id)
        # The kind's budget, capped by the deployment's (REMINDERS_REDRIVE_BUDGET; 0 stops all).
        budget = min(row["redrive_budget"], rt.settings.limits.redrive_budget)
        if row["open_attempt"]:
            channel = rt.channels[row["channel"]]
            if close_open_attempt(conn, row, token, channel.honours_idempotency_key,
                                  now) is not None:
                return _drop(conn, row, now, "a send may have happened: parked as unknown",
                             message_id)
        if row["redrives"] >= budget:
            reason = f"redrive budget spent ({row['redrives']} of {budget})"
            settle(conn, row, token, "dead", reason, None, now)
            return _drop(conn, row, now, reason, message_id)
        replayed = db.fetch_one(conn, "delivery_replay", {
            "id": row["id"], "tenant": row["tenant"], "token": token, "now": now,
            "reason": f"replayed from the dead-letter queue (message {message_id})"})
        if replayed is None:
            return _drop(conn, row, now, "lease changed while deciding", message_id)
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
