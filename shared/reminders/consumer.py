"""The consumer: for each queued ``{delivery id, lease token}``, re-check the row, record the
attempt, send once through the channel, record the outcome. Fenced on the lease token."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from reminders import db, retry
from reminders.batch import partial_response, read
from reminders.channels.base import Message, Outcome, SendResult
from reminders.clock import iso
from reminders.errors import InvalidInput, NotFound
from reminders.observability import logger
from reminders.queue import LeaseMessage
from reminders.runtime import Runtime

ACTIVE = ("scheduled", "leased", "retrying")
# What one message came to, as a metric per batch: the states, plus what wrote nothing.
OUTCOME_METRICS = {"sent": "Sent", "retrying": "Retrying", "failed": "Failed",
                   "suppressed": "Suppressed", "stale": "Stale", "unknown": "Unknown",
                   "dead": "Dead", "ignored": "MessagesIgnored", "fenced": "Fenced",
                   "released": "Released"}


@dataclass(frozen=True)
class Decision:
    action: str          # "send", "ignore" (not ours to write), "settle", "release"
    state: str | None    # the state to settle in
    reason: str


def recheck(row: db.Row, token: Any, now: datetime) -> Decision:
    """Current state decides: nothing carried by the message is trusted but the token."""
    if row["state"] != "leased" or row["lease_token"] != token:
        why = f": {row['reason']}" if row["reason"] else ""
        return Decision("ignore", None,
                        f"message's lease is not current (delivery is {row['state']}{why})")
    if row["lease_expires_at"] <= now:
        return Decision("ignore", None, "lease expired before the message was processed; "
                                        "the scanner will take it again")
    return content_check(row, now)


def content_check(row: db.Row, now: datetime) -> Decision:
    """Is the delivery still wanted, as the row and its schedule say now?"""
    if row["schedule_state"] == "cancelled":
        return Decision("settle", "suppressed", "cancelled")
    if row["generation"] != row["schedule_generation"]:
        return Decision("settle", "suppressed", "rescheduled")
    if row["revision"] != row["schedule_revision"]:
        return Decision("settle", "suppressed",
                        f"revision moved on ({row['revision']} -> {row['schedule_revision']})")
    if row["opted_out"]:
        return Decision("settle", "suppressed", f"opted out of {row['channel']}")
    stale_after = row["stale_after"]
    if stale_after is not None and now > row["occurrence_at"] + stale_after:
        return Decision("settle", "stale", f"missed its window: due "
                                           f"{iso(row['occurrence_at'])}, "
                                           f"stale after {stale_after}")
    if row["recurring"]:
        from reminders.series import superseded_by

        newer = superseded_by(row, now)
        if newer is not None:
            return Decision("settle", "stale", f"skipped: a newer occurrence "
                                               f"({newer.local.isoformat()}) is already due")
    if row["tenant_paused"]:
        return Decision("release", None, "tenant paused; waits until resumed")
    if row["channel"] == "webhook" and not row["endpoint_secret"]:
        return Decision("settle", "failed",
                        f"no webhook endpoint registered for {row['destination']}")
    return Decision("send", None, "")


def process_batch(event: dict[str, Any], rt: Runtime, context: Any = None) -> dict[str, Any]:
    """Handle one SQS batch; return the partial batch response."""
    conn = rt.connection()
    batch = read(event, conn)
    outcomes: Counter[str] = Counter()

    def handle(record: SQSRecord) -> None:
        message = batch.messages[record.message_id]
        if isinstance(message, InvalidInput):
            logger.error("malformed message", extra={"message_id": record.message_id,
                                                     "error": str(message)})
            raise InvalidInput(f"message {record.message_id}: {message}")
        row = batch.rows.get(message.delivery_id)
        if row is None:
            logger.error("unknown delivery", extra={"message_id": record.message_id,
                                                    "delivery_id": message.delivery_id})
            raise NotFound(f"message {record.message_id}: no delivery with id "
                           f"{message.delivery_id}")
        outcomes[deliver(rt, conn, row, message)] += 1

    answer = partial_response(event, handle, context)
    for outcome, count in outcomes.items():
        rt.metrics.put(OUTCOME_METRICS[outcome], count)
    rt.metrics.put("MessagesFailed", len(answer.get("batchItemFailures", [])))
    rt.metrics.flush()
    return answer


def deliver(rt: Runtime, conn: db.Connection, row: db.Row, message: LeaseMessage) -> str:
    """Re-check, attempt, send, record. Returns what happened, for logs and tests."""
    now = rt.clock.now()
    token = message.lease_token
    decision = recheck(row, token, now)
    base = {"id": row["id"], "tenant": row["tenant"], "now": now}
    if decision.action == "ignore":
        db.execute(conn, "event_add", {**base, "actor": "consumer", "event": "message ignored",
                                       "detail": decision.reason})
        logger.info("message ignored", extra={"delivery_key": row["delivery_key"],
                                              "reason": decision.reason})
        return "ignored"
    if decision.action == "release":
        db.execute(conn, "lease_release", {"ids": [row["id"]], "tokens": [token],
                                           "reason": decision.reason, "now": now})
        return "released"
    if decision.action == "settle":
        assert decision.state is not None
        with db.transaction(conn):
            settled = settle(conn, row, token, decision.state, decision.reason, None, now)
            if settled:
                db.execute(conn, "event_add", {**base, "actor": "consumer",
                                               "event": f"re-check: {decision.state}",
                                               "detail": decision.reason})
        return decision.state if settled else "fenced"

    channel = rt.channels[row["channel"]]
    if row["open_attempt"]:
        parked = close_open_attempt(conn, row, token, channel.honours_idempotency_key, now)
        if parked is not None:
            return parked
    attempt = db.fetch_one(conn, "attempt_start", {"id": row["id"], "token": token, "now": now,
                                                   "attempts_made": row["attempts_made"]})
    if attempt is None:  # the lease was taken over, settled or tried since the batch was read
        logger.warning("attempt refused by fence", extra={"delivery_key": row["delivery_key"]})
        return "fenced"
    outgoing = Message(
        delivery_key=row["delivery_key"], tenant=row["tenant"], kind=row["kind"],
        recipient=row["recipient"], destination=row["destination"], payload=row["payload"],
        revision=row["revision"], occurrence_at=row["occurrence_at"],
        attempt=int(attempt["attempt_no"]), secret=row["endpoint_secret"])
    try:
        result = channel.send(outgoing, now)
    except Exception as exc:  # noqa: BLE001 (a channel bug must not hide a possible send)
        logger.exception("channel raised", extra={"delivery_key": row["delivery_key"]})
        result = SendResult(Outcome.UNKNOWN, f"channel raised {type(exc).__name__}: {exc}")
    finished = rt.clock.now()
    state, reason, due_at = _outcome_state(rt, row, int(attempt["attempt_no"]), result, finished,
                                           channel.honours_idempotency_key)
    with db.transaction(conn):
        db.execute(conn, "attempt_finish", {
            "attempt_id": attempt["id"], "tenant": row["tenant"], "now": finished,
            "outcome": result.outcome.value, "status_code": result.status_code,
            "detail": result.detail[:500], "retry_after": result.retry_after})
        settled = settle(conn, row, token, state, reason, due_at, finished)
        if not settled:
            db.execute(conn, "event_add", {**base, "now": finished, "actor": "consumer",
                                           "event": "outcome after losing the lease",
                                           "detail": f"{result.outcome.value}: {result.detail}"})
    logger.info("delivery attempted", extra={
        "delivery_key": row["delivery_key"], "outcome": result.outcome.value, "state": state,
        "detail": result.detail, "fenced": not settled})
    return state if settled else "fenced"


UNRECORDED = "a previous try started a send and did not record its outcome"


def close_open_attempt(conn: db.Connection, row: db.Row, token: Any, idempotent: bool,
                       now: datetime) -> str | None:
    """A try under this lease crashed mid-send. With a channel that deduplicates on the key,
    close it as unknown and go on (None); otherwise park the delivery as ``unknown``."""
    with db.transaction(conn):
        db.execute(conn, "attempts_close_open", {"id": row["id"], "tenant": row["tenant"],
                                                 "token": token, "now": now})
        if idempotent:  # resent with the same key; the closed attempt stays counted
            return None
        settled = settle(conn, row, token, "unknown",
                         f"{UNRECORDED}; not resent: the channel cannot deduplicate", None, now)
    return "unknown" if settled else "fenced"


def _outcome_state(rt: Runtime, row: db.Row, attempts_made: int, result: SendResult,
                   now: datetime, idempotent: bool) -> tuple[str, str, datetime | None]:
    if result.outcome is Outcome.SENT:
        return "sent", result.detail, None
    if result.outcome is Outcome.PERMANENT:
        return "failed", result.detail, None
    if result.outcome is Outcome.UNKNOWN and not idempotent:
        return "unknown", f"send may have happened: {result.detail}", None
    policy = retry.Policy(max_attempts=row["max_attempts"], backoff_base=row["backoff_base"],
                          backoff_cap=row["backoff_cap"], stale_after=row["stale_after"])
    nxt = retry.next_try(policy, attempts_made=attempts_made, occurrence_at=row["occurrence_at"],
                         now=now, retry_after=result.retry_after, rng=rt.rng)
    return nxt.state, f"{result.detail}; {nxt.reason}", nxt.due_at


def settle(conn: db.Connection, row: db.Row, token: Any, state: str, reason: str,
            due_at: datetime | None, now: datetime) -> bool:
    """Fenced write of the delivery's next state; a terminal state advances its series."""
    done = db.fetch_one(conn, "delivery_settle", {
        "id": row["id"], "tenant": row["tenant"], "token": token, "state": state,
        "reason": reason, "due_at": due_at, "now": now})
    if done is None:
        return False
    if row["recurring"] and state not in ACTIVE:
        from reminders.series import advance_after_terminal

        advance_after_terminal(conn, row["tenant"], int(row["schedule_id"]), row["recipient"], now)
    return True
