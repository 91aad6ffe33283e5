"""The consumer: for a batch of queued ``{delivery id, lease token}``, re-check each row under
its row lock, start the attempts, send them together, record the outcomes.

Three phases, each fenced on the row:

1. *Received*: the batch's leases are marked as having reached a consumer (committed at once),
   so a message that keeps failing before any send is recognised as a poison message.
2. *Start* (one transaction): lock the rows, read them afresh, decide each one by current
   state and by this consumer's own clock, and put the sends in flight on the rows (an attempt
   in the ledger and a deadline on the delivery), committed before anything is sent.
3. *Send and finish*: the sends run together, each bounded by its deadline; each outcome is
   recorded in its own savepoint, fenced on the lease token and on that send.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from reminders import db, retry
from reminders.batch import Batch, partial_response, read
from reminders.channels.base import Channel, Message, Outcome, SendResult
from reminders.clock import iso
from reminders.errors import Conflict, DatabaseUnavailable, InvalidInput, NotFound
from reminders.observability import logger
from reminders.queue import LeaseMessage
from reminders.runtime import Runtime

ACTIVE = ("scheduled", "leased", "retrying")
# What one message came to, as a metric per batch: the states, plus what wrote nothing.
OUTCOME_METRICS = {"sent": "Sent", "retrying": "Retrying", "failed": "Failed",
                   "suppressed": "Suppressed", "stale": "Stale", "unknown": "Unknown",
                   "dead": "Dead", "ignored": "MessagesIgnored", "fenced": "Fenced",
                   "released": "Released"}
# How long a send may take when its channel has no overall deadline of its own (SES and SNS:
# one attempt, bounded by the client's connect and read timeouts, 3 s and 10 s).
DEFAULT_SEND_SECONDS = 15.0
# Time after a send's deadline to record its outcome before the lease may be taken back.
SETTLE_SECONDS = 30


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
    if row["send_attempt"] is not None:
        return Decision("ignore", None, f"a send is already in flight under this lease "
                                        f"(attempt {row['send_attempt']}, until "
                                        f"{iso(row['send_deadline'])})")
    if row["lease_expires_at"] <= now:
        return Decision("ignore", None, "lease expired before the message was processed; "
                                        "the scanner will take it again")
    if row["due_at"] > now:
        return Decision("release", None, f"not due yet by the consumer's clock: due "
                                         f"{iso(row['due_at'])}, now {iso(now)}")
    check = content_check(row, now)
    if check.action == "send" and row["attempts_made"] - row["attempts_base"] >= \
            row["max_attempts"]:
        return Decision("settle", "dead", f"attempt budget spent ({row['max_attempts']} of "
                                          f"{row['max_attempts']})")
    return check


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


@dataclass
class Send:
    """One send put in flight by the start phase."""

    message_id: str
    row: db.Row
    token: Any
    attempt_id: int
    attempt_no: int
    result: SendResult | None = None


@dataclass
class BatchRun:
    """What each message of a batch came to: an outcome, or the error that fails it alone."""

    outcomes: dict[str, str] = field(default_factory=dict)
    failures: dict[str, Exception] = field(default_factory=dict)
    sends: list[Send] = field(default_factory=list)
    copies: list[tuple[str, LeaseMessage]] = field(default_factory=list)  # another copy acts


def process_batch(event: dict[str, Any], rt: Runtime, context: Any = None) -> dict[str, Any]:
    """Handle one SQS batch; return the partial batch response."""
    run = BatchRun()
    try:
        conn = rt.connection()
        batch = read(event, conn)
        run_batch(rt, conn, batch, run, _seconds_left(context))
    except (DatabaseUnavailable, Conflict) as exc:
        # Postgres is away or would not give the rows: every message not yet answered comes
        # back later. Sends already made keep their ledger entries (the scanner settles them).
        # Nothing done at all with Postgres away is an invocation error, for the Errors alarm.
        if isinstance(exc, DatabaseUnavailable) and not run.outcomes:
            raise
        logger.error("batch stopped", extra={"error": str(exc)})
        for message_id in [m for m, out in run.outcomes.items() if out == "sending"]:
            del run.outcomes[message_id]  # sent, or not: its outcome is not recorded yet
        for record in event.get("Records", []):
            if record["messageId"] not in run.outcomes:
                run.failures.setdefault(record["messageId"], exc)

    def handle(record: Any) -> None:
        failure = run.failures.get(record.message_id)
        if failure is not None:
            raise failure

    answer = partial_response(event, handle, context)
    for outcome, count in Counter(run.outcomes.values()).items():
        rt.metrics.put(OUTCOME_METRICS[outcome], count)
    rt.metrics.put("MessagesFailed", len(answer.get("batchItemFailures", [])))
    rt.metrics.flush()
    return answer


def _seconds_left(context: Any) -> float | None:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    return remaining() / 1000.0 if callable(remaining) else None


def run_batch(rt: Runtime, conn: db.Connection, batch: Batch, run: BatchRun,
              seconds_left: float | None) -> None:
    leases = _acting_messages(batch, run)
    if not leases:
        return
    bound = max(_send_seconds(rt, row["channel"]) for _, (_, row) in leases.items())
    margin = rt.settings.limits.invocation_margin
    if seconds_left is not None and seconds_left < bound + margin:
        # Not enough time left to send and record: start nothing, every message comes back.
        for message_id in leases:
            run.failures[message_id] = Conflict(
                f"not started: {seconds_left:.1f} s left in the invocation, a send needs "
                f"{bound:.0f} s plus a {margin} s margin", retryable=True)
        return
    db.execute(conn, "deliveries_mark_received", {
        "ids": [m.delivery_id for m, _ in leases.values()],
        "tokens": [m.lease_token for m, _ in leases.values()]})
    db.retrying(lambda: _start(rt, conn, leases, run))
    _send_all(rt, run.sends)
    for send in run.sends:
        run.outcomes[send.message_id] = _finish(rt, conn, send)
    _advance_ended_series(rt, conn, batch, run)


def _advance_ended_series(rt: Runtime, conn: db.Connection, batch: Batch, run: BatchRun) -> None:
    """Make the next occurrence of each series whose delivery this batch ended, at once; what
    cannot be advanced now (rows held elsewhere) stays flagged for the scanner's next pass."""
    from reminders.series import advance_flagged

    ended = [batch.rows[m.delivery_id] for mid, m in batch.messages.items()
             if isinstance(m, LeaseMessage) and m.delivery_id in batch.rows
             and run.outcomes.get(mid) not in (None, "ignored", "released", "fenced", "retrying")
             and batch.rows[m.delivery_id]["recurring"]]
    if ended:
        try:
            advance_flagged(conn, ended, rt.clock.now(), actor="consumer")
        except Conflict as exc:
            logger.warning("series left for the scanner", extra={"error": str(exc)})


def _acting_messages(batch: Batch, run: BatchRun) -> dict[str, tuple[LeaseMessage, db.Row]]:
    """The messages that may act, by SQS message id. A malformed message or an unknown id
    fails alone; of several copies for one delivery, the one whose lease is current acts."""
    chosen: dict[int, tuple[str, LeaseMessage]] = {}
    for message_id, message in batch.messages.items():
        if isinstance(message, InvalidInput):
            logger.error("malformed message", extra={"message_id": message_id,
                                                     "error": str(message)})
            run.failures[message_id] = InvalidInput(f"message {message_id}: {message}")
            continue
        row = batch.rows.get(message.delivery_id)
        if row is None:
            logger.error("unknown delivery", extra={"message_id": message_id,
                                                    "delivery_id": message.delivery_id})
            run.failures[message_id] = NotFound(f"message {message_id}: no delivery with id "
                                                f"{message.delivery_id}")
            continue
        other = chosen.get(message.delivery_id)
        if other is None or (row["lease_token"] == message.lease_token
                             and row["lease_token"] != other[1].lease_token):
            if other is not None:
                run.copies.append(other)
            chosen[message.delivery_id] = (message_id, message)
        else:
            run.copies.append((message_id, message))
    return {mid: (m, batch.rows[m.delivery_id]) for mid, m in chosen.values()}


def _start(rt: Runtime, conn: db.Connection,
           leases: dict[str, tuple[LeaseMessage, db.Row]], run: BatchRun) -> None:
    """Lock, re-read and decide every row in one transaction; put the sends in flight."""
    run.sends.clear()  # a retried transaction starts over
    for message_id in leases:
        run.failures.pop(message_id, None)
    decided: dict[str, str] = {}
    now = rt.clock.now()
    with db.transaction(conn):
        ids = sorted({m.delivery_id for m, _ in leases.values()})
        locked = {int(r["id"]) for r in db.fetch_all(conn, "deliveries_lock", {"ids": ids})}
        rows = {int(r["id"]): r for r in db.fetch_all(conn, "recheck_load",
                                                      {"ids": sorted(locked)})}
        for message_id, (message, _) in leases.items():
            row = rows.get(message.delivery_id)
            if row is None:  # another transaction holds it: this message comes back later
                run.failures[message_id] = Conflict(
                    f"message {message_id}: delivery {message.delivery_id} is held by "
                    "another transaction", retryable=True)
                continue
            decided[message_id] = _start_one(rt, conn, row, message, message_id, now, run)
        for message_id, message in run.copies:
            row = rows.get(message.delivery_id)
            if row is not None:
                _ignore(conn, row, now, "another copy of this message in the same batch acted"
                        if row["lease_token"] == message.lease_token else
                        f"message's lease is not current (delivery is {row['state']})")
            decided[message_id] = "ignored"
    run.outcomes.update(decided)


def _ignore(conn: db.Connection, row: db.Row, now: datetime, reason: str) -> str:
    db.execute(conn, "event_add", {"id": row["id"], "tenant": row["tenant"], "now": now,
                                   "actor": "consumer", "event": "message ignored",
                                   "detail": reason})
    logger.info("message ignored", extra={"delivery_key": row["delivery_key"], "reason": reason})
    return "ignored"


def _start_one(rt: Runtime, conn: db.Connection, row: db.Row, message: LeaseMessage,
               message_id: str, now: datetime, run: BatchRun) -> str:
    token = message.lease_token
    decision = recheck(row, token, now)
    base = {"id": row["id"], "tenant": row["tenant"], "now": now}
    if decision.action == "ignore":
        return _ignore(conn, row, now, decision.reason)
    if decision.action == "release":
        db.execute(conn, "lease_release", {"ids": [row["id"]], "tokens": [token],
                                           "reason": decision.reason, "now": now})
        return "released"
    if decision.action == "settle":
        assert decision.state is not None
        settled = settle(conn, row, token, decision.state, decision.reason, None, now)
        if settled:
            db.execute(conn, "event_add", {**base, "actor": "consumer",
                                           "event": f"re-check: {decision.state}",
                                           "detail": decision.reason})
        return decision.state if settled else "fenced"
    deadline = now + timedelta(seconds=_send_seconds(rt, row["channel"]) + SETTLE_SECONDS)
    attempt = db.fetch_one(conn, "attempt_start", {"id": row["id"], "token": token, "now": now,
                                                   "deadline": deadline})
    if attempt is None:  # cannot happen under the row lock; kept as the fence's answer
        logger.warning("attempt refused by fence", extra={"delivery_key": row["delivery_key"]})
        return "fenced"
    run.sends.append(Send(message_id, row, token, int(attempt["id"]),
                          int(attempt["attempt_no"])))
    return "sending"


def _send_seconds(rt: Runtime, channel: str) -> float:
    """The longest one send on this channel may take (its channel's overall deadline)."""
    made: Channel = rt.channels[channel]
    return float(getattr(made, "send_timeout", DEFAULT_SEND_SECONDS))


def _send_one(rt: Runtime, send: Send) -> None:
    row = send.row
    outgoing = Message(
        delivery_key=row["delivery_key"], tenant=row["tenant"], kind=row["kind"],
        recipient=row["recipient"], destination=row["destination"], payload=row["payload"],
        revision=row["revision"], occurrence_at=row["occurrence_at"],
        attempt=send.attempt_no, secret=row["endpoint_secret"])
    try:
        send.result = rt.channels[row["channel"]].send(outgoing, rt.clock.now())
    except Exception as exc:  # noqa: BLE001 (a channel bug must not hide a possible send)
        logger.exception("channel raised", extra={"delivery_key": row["delivery_key"]})
        send.result = SendResult(Outcome.UNKNOWN, f"channel raised {type(exc).__name__}: {exc}")


def _send_all(rt: Runtime, sends: list[Send]) -> None:
    """Every send of the batch at once (bounded): the batch takes about one send's time."""
    if len(sends) == 1:
        _send_one(rt, sends[0])
        return
    if sends:
        workers = min(len(sends), rt.settings.limits.send_concurrency)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="send") as pool:
            list(pool.map(lambda s: _send_one(rt, s), sends))


def _finish(rt: Runtime, conn: db.Connection, send: Send) -> str:
    """Record one send's outcome: the attempt, then the delivery, fenced on this send."""
    row, result = send.row, send.result
    assert result is not None
    finished = rt.clock.now()
    channel = rt.channels[row["channel"]]
    state, reason, due_at = _outcome_state(rt, row, send.attempt_no, result, finished,
                                           channel.honours_idempotency_key)
    attempt = {"attempt_id": send.attempt_id, "tenant": row["tenant"], "now": finished,
               "outcome": result.outcome.value, "status_code": result.status_code,
               "detail": result.detail[:500], "retry_after": result.retry_after}
    try:
        with db.transaction(conn):
            db.execute(conn, "attempt_finish", attempt)
            settled = settle(conn, row, send.token, state, reason, due_at, finished,
                             attempt_no=send.attempt_no)
            if not settled:
                db.execute(conn, "event_add", {
                    "id": row["id"], "tenant": row["tenant"], "now": finished,
                    "actor": "consumer", "event": "outcome after losing the lease",
                    "detail": f"{result.outcome.value}: {result.detail}"})
    except Conflict as exc:
        # The delivery row is held elsewhere (an application transaction left open): keep the
        # outcome in the ledger; the scanner settles the delivery from it when the lease ends.
        db.execute(conn, "attempt_finish", attempt)
        logger.warning("outcome recorded, delivery not settled", extra={
            "delivery_key": row["delivery_key"], "outcome": result.outcome.value,
            "error": str(exc)})
        return "fenced"
    logger.info("delivery attempted", extra={
        "delivery_key": row["delivery_key"], "outcome": result.outcome.value, "state": state,
        "detail": result.detail, "fenced": not settled})
    return state if settled else "fenced"


def _outcome_state(rt: Runtime, row: db.Row, attempt_no: int, result: SendResult,
                   now: datetime, idempotent: bool) -> tuple[str, str, datetime | None]:
    if result.outcome is Outcome.SENT:
        return "sent", result.detail, None
    if result.outcome is Outcome.PERMANENT:
        return "failed", result.detail, None
    if result.outcome is Outcome.UNKNOWN and not idempotent:
        return "unknown", f"send may have happened: {result.detail}", None
    policy = retry.Policy(max_attempts=row["max_attempts"], backoff_base=row["backoff_base"],
                          backoff_cap=row["backoff_cap"], stale_after=row["stale_after"],
                          max_delay=timedelta(seconds=rt.settings.limits.max_retry_delay))
    nxt = retry.next_try(policy, attempts_made=attempt_no - row["attempts_base"],
                         occurrence_at=row["occurrence_at"], now=now,
                         retry_after=result.retry_after, rng=rt.rng)
    return nxt.state, f"{result.detail}; {nxt.reason}", nxt.due_at


def settle(conn: db.Connection, row: db.Row, token: Any, state: str, reason: str,
           due_at: datetime | None, now: datetime, *, attempt_no: int | None = None) -> bool:
    """Fenced write of the delivery's next state (no send in flight, or this one). A terminal
    recurring delivery is flagged for the scanner, which materialises its series' next one."""
    done = db.fetch_one(conn, "delivery_settle", {
        "id": row["id"], "tenant": row["tenant"], "token": token, "state": state,
        "reason": reason, "due_at": due_at, "now": now, "attempt_no": attempt_no})
    return done is not None
