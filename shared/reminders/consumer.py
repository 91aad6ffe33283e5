"""The consumer: for a batch of queued ``{delivery id, lease token}``, re-check each row under
its row lock, start the attempts, send them together, record the outcomes.

Three phases, each fenced on the row, each a few statements for the whole batch sent together
(psycopg's pipeline mode), so a batch costs a handful of round trips whatever its size:

1. *Received*: the batch's leases are marked as having reached a consumer (committed on its
   own), so a message that keeps failing before any send is recognised as a poison message.
2. *Start* (one transaction): lock the rows, read them afresh, decide each one by current
   state and by this consumer's own clock, and put the sends in flight on the rows (attempts
   in the ledger and a deadline on each delivery), committed before anything is sent.
3. *Send and finish*: the sends run together, each bounded by its deadline; the outcomes are
   recorded in one transaction, fenced on the lease token and on each send (one by one if the
   whole batch cannot be written, so one held row never costs the others their outcome).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from reminders import db, pacing, retry
from reminders.batch import parse, partial_response
from reminders.channels.base import Message, Outcome, SendResult
from reminders.cli_format import duration
from reminders.clock import TimeLeft, iso
from reminders.db.instants import unreadable_reason
from reminders.endpoints import signing_secrets
from reminders.errors import Conflict, DatabaseUnavailable, InvalidInput, NotFound
from reminders.observability import logger
from reminders.payloads import read_payload
from reminders.queue import LeaseMessage
from reminders.runtime import Runtime
from reminders.secret_box import SecretUnavailable

ACTIVE = ("scheduled", "leased", "retrying")
# What one message came to, as a metric per batch: the states, plus what wrote nothing.
OUTCOME_METRICS = {"sent": "Sent", "retrying": "Retrying", "failed": "Failed",
                   "suppressed": "Suppressed", "stale": "Stale", "unknown": "Unknown",
                   "dead": "Dead", "ignored": "MessagesIgnored", "fenced": "Fenced",
                   "released": "Released", "paced": "Paced"}
# How long a send may take when its channel has no overall deadline of its own (SES and SNS:
# one attempt, bounded by the client's connect and read timeouts, 3 s and 10 s).
DEFAULT_SEND_SECONDS = 15.0
# Time after a send's deadline to record its outcome before the lease may be taken back.
SETTLE_SECONDS = 30
# How long one transaction may wait for a database connection before its statement runs: RDS
# Proxy's borrow timeout as the stack sets it (infra/settings.py, PROXY_BORROW_TIMEOUT_SECONDS).
DB_WAIT_SECONDS = 5


@dataclass(frozen=True)
class Decision:
    action: str          # "send", "ignore" (not ours to write), "settle", "release"
    state: str | None    # the state to settle in
    reason: str


TENANT_PAUSED = "tenant paused; waits until resumed"
SCHEDULE_PAUSED = "schedule paused; waits until resumed"


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
    unreadable = unreadable_reason(row)
    if unreadable is not None:  # loaded on its own terms (recheck_load): parks it alone
        return Decision("settle", "failed", unreadable)
    if row["lease_expires_at"] <= now:
        return Decision("ignore", None, "lease expired before the message was processed; "
                                        "the scanner will take it again")
    if row["due_at"] > now:
        return Decision("release", None, f"not due yet by the consumer's clock: due "
                                         f"{iso(row['due_at'])}, now {iso(now)}")
    check = content_check(row, now)
    if check.action == "send" and row["attempts_made"] - row["attempts_base"] >= \
            row["max_attempts"]:
        spent = row["attempts_made"] - row["attempts_base"]
        return Decision("settle", "dead", f"attempt budget spent ({spent} of "
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
    if stale_after is not None and now > row["stale_from"] + stale_after:
        since = ("" if row["stale_from"] == row["occurrence_at"]
                 else f", backfilled {iso(row['stale_from'])}")
        return Decision("settle", "stale", f"missed its window: due "
                                           f"{iso(row['occurrence_at'])}{since}, "
                                           f"stale after {duration(stale_after)}")
    if row["recurring"] and row["origin"] == "series":  # a trigger or backfill is off-series
        from reminders.series import superseded_by

        newer = superseded_by(row, now)
        if newer is not None:
            return Decision("settle", "stale", f"skipped: a newer occurrence "
                                               f"({newer.local.isoformat()}) is already due")
    if row["tenant_paused"]:
        return Decision("release", None, TENANT_PAUSED)
    if row["schedule_paused"]:
        return Decision("release", None, SCHEDULE_PAUSED)
    if row["channel"] == "webhook" and row["endpoint_id"] is None:
        return Decision("settle", "failed",
                        f"no webhook endpoint registered for {row['destination']}")
    if isinstance(row["payload"], str):  # as recheck_load reads it: parsed here, row by row
        try:
            row["payload"] = read_payload(row["payload"])
        except ValueError as exc:
            return Decision("settle", "failed", f"payload cannot be read back: {exc}")
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
    ended: list[db.Row] = field(default_factory=list)  # recurring deliveries this batch ended


@dataclass
class Writes:
    """What the start phase decided, as a few statements for the whole batch."""

    events: list[tuple[db.Row, str, str]] = field(default_factory=list)   # row, event, detail
    settles: list[tuple[str, db.Row, Any, str, str]] = field(default_factory=list)
    releases: dict[str, list[tuple[db.Row, Any]]] = field(default_factory=dict)  # by reason
    starts: list[tuple[str, db.Row, Any, datetime]] = field(default_factory=list)
    # Sends that found no token (pacing): message, row, token, due again at, reason.
    waits: list[tuple[str, db.Row, Any, datetime, str]] = field(default_factory=list)

    def submit(self, conn: db.Connection, now: datetime) -> tuple[
            db.Pending | None, db.Pending | None, db.Pending | None]:
        for reason, leases in self.releases.items():
            db.submit(conn, "lease_release", {"ids": [r["id"] for r, _ in leases],
                                              "tokens": [t for _, t in leases],
                                              "reason": reason, "now": now})
        settled = None
        if self.settles:
            settled = db.submit(conn, "deliveries_settle", settle_arrays(
                [(row, token, state, reason, None, None)
                 for _, row, token, state, reason in self.settles], now))
        if self.events:
            db.submit(conn, "events_add", {
                "tenants": [r["tenant"] for r, _, _ in self.events],
                "ids": [r["id"] for r, _, _ in self.events],
                "events": [e for _, e, _ in self.events],
                "details": [d for _, _, d in self.events], "now": now, "actor": "consumer"})
        waited = None
        if self.waits:
            waited = db.submit(conn, "lease_release_paced", {
                "ids": [r["id"] for _, r, _, _, _ in self.waits],
                "tokens": [t for _, _, t, _, _ in self.waits],
                "due_ats": [d for _, _, _, d, _ in self.waits],
                "reasons": [why for *_, why in self.waits], "now": now})
        started = None
        if self.starts:
            started = db.submit(conn, "attempts_start", {
                "ids": [r["id"] for _, r, _, _ in self.starts],
                "tokens": [t for _, _, t, _ in self.starts],
                "deadlines": [d for _, _, _, d in self.starts], "now": now})
        return settled, started, waited


def process_batch(event: dict[str, Any], rt: Runtime, context: Any = None) -> dict[str, Any]:
    """Handle one SQS batch; return the partial batch response."""
    rt = rt.for_function("consumer")
    run = BatchRun()
    try:
        conn = rt.connection()
        if rt.settings.email_rate_from_account:
            pacing.account_default(conn, rt.channels["email"], rt.settings.database_url,
                                   rt.clock.now())
        run_batch(rt, conn, parse(event), run, TimeLeft.of(context))
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

    def handle(record: dict[str, Any]) -> None:
        failure = run.failures.get(record["messageId"])
        if failure is not None:
            raise failure

    answer = partial_response(event, handle)
    counts = Counter(run.outcomes.values())
    for outcome, count in counts.items():
        rt.metrics.put(OUTCOME_METRICS[outcome], count)
    failed = len(answer.get("batchItemFailures", []))
    rt.metrics.put("MessagesFailed", failed)
    config_errors = Counter(s.row["channel"] for s in run.sends
                            if s.result is not None and s.result.extra.get("config_error"))
    for channel, count in config_errors.items():
        rt.metrics.put("SendConfigErrors", count, dimensions={"channel": channel})
    rt.metrics.flush()
    logger.info("batch handled", extra={"outcomes": dict(counts), "failed": failed})
    return answer


def record_seconds(rt: Runtime) -> float:
    """The longest recording a batch's outcomes may take: one transaction, waiting for a
    connection through the proxy, then for its statement."""
    return DB_WAIT_SECONDS + rt.settings.limits.statement_timeout_ms / 1000.0


def _time_needed(rt: Runtime) -> tuple[float, str]:
    """Time a batch needs left to start its sends: the longest send, recording the outcomes,
    and the margin; and how that reads in a message."""
    bound = max(_send_seconds(rt, channel) for channel in rt.channels)
    margin = rt.settings.limits.invocation_margin
    record = record_seconds(rt)
    return bound + record + margin, (f"a send needs {bound:.0f} s, recording {record:.0f} s, "
                                     f"plus a {margin} s margin")


def run_batch(rt: Runtime, conn: db.Connection,
              messages: dict[str, LeaseMessage | InvalidInput], run: BatchRun,
              time_left: TimeLeft) -> None:
    leases: dict[str, LeaseMessage] = {}
    for message_id, message in messages.items():
        if isinstance(message, InvalidInput):
            logger.error("malformed message", extra={"message_id": message_id,
                                                     "error": str(message)})
            run.failures[message_id] = InvalidInput(f"message {message_id}: {message}")
        else:
            leases[message_id] = message
    if not leases:
        return
    needed, why = _time_needed(rt)
    if time_left.short_of(needed):
        # Not enough time left to send and record: start nothing, every message comes back.
        for message_id in leases:
            run.failures[message_id] = Conflict(
                f"not started: {time_left.seconds():.1f} s left in the invocation, {why}",
                retryable=True)
        return
    db.retrying(lambda: _start(rt, conn, leases, run, time_left))
    _send_all(rt, run.sends)
    _finish(rt, conn, run, time_left)
    if not time_left.short_of(record_seconds(rt)):  # else the scanner advances them
        _advance_ended_series(rt, conn, run)


def _start(rt: Runtime, conn: db.Connection, leases: dict[str, LeaseMessage],
           run: BatchRun, time_left: TimeLeft) -> None:
    """Take the leases (received); then, in one transaction, lock the rows, read them afresh,
    decide each message and write every decision, the attempts included. Taking the leases and
    the rows' locks may have used the invocation's time: if what is left no longer covers a
    send and its recording, no attempt is started and those messages come back, un-attempted
    (their leases still theirs)."""
    run.sends.clear()  # a retried transaction starts over
    run.ended.clear()
    for message_id in leases:
        run.failures.pop(message_id, None)
        run.outcomes.pop(message_id, None)
    now = rt.clock.now()
    ids = sorted({m.delivery_id for m in leases.values()})
    writes = Writes()
    decided: dict[str, str] = {}
    acting: dict[str, tuple[LeaseMessage, db.Row]] = {}
    with db.pipeline(conn) as pipe:
        db.submit(conn, "deliveries_take_leases", {
            "ids": [m.delivery_id for m in leases.values()],
            "tokens": [m.lease_token for m in leases.values()], "now": now})
        db.sync(pipe)  # committed on its own, whatever happens next
        # One implicit transaction from here to the end of the pipeline: the row locks are
        # held while the decisions are made, and the writes commit together.
        locked = db.submit(conn, "deliveries_lock", {"ids": ids})
        # Each row on its own terms: one holding an instant Python cannot hold is parked by
        # its re-check, never the batch's read.
        loaded = db.submit(conn, "recheck_load", {"ids": ids}, every_instant=True)
        held = {int(r["id"]) for r in locked.rows()}
        rows = {int(r["id"]): r for r in loaded.rows()}
        for message_id, message in _acting(leases, rows).items():
            row = rows.get(message.delivery_id)
            if row is None:
                logger.error("unknown delivery", extra={
                    "message_id": message_id, "delivery_id": message.delivery_id})
                run.failures[message_id] = NotFound(
                    f"message {message_id}: no delivery with id {message.delivery_id}")
            elif message.delivery_id not in held:  # comes back later
                run.failures[message_id] = Conflict(
                    f"message {message_id}: delivery {message.delivery_id} is held by "
                    "another transaction", retryable=True)
            elif row["pending_token"] is not None and \
                    row["pending_token"] == message.lease_token and \
                    row["pending_expires_at"] > now:
                # Its row was held when the batch took its leases: the lease is still pending,
                # and the message comes back to take it. (One whose lease has expired is late:
                # re-checked below, it is ignored, and the scanner's reclaim makes it due.)
                run.failures[message_id] = Conflict(
                    f"message {message_id}: delivery {message.delivery_id} was held by another "
                    "transaction; its lease is still pending", retryable=True)
            else:
                decided[message_id] = _decide(rt, row, message, message_id, now, writes)
                acting[message_id] = (message, row)
        for message_id, message in leases.items():
            row = rows.get(message.delivery_id)
            if message_id in decided or message_id in run.failures or row is None:
                continue
            decided[message_id] = "ignored"  # a second copy in this batch
            writes.events.append((row, "message ignored", (
                "another copy of this message in the same batch acted"
                if row["lease_token"] == message.lease_token else
                f"message's lease is not current (delivery is {row['state']})")))
        needed, why = _time_needed(rt)
        if writes.starts and time_left.short_of(needed):
            for message_id, *_ in writes.starts:
                del decided[message_id]
                run.failures[message_id] = Conflict(
                    f"not started: {time_left.seconds():.1f} s left in the invocation once "
                    f"its rows were locked, {why}", retryable=True)
            writes.starts.clear()
        _pace(rt, conn, writes, now)
        settled, started, waited = writes.submit(conn, now)
    # Leaving the pipeline committed the writes; their results are read now.
    states = {int(r["id"]): r["state"] for r in settled.rows()} if settled else {}
    released = {int(r["id"]) for r in waited.rows()} if waited else set()
    for message_id, row, *_ in writes.waits:
        decided[message_id] = "paced" if int(row["id"]) in released else "fenced"
    attempts = {int(r["delivery_id"]): r for r in started.rows()} if started else {}
    for message_id, *_ in writes.settles:
        message, row = acting[message_id]
        decided[message_id] = states.get(message.delivery_id, "fenced")
        # A row that cannot be read back is not advanced here: its series' next occurrence
        # is the scanner's, which reports one it cannot make on its own.
        if decided[message_id] in TERMINAL and row["recurring"] and \
                unreadable_reason(row) is None:
            run.ended.append(row)
    paused: list[tuple[str, db.Row, Any]] = []
    for message_id, row, token, _ in writes.starts:
        attempt = attempts.get(int(row["id"]))
        if attempt is None:  # under the row lock only a pause since the re-check does this
            paused.append((message_id, row, token))
            continue
        run.sends.append(Send(message_id, row, token, int(attempt["id"]),
                              int(attempt["attempt_no"])))
    if paused:  # fenced on the lease and on no send in flight, as every release
        pause_of = {int(r["id"]): r for r in db.fetch_all(
            conn, "deliveries_paused", {"ids": [r["id"] for _, r, _ in paused]})}
        by_reason: dict[str, list[tuple[db.Row, Any]]] = {}
        for _, row, token in paused:
            held_by = pause_of.get(int(row["id"]))
            reason = (SCHEDULE_PAUSED if held_by is not None and held_by["schedule_paused"]
                      and not held_by["tenant_paused"] else TENANT_PAUSED)
            by_reason.setdefault(reason, []).append((row, token))
        back: set[int] = set()
        for reason, handed in by_reason.items():
            back |= {int(r["id"]) for r in db.fetch_all(conn, "lease_release", {
                "ids": [r["id"] for r, _ in handed], "tokens": [t for _, t in handed],
                "reason": reason, "now": now})}
        for message_id, row, _ in paused:
            decided[message_id] = "released" if int(row["id"]) in back else "fenced"
    run.outcomes.update(decided)


TERMINAL = ("sent", "failed", "suppressed", "stale", "unknown", "dead")


def _pace(rt: Runtime, conn: db.Connection, writes: Writes, now: datetime) -> None:
    """Take the tokens the batch's paced sends need (one statement, in the start transaction:
    spent only if the starts commit); the sends without one are released due at their bucket's
    next free slot instead of started (no attempt spent, no lease held waiting)."""
    wanted = Counter(str(row["pace_key"]) for _, row, _, _ in writes.starts
                     if row["pace_key"] is not None)
    if not wanted:
        return
    got = pacing.grants(pacing.submit_take(conn, wanted, now, rt.rng).rows(), wanted, now,
                        rt.rng)
    left = {key: grant.taken for key, grant in got.items()}
    slots = {key: list(grant.slots) for key, grant in got.items()}
    latest = now + timedelta(seconds=rt.settings.limits.max_retry_delay)
    keep = []
    for start in writes.starts:
        message_id, row, token, _ = start
        key = row["pace_key"]
        if key is None or key not in got:  # not paced, or its rate removed since the re-check
            keep.append(start)
        elif left[key] > 0:
            left[key] -= 1
            keep.append(start)
        else:
            due = min(slots[key].pop(0), latest)
            writes.waits.append((message_id, row, token, due, pacing.wait_reason(key, due)))
    writes.starts[:] = keep


def _acting(leases: dict[str, LeaseMessage], rows: dict[int, db.Row]) -> dict[str, LeaseMessage]:
    """Of several messages for one delivery in a batch, the one whose lease is current acts."""
    chosen: dict[int, tuple[str, LeaseMessage]] = {}
    for message_id, message in leases.items():
        row = rows.get(message.delivery_id)
        other = chosen.get(message.delivery_id)
        if other is None or (row is not None and row["lease_token"] == message.lease_token
                             and row["lease_token"] != other[1].lease_token):
            chosen[message.delivery_id] = (message_id, message)
    return dict(chosen.values())


def _decide(rt: Runtime, row: db.Row, message: LeaseMessage, message_id: str, now: datetime,
            writes: Writes) -> str:
    """One message's decision, as writes for the batch; returns what it came to so far."""
    token = message.lease_token
    try:
        decision = recheck(row, token, now)
    except Exception as exc:  # noqa: BLE001 (one delivery's failure parks it, never the batch)
        logger.exception("re-check failed", extra={"delivery_key": row["delivery_key"]})
        decision = Decision("settle", "dead", f"re-check failed: {type(exc).__name__}: {exc}")
    if decision.action == "ignore":
        writes.events.append((row, "message ignored", decision.reason))
        logger.debug("message ignored", extra={"delivery_key": row["delivery_key"],
                                               "reason": decision.reason})
        return "ignored"
    if decision.action == "release":
        writes.releases.setdefault(decision.reason, []).append((row, token))
        return "released"
    if decision.action == "settle":
        assert decision.state is not None
        writes.settles.append((message_id, row, token, decision.state, decision.reason))
        writes.events.append((row, f"re-check: {decision.state}", decision.reason))
        return decision.state
    # Recording may take a whole transaction's worst: the lease is not taken back before.
    deadline = now + timedelta(seconds=_send_seconds(rt, row["channel"])
                               + max(SETTLE_SECONDS, record_seconds(rt)))
    writes.starts.append((message_id, row, token, deadline))
    return "sending"


def _send_seconds(rt: Runtime, channel: str) -> float:
    """The longest one send on this channel may take: the webhook's overall deadline, or the
    AWS channels' client timeouts (their clients are not built to ask)."""
    if channel == "webhook":
        return max(rt.settings.send_timeout, 1.0)
    return DEFAULT_SEND_SECONDS


def _send_one(rt: Runtime, send: Send) -> None:
    row = send.row
    now = rt.clock.now()
    secrets: tuple[str, ...] = ()
    if row["channel"] == "webhook":
        try:
            secrets = signing_secrets(row, now, rt.secret_box)
        except SecretUnavailable as exc:
            # Nothing is sent unsigned: the delivery is retried like a configuration error
            # (counted as SendConfigErrors), never failed for good.
            send.result = SendResult(
                Outcome.TRANSIENT, f"webhook secret unavailable, nothing sent: {exc}",
                extra={"config_error": True})
            logger.warning("webhook secret unavailable", extra={
                "delivery_key": row["delivery_key"], "error": str(exc)})
            return
    outgoing = Message(
        delivery_key=row["delivery_key"], tenant=row["tenant"], kind=row["kind"],
        recipient=row["recipient"], destination=row["destination"], payload=row["payload"],
        revision=row["revision"], occurrence_at=row["occurrence_at"],
        attempt=send.attempt_no, secrets=secrets)
    try:
        send.result = rt.channels[row["channel"]].send(outgoing, now)
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


@dataclass(frozen=True)
class Outcomes:
    """The batch's send outcomes as the columns the two finishing statements take."""

    attempts: dict[str, Any]
    settles: list[tuple[db.Row, Any, str, str, datetime | None, int]]
    throttled: list[Send] = field(default_factory=list)  # retried without spending an attempt
    answers: list[Send] = field(default_factory=list)  # every send its provider throttled

    def submit_throttled(self, conn: db.Connection, now: datetime) -> None:
        """Before the settles, in their transaction: the throttled sends' attempts go back to
        their budgets, and their buckets slow down (AIMD) and count them."""
        if self.throttled:
            db.submit(conn, "deliveries_throttled", {
                "ids": [s.row["id"] for s in self.throttled],
                "tokens": [s.token for s in self.throttled],
                "attempt_nos": [s.attempt_no for s in self.throttled]})
        paced = Counter(str(s.row["pace_key"]) for s in self.answers if s.row["pace_key"])
        if paced:
            pacing.submit_throttled(conn, paced, now)


def _throttled(rt: Runtime, send: Send) -> bool:
    """A provider's throttle, retried without spending an attempt while the delivery's free
    throttle retries last (REMINDERS_MAX_THROTTLE_RETRIES)."""
    result = send.result
    return (result is not None and result.outcome is Outcome.TRANSIENT
            and bool(result.extra.get("throttled"))
            and int(send.row["throttles"]) < rt.settings.limits.max_throttle_retries)


def _outcomes(rt: Runtime, sends: list[Send], now: datetime) -> Outcomes:
    settles = []
    throttled = []
    answers = [s for s in sends if s.result is not None and s.result.extra.get("throttled")]
    for send in sends:
        assert send.result is not None
        keyed = rt.channels[send.row["channel"]].honours_idempotency_key
        free = _throttled(rt, send)
        if free:
            throttled.append(send)
        state, reason, due_at = _outcome_state(rt, send.row, send.attempt_no, send.result, now,
                                               keyed, throttled=free)
        settles.append((send.row, send.token, state, reason, due_at, send.attempt_no))
    results = [s.result for s in sends if s.result is not None]
    return Outcomes({
        "attempt_ids": [s.attempt_id for s in sends],
        "outcomes": [r.outcome.value for r in results],
        "status_codes": [r.status_code for r in results],
        "details": [r.detail[:500] for r in results],
        "retry_afters": [r.retry_after for r in results], "now": now}, settles, throttled,
        answers)


def _finish(rt: Runtime, conn: db.Connection, run: BatchRun, time_left: TimeLeft) -> None:
    """Record every outcome: the attempts, then the deliveries, fenced on each send; one send
    at a time if the batch as a whole cannot be written (a row held elsewhere), each only while
    the invocation has time left for one more statement (what is not recorded stays in flight
    on its row, its message comes back, and the scanner settles it at its deadline)."""
    if not run.sends:
        return
    now = rt.clock.now()
    done = _outcomes(rt, run.sends, now)
    try:
        with db.pipeline(conn):  # one implicit transaction: both or neither
            db.submit(conn, "attempts_finish", done.attempts)
            done.submit_throttled(conn, now)
            settled = db.submit(conn, "deliveries_settle", settle_arrays(done.settles, now))
        states = {int(r["id"]): str(r["state"]) for r in settled.rows()}
    except Conflict:
        states = {}
        one_statement = rt.settings.limits.statement_timeout_ms / 1000.0 + \
            rt.settings.limits.invocation_margin
        for send, one in zip(run.sends, done.settles, strict=True):
            if time_left.short_of(one_statement):
                run.failures[send.message_id] = Conflict(
                    f"outcome not recorded: {time_left.seconds():.1f} s left in the "
                    "invocation; the scanner settles the send at its deadline", retryable=True)
                continue
            state = _finish_alone(rt, conn, send, one, now,
                                  Outcomes({}, [], [send] if send in done.throttled else [],
                                           [send] if send in done.answers else []))
            if state is not None:
                states[int(send.row["id"])] = state
    lost = [s for s in run.sends
            if int(s.row["id"]) not in states and s.message_id not in run.failures]
    if lost:
        db.execute(conn, "events_add", {
            "tenants": [s.row["tenant"] for s in lost], "ids": [s.row["id"] for s in lost],
            "events": ["outcome after losing the lease"] * len(lost),
            "details": [f"{s.result.outcome.value}: {s.result.detail}" if s.result else ""
                        for s in lost], "now": now, "actor": "consumer"})
    for send in run.sends:
        if send.message_id in run.failures:
            run.outcomes.pop(send.message_id, None)  # not recorded: comes back
            continue
        state = states.get(int(send.row["id"]), "fenced")
        run.outcomes[send.message_id] = state
        if state in TERMINAL and send.row["recurring"]:
            run.ended.append(send.row)
        assert send.result is not None
        logger.debug("delivery attempted", extra={
            "delivery_key": send.row["delivery_key"], "outcome": send.result.outcome.value,
            "state": state, "detail": send.result.detail})


def _finish_alone(rt: Runtime, conn: db.Connection, send: Send,
                  one: tuple[db.Row, Any, str, str, datetime | None, int],
                  now: datetime, throttled: Outcomes) -> str | None:
    """One send's outcome on its own. If its delivery's row is held elsewhere (an application
    transaction left open), the outcome stays in the ledger and the scanner settles the
    delivery from it when the lease ends."""
    assert send.result is not None
    attempt = {"attempt_ids": [send.attempt_id], "outcomes": [send.result.outcome.value],
               "status_codes": [send.result.status_code],
               "details": [send.result.detail[:500]],
               "retry_afters": [send.result.retry_after], "now": now}
    try:
        with db.transaction(conn):
            db.execute(conn, "attempts_finish", attempt)
            throttled.submit_throttled(conn, now)
            rows = db.fetch_all(conn, "deliveries_settle", settle_arrays([one], now))
        return str(rows[0]["state"]) if rows else None
    except Conflict as exc:
        db.execute(conn, "attempts_finish", attempt)
        logger.warning("outcome recorded, delivery not settled", extra={
            "delivery_key": send.row["delivery_key"], "error": str(exc)})
        return "fenced"


def _advance_ended_series(rt: Runtime, conn: db.Connection, run: BatchRun) -> None:
    """Make the next occurrence of each series whose delivery this batch ended, at once; what
    cannot be advanced now (rows held elsewhere) stays flagged for the scanner's next pass."""
    from reminders.series import advance_flagged

    if run.ended:
        try:
            advance_flagged(conn, run.ended, rt.clock.now(), actor="consumer")
        except Conflict as exc:
            logger.warning("series left for the scanner", extra={"error": str(exc)})


def _outcome_state(rt: Runtime, row: db.Row, attempt_no: int, result: SendResult,
                   now: datetime, idempotent: bool, *,
                   throttled: bool = False) -> tuple[str, str, datetime | None]:
    if result.outcome is Outcome.SENT:
        return "sent", result.detail, None
    if result.outcome is Outcome.PERMANENT:
        return "failed", result.detail, None
    if result.outcome is Outcome.UNKNOWN and not idempotent:
        return "unknown", f"send may have happened: {result.detail}", None
    policy = retry.Policy(max_attempts=row["max_attempts"], backoff_base=row["backoff_base"],
                          backoff_cap=row["backoff_cap"], stale_after=row["stale_after"],
                          max_delay=timedelta(seconds=rt.settings.limits.max_retry_delay))
    if throttled:
        nxt = retry.after_throttle(policy, occurrence_at=row["stale_from"], now=now,
                                   retry_after=result.retry_after, rng=rt.rng)
        return nxt.state, f"{result.detail}; {nxt.reason}", nxt.due_at
    nxt = retry.next_try(policy, attempts_made=attempt_no - row["attempts_base"],
                         occurrence_at=row["stale_from"], now=now,
                         retry_after=result.retry_after, rng=rt.rng)
    return nxt.state, f"{result.detail}; {nxt.reason}", nxt.due_at


def settle_arrays(settles: Sequence[tuple[db.Row, Any, str, str, datetime | None, int | None]],
                  now: datetime) -> dict[str, Any]:
    """``deliveries_settle``'s parameters: (row, token, state, reason, due_at, attempt_no)."""
    return {"ids": [r["id"] for r, *_ in settles], "tokens": [s[1] for s in settles],
            "states": [s[2] for s in settles], "reasons": [s[3] for s in settles],
            "due_ats": [s[4] for s in settles], "attempt_nos": [s[5] for s in settles],
            "now": now}


def settle(conn: db.Connection, row: db.Row, token: Any, state: str, reason: str,
           due_at: datetime | None, now: datetime, *, attempt_no: int | None = None) -> bool:
    """Fenced write of one delivery's next state (no send in flight, or this one). A terminal
    recurring delivery is flagged for its series' next occurrence."""
    return bool(db.fetch_all(conn, "deliveries_settle",
                             settle_arrays([(row, token, state, reason, due_at, attempt_no)],
                                           now)))
