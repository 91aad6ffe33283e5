"""One scanner tick: reclaim expired leases, advance series whose delivery ended, lease a
bounded batch of due deliveries, publish ``{delivery id, lease token}`` for each, hand back
what the queue refused.

Scanners take turns for the whole tick (a turn row with a token and an expiry; no session
state, which RDS Proxy would pin and a transaction pooler breaks), so the in-flight budget is
counted after the previous tick's messages are on the queue. Each step is its own transaction;
the once-a-tick steps go out together (db.each_alone: one round trip before the drain, two
after it, where they cost 23 one at a time through the pooler), and a failure tied to one
delivery (a series that cannot advance) parks that delivery with its reason and never stops
the tick.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from reminders import db
from reminders.clock import iso
from reminders.errors import Conflict
from reminders.observability import logger
from reminders.queue import LeaseMessage, Rejected
from reminders.runtime import Runtime

T = TypeVar("T")
# How long a turn outlasts the tick's drain budget (publish settling, the steps after it).
TURN_MARGIN_SECONDS = 30
# The steps after the drain (retention, counts, lateness) end this long after it: each
# statement runs with the time left as its statement timeout, and the lateness, which the
# alarms read, gets LATENESS_AT_LEAST_SECONDS even when the others took the time. The
# synthesized stack allows a tick its drain plus AFTER_DRAIN_SECONDS_MAX, within the scanner's
# timeout and the schedule's minute (tests/infra/test_infra_budgets.py).
HOUSEKEEPING_SECONDS = 4
LATENESS_AT_LEAST_SECONDS = 1.0
AFTER_DRAIN_SECONDS_MAX = HOUSEKEEPING_SECONDS + LATENESS_AT_LEAST_SECONDS
# The steps before the drain (series advance, first occurrences) take this share of the
# drain's time at most, so leasing due work is never starved by them.
BEFORE_DRAIN_SHARE = 0.25
OVERDUE_COUNT_CAP = 1_000
MAX_PASSES = 100_000  # a tick's passes at most, whatever its time allows
# Counter rows (delivery_counts, one per group and backend that wrote it) folded a tick at most.
COUNTS_FOLD_BATCH = 10_000
# Each pass leases what is due by the clock as it reads then, so a reminder falling due while a
# tick drains goes out in the next pass, not the next tick. Tenants that fell due since the
# last count are offered the same share as the others; they are counted again once the clock
# has moved this far since the last count (and every pass reports those still due).
RECOUNT_TENANTS_SECONDS = 1.0
# How long a tick waits, a time, for the consumers to make room or for work to fall due.
REFILL_WAIT_SECONDS = 0.25
# The states a reclaim can end a lease in that an operator must hear about, as metrics.
PARKED_METRICS = {"unknown": "Unknown", "dead": "Dead"}


@dataclass
class TickSummary:
    now: str
    queued_before: int = 0
    reclaimed: dict[str, int] = field(default_factory=dict)
    advanced: int = 0
    advance_failed: int = 0
    first_materialised: int = 0  # recurring schedules recorded through SQL, first occurrence
    first_failed: int = 0        # ... and those whose rule could not be expanded
    leased: int = 0
    published: int = 0
    released: int = 0
    poisoned: int = 0  # of the reclaimed: parked dead as poison messages
    oldest_overdue_seconds: float | None = 0.0  # paused tenants apart; None: not measured
    overdue: int = 0  # counted up to OVERDUE_COUNT_CAP
    passes: int = 0   # lease-and-publish passes this tick
    paused_overdue_seconds: float | None = 0.0  # the oldest due delivery of a paused tenant
    # Paused schedules' due deliveries (held, migration 0023), apart from the overdue figures:
    # how many (counted up to OVERDUE_COUNT_CAP) and the oldest one's lateness.
    held_overdue: int = 0
    held_overdue_seconds: float | None = 0.0
    purged: int = 0   # terminal deliveries past their kind's retention removed this tick
    unreadable: int = 0  # due deliveries failed alone: their instant is outside years 1-9999
    # leased deliveries handed back because the publisher function's Invoke was refused
    # (AccessDenied, throttled, unreachable): due again, and counted (PublisherNotInvoked)
    not_invoked: int = 0
    skipped: str | None = None  # why this tick did nothing (another scanner held the turn)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def tick(rt: Runtime, context: Any = None, *, refill: bool = True) -> TickSummary:
    """One scanner invocation. It drains for at most REMINDERS_SCAN_SECONDS, and for at most
    half the invocation's remaining time when a Lambda context says how much is left.
    ``refill``: it waits for the consumers to make room (REMINDERS_REFILL_PATIENCE_SECONDS);
    False where nothing consumes while it runs (the local pipeline runs them after it)."""
    rt = rt.for_function("scanner")
    started = time.monotonic()
    seconds = float(rt.settings.limits.scan_seconds)
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if callable(remaining):
        seconds = min(seconds, remaining() / 2000.0)
    deadline = started + seconds
    now = rt.clock.now()
    summary = TickSummary(now=iso(now))
    holder = uuid.uuid4()
    # The turn outlasts the tick's own budget by the publish's settling and the steps after
    # the drain; a scanner that died holding it frees it by then.
    until = now + timedelta(seconds=seconds + TURN_MARGIN_SECONDS)
    try:
        # Taking the turn again with the same token changes nothing: a connection found gone
        # here (the take committed or not) is replaced once and the tick goes on.
        conn, taken = rt.opening(lambda c: db.fetch_one(
            c, "scanner_turn_take", {"holder": holder, "until": until, "now": now}))
    except Conflict as exc:  # another scanner held the turn's row past the lock timeout
        conn, taken, why = rt.connection(), None, f"another scanner is running: {exc}"
    else:
        why = "another scanner is running"
    if taken is None:
        held = db.fetch_one(conn, "scanner_turn_holder")
        if held is not None and held["held_until"] is not None:
            why += f" (its turn ends by {iso(held['held_until'])} at the latest)"
        summary.skipped = why
        logger.warning("scanner tick skipped", extra={"reason": summary.skipped})
        return summary
    ended = False  # the turn, ended with the tick's last statements unless they failed
    try:
        patience = float(rt.settings.limits.refill_patience_seconds) if refill else 0.0
        ended = _tick_locked(rt, conn, now, summary, deadline, patience, holder)
    finally:
        if not ended and not conn.closed and not conn.broken:
            db.execute(conn, "scanner_turn_end", {"holder": holder})
    for state, metric in PARKED_METRICS.items():
        if summary.reclaimed.get(state):
            rt.metrics.put(metric, summary.reclaimed[state])
    if summary.oldest_overdue_seconds is not None:
        rt.metrics.put("OldestOverdueSeconds", summary.oldest_overdue_seconds, "Seconds")
    if summary.paused_overdue_seconds is not None:
        rt.metrics.put("PausedOldestOverdueSeconds", summary.paused_overdue_seconds, "Seconds")
    if summary.held_overdue_seconds is not None:
        rt.metrics.put("PausedSchedulesOldestOverdueSeconds", summary.held_overdue_seconds,
                       "Seconds")
        rt.metrics.put("PausedSchedulesOverdue", summary.held_overdue)
    if summary.not_invoked:  # only when non-zero: missing data is quiet
        rt.metrics.put("PublisherNotInvoked", summary.not_invoked)
    rt.metrics.put("Leased", summary.leased)
    rt.metrics.put("SeriesAdvanceFailed", summary.advance_failed)
    rt.metrics.put("RetentionPurged", summary.purged)
    rt.metrics.flush()
    logger.info("scanner tick", extra=summary.as_json())
    return summary


def _tick_locked(rt: Runtime, conn: db.Connection, now: datetime, summary: TickSummary,
                 deadline: float, patience: float, holder: uuid.UUID) -> bool:
    """The tick under its turn. Its once-a-tick statements go out together, a round trip
    before the drain and two after it (db.each_alone: each its own transaction, as alone).
    True when the turn was ended with the last of them."""
    limits = rt.settings.limits
    # Counted under the turn: the previous tick's messages are on the queue by now.
    queued = rt.deliveries.depth()
    summary.queued_before = queued
    opening = _open(rt, conn, now, summary)
    from reminders.recurrence import expansion_deadline

    started = time.monotonic()
    # Their share of the tick, checked between series and inside each rule's expansion (a rule
    # that never matches kept dateutil searching for 0.1-0.3 s, past any deadline between them).
    before = started + max(0.0, deadline - started) * BEFORE_DRAIN_SHARE
    with expansion_deadline(before):
        if opening.to_advance and time.monotonic() < before:
            advance_series(rt, conn, now, summary, before, rows=opening.to_advance)
        if opening.first_pending and time.monotonic() < before:
            materialise_first(rt, conn, now, summary, before)
    # New due work from either step: the tenants are counted again before the first pass.
    wrote = summary.advanced or summary.advance_failed or summary.first_materialised
    drain(rt, conn, summary, queued, deadline, patience,
          counted=_Counted(opening.live, None if wrote else opening.tenants, now))
    ends = max(time.monotonic(), deadline) + HOUSEKEEPING_SECONDS
    # Retention only with drain time left over, and never with REMINDERS_RETENTION_BATCH=0.
    if limits.retention_batch and time.monotonic() < deadline:
        purged = _bounded(conn, ends, db.Step("retention_purge", {
            "now": now, "limit": limits.retention_batch}))
        summary.purged = int(((purged or [{}])[0]).get("deliveries") or 0)
    # Lateness as it stands when the tick ends (a drain may have taken most of a minute); the
    # alarms read it, so it is measured even when the other steps took the time (within a
    # second more at most). Not measured (None, and no metric), it is never reported as 0.
    # The counts' fold goes first (its statements wait on no one: SKIP LOCKED), and the turn
    # ends after the lateness, all in one round trip.
    closing = []
    if time.monotonic() < ends:
        closing = [db.Step("delivery_counts_fold", {"limit": COUNTS_FOLD_BATCH}),
                   db.Step("delivery_counts_drop_zeros", {"limit": COUNTS_FOLD_BATCH})]
    left = max(ends - time.monotonic(), LATENESS_AT_LEAST_SECONDS)
    closing += [db.Step("oldest_overdue", {"now": rt.clock.now(), "cap": OVERDUE_COUNT_CAP},
                        timeout=left),
                db.Step("scanner_turn_end", {"holder": holder})]
    try:
        rows = db.each_alone(conn, closing)
    except Conflict as exc:
        if exc.retryable:
            raise
        logger.warning("scanner step stopped: the tick's time is spent",
                       extra={"error": str(exc)})
        summary.oldest_overdue_seconds = summary.paused_overdue_seconds = None
        summary.held_overdue_seconds = None
        return False
    overdue = rows[-2][0]
    summary.oldest_overdue_seconds = round(float(overdue.get("seconds") or 0.0), 3)
    summary.paused_overdue_seconds = round(float(overdue.get("paused_seconds") or 0.0), 3)
    summary.overdue = int(overdue.get("overdue") or 0)
    summary.held_overdue_seconds = round(float(overdue.get("held_seconds") or 0.0), 3)
    summary.held_overdue = int(overdue.get("held") or 0)
    return True


@dataclass(frozen=True)
class _Opening:
    """What the tick's first round trip read: the series to advance, whether SQL-made
    schedules wait for a first occurrence, the live leases and the tenants with due work."""

    to_advance: list[db.Row]
    first_pending: bool
    live: int
    tenants: int


def _open(rt: Runtime, conn: db.Connection, now: datetime, summary: TickSummary) -> _Opening:
    """The steps before the drain, in one round trip: reclaim expired leases and pending
    leases no consumer took; fail alone the due deliveries whose instant no component can
    hold (they would fail every pass that leased them and every read that loaded them);
    read the series to advance, whether schedules wait for their first occurrence (their
    own step reads and locks them), the live leases and the tenants with due work. Each is
    bounded (the in-flight budget, the scan batch, one schedule); the rest go next tick."""
    limits = rt.settings.limits
    reclaimed, pending, unreadable, to_advance, first, live, tenants = db.each_alone(conn, [
        db.Step("lease_reclaim_expired", {
            "now": now, "idempotent_channels": rt.idempotent_channels,
            "max_empty_leases": limits.max_empty_leases,
            "lease_seconds": limits.lease_seconds, "limit": limits.inflight_budget}),
        db.Step("pending_leases_reclaim", {  # leases no consumer took: due again as they were
            "now": now, "lease_seconds": limits.lease_seconds,
            "limit": limits.inflight_budget}),
        db.Step("due_unreadable", {"now": now, "limit": limits.inflight_budget}),
        # each row on its own terms: one spoiled parks alone
        db.Step("series_to_advance", {"limit": limits.scan_batch}, every_instant=True),
        db.Step("schedules_pending_first", {"limit": 1}, every_instant=True),
        db.Step("live_leases"),
        db.Step("tenants_with_due_work", {"now": now})])
    for row in [*reclaimed, *pending]:
        summary.reclaimed[row["state"]] = summary.reclaimed.get(row["state"], 0) + 1
        summary.poisoned += row["state"] == "dead" and not row["tried"]
    summary.unreadable = len(unreadable)
    return _Opening(to_advance=to_advance, first_pending=bool(first),
                    live=int(live[0]["n"] or 0), tenants=int(tenants[0]["n"] or 0))


def _bounded(conn: db.Connection, ends: float, step: db.Step) -> list[db.Row] | None:
    """``step`` in a transaction whose statement times out when the tick's time is up
    (``ends``, ``time.monotonic``): None, logged, when it did not fit. SET LOCAL: nothing
    outlives the transaction, so no proxy connection pins."""
    left = ends - time.monotonic()
    if left <= 0.05:
        logger.warning("scanner step skipped: the tick's time is spent")
        return None
    try:
        return db.each_alone(conn, [replace(step, timeout=left)])[0]
    except Conflict as exc:
        if exc.retryable:
            raise
        logger.warning("scanner step stopped: the tick's time is spent",
                       extra={"error": str(exc)})
        return None


@dataclass(frozen=True)
class _Counted:
    """What the tick counted before its drain: the live leases, the tenants with due work
    (None: count them again) and the clock's reading then."""

    live: int
    tenants: int | None
    at: datetime


def drain(rt: Runtime, conn: db.Connection, summary: TickSummary, queued: int,
          deadline: float, patience: float = 0.0, *, counted: _Counted) -> None:
    """Lease and publish, pass after pass, until nothing is due, the in-flight budget is full,
    or the tick's time is spent. Each pass is fair across tenants. The budget counts the larger
    of the queue's depth when the tick began (a paused consumer's messages stay counted) and
    the live leases now (this tick's own messages included, and consumers finishing theirs
    make room), so a tick hands over as much as the consumers take, never more than the budget
    at once. Messages left on the queue by leases that expired and were reclaimed carry no
    lease: they count beside the live leases, not within them.

    The hand-over is pipelined: a pass's messages are published on another thread while the
    next pass leases, so a pass costs the longer of the two, not their sum. At most one pass is
    in flight; its outcome is settled before the next one is handed over, and before the tick
    ends. When the queue refuses a pass, the pass leased meanwhile is released unpublished
    (fenced, as a refused message is) and the tick stops. An error or an interrupt on the way
    releases the same way whatever it leaves unsettled or not yet handed over, then goes on."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="hand-over") as hand_over:
        in_flight: _InFlight | None = None
        # A pass leased and not handed over yet: released if anything ends the tick before it
        # is (a refused pass before it, an error or an interrupt while that one settles).
        waiting: tuple[list[LeaseMessage], datetime] | None = None
        why = "the tick stopped (an error or an interrupt) before it was handed over"
        try:
            for leased, now in _passes(rt, conn, summary, queued, deadline, patience,
                                        counted):
                messages = [LeaseMessage(r["id"], r["lease_token"]) for r in leased]
                waiting = messages, now
                if in_flight is not None:
                    settling, in_flight = in_flight, None
                    if not _settled(conn, summary, settling):
                        why = "the queue refused the pass before it"
                        return  # the queue is refusing: the waiting pass goes back below
                in_flight = _InFlight(messages, now, hand_over.submit(
                    rt.publisher.publish, messages,
                    concurrency=rt.settings.limits.publish_concurrency))
                waiting = None
        finally:
            try:
                if in_flight is not None:
                    _settled(conn, summary, in_flight)
            finally:
                if waiting is not None:
                    summary.released += _release(
                        conn, *waiting, f"not handed over: {why}; due again next tick")


@dataclass
class _InFlight:
    """A pass's messages on their way to the queue (or the publishers)."""

    messages: list[LeaseMessage]
    now: datetime
    rejected: Any  # a Future of the publisher's list of Rejected


def _passes(rt: Runtime, conn: db.Connection, summary: TickSummary, queued: int,
            deadline: float, patience: float,
            counted: _Counted) -> Iterator[tuple[list[db.Row], datetime]]:
    """Each pass's leased rows (in due order) and the clock's reading it leased at.

    The tick keeps the queue fed for its whole time: when the in-flight budget is full it
    waits (REFILL_WAIT_SECONDS at a time) and counts again what is out, the queue's depth and
    the live leases, leasing again as the consumers make room; when a pass finds nothing due
    and work falls due before the tick ends (by the clock), it waits for that. Waiting for
    room ends the tick once nothing went out for ``patience`` seconds; waiting for work to
    fall due ends it at its deadline, or when the clock did not move while it waited (a fixed
    clock). No patience (0): it never waits."""
    limits = rt.settings.limits
    live = counted.live  # counted after this tick's reclaim, in its first round trip
    # Messages on the queue that carry no live lease (theirs expired and were reclaimed) are out
    # too, beside every live lease, until the consumers receive them: what the queue held
    # beyond the live leases when the tick began. Counted once: this tick makes no more of
    # them, and those it counts only leave (so it errs on the side of the budget).
    stale = max(0, queued - live)
    tenants = counted.tenants or 0  # tenants that may have due work: counted, then each pass says
    counted_at: datetime | None = None if counted.tenants is None else counted.at
    last_out = time.monotonic()  # when a pass last leased anything

    # Waits end early enough for the steps after the drain to end by the deadline too, so a
    # tick that waited its whole time still hands the turn on before the next minute's tick.
    waits_end = deadline - AFTER_DRAIN_SECONDS_MAX

    def wait(seconds: float, *, for_the_clock: bool = False) -> bool:
        """Sleep within the tick (waiting for room, also within the patience since a pass
        last leased anything); False: stop instead. No patience: never waits."""
        ends = waits_end if for_the_clock else min(waits_end, last_out + patience)
        if patience <= 0 or seconds <= 0 or time.monotonic() + seconds > ends:
            return False
        before = rt.clock.now()
        time.sleep(seconds)
        return not for_the_clock or rt.clock.now() > before

    for _ in range(MAX_PASSES):  # in practice bounded by the tick's time
        room = min(limits.scan_batch, limits.inflight_budget - max(queued, stale + live))
        if room <= 0:  # by this tick's count; the consumers may have made room since
            live = _live_leases(conn)
            room = min(limits.scan_batch, limits.inflight_budget - max(queued, stale + live))
        if room <= 0:
            if not wait(REFILL_WAIT_SECONDS):
                return
            queued = rt.deliveries.depth()  # what the consumers have not received yet
            live = _live_leases(conn)
            continue
        if time.monotonic() >= deadline:
            return
        now = rt.clock.now()
        if counted_at is None or (now - counted_at).total_seconds() >= RECOUNT_TENANTS_SECONDS:
            tenants = int((db.fetch_one(conn, "tenants_with_due_work", {"now": now}) or {})
                          .get("n") or 0)
            counted_at = now
        leased: list[db.Row] = []
        if tenants > 0:
            share = -(-room // tenants)  # ceil: every tenant gets one

            def lease(n: int = room, share: int = share, now: datetime = now) -> list[db.Row]:
                # One statement, atomic on its own: no BEGIN and COMMIT round trips around it.
                return db.fetch_all(conn, "lease_due", {
                    "now": now, "batch": n, "share": share,
                    "lease_seconds": limits.lease_seconds})

            leased = db.retrying(lease)
        if not leased:  # nothing is due now: wait for what falls due before the tick ends
            nxt = (db.fetch_one(conn, "next_due_work") or {}).get("at")
            if nxt is None or not wait(min(max((nxt - now).total_seconds(), 0.0) + 0.01,
                                           REFILL_WAIT_SECONDS * 4), for_the_clock=True):
                return
            counted_at = None
            continue
        summary.passes += 1
        tenants = int(leased[0]["tenants_left"])
        leased.sort(key=_lease_order)
        summary.leased += len(leased)
        live += len(leased)
        last_out = time.monotonic()
        yield leased, now


def _settled(conn: db.Connection, summary: TickSummary, pass_: _InFlight) -> bool:
    """Wait for a pass's hand-over; release what the queue refused. False if it refused any
    (the queue is refusing: the tick stops)."""
    interrupted: BaseException | None = None
    try:
        rejected: list[Rejected] = pass_.rejected.result()
    except Exception as exc:  # noqa: BLE001 (a publisher that raised refused the whole pass)
        rejected = [Rejected(m, f"publish failed: {exc}") for m in pass_.messages]
    except BaseException as exc:  # noqa: BLE001 (raised again below, once the pass is back)
        # An interrupt, raised by the publisher or while waiting for it: the whole pass goes
        # back (fenced, so a message that did reach the queue finds its lease gone), and the
        # interrupt goes on once it has.
        interrupted = exc
        rejected = [Rejected(m, f"publish interrupted: {exc!r}") for m in pass_.messages]
    summary.published += len(pass_.messages) - len(rejected)
    summary.not_invoked += sum(r.invoke_refused for r in rejected)
    if not rejected:
        return True
    released = _release(conn, [r.message for r in rejected], pass_.now,
                        "queue refused the message (or its publisher was not invoked); due "
                        "again next tick")
    summary.released += released
    logger.warning("publish rejected", extra={
        "rejected": len(rejected), "released": released, "first_reason": rejected[0].reason})
    if interrupted is not None:
        raise interrupted
    return False


def _release(conn: db.Connection, messages: list[LeaseMessage], now: datetime,
             reason: str) -> int:
    """Hand pending leases back to the due set, fenced by their tokens: due again next pass.
    The delivery rows were never written, so ``reason`` goes to the log, not to them."""
    released = db.execute(conn, "pending_release", {
        "ids": [m.delivery_id for m in messages], "tokens": [m.lease_token for m in messages]})
    logger.info("leases released", extra={
        "released": released, "of": len(messages), "reason": reason, "now": iso(now)})
    return released


def _lease_order(row: db.Row) -> tuple[Any, Any]:
    return row["due_at"], row["id"]


def _live_leases(conn: db.Connection) -> int:
    """Counted only when the tick's own count says the budget is full: never more rows than
    the budget."""
    return int((db.fetch_one(conn, "live_leases") or {}).get("n") or 0)


def advance_series(rt: Runtime, conn: db.Connection, now: datetime,
                   summary: TickSummary, deadline: float | None = None, *,
                   rows: list[db.Row]) -> None:
    """Series whose delivery ended and whose next occurrence is not made yet (``rows``, read
    by series_to_advance: bounded in count; and in time by ``deadline``,
    ``time.monotonic``)."""
    from reminders.series import advance_flagged

    summary.advanced, summary.advance_failed = advance_flagged(
        conn, rows, now, actor="scanner", deadline=deadline, skip_held=True)


def materialise_first(rt: Runtime, conn: db.Connection, now: datetime,
                      summary: TickSummary, deadline: float | None = None) -> None:
    """Recurring schedules recorded through SQL get their first occurrence (bounded in count,
    and in time by ``deadline``, ``time.monotonic``)."""
    from reminders.series import materialise_first as first

    summary.first_materialised, summary.first_failed = db.retrying(
        lambda: first(conn, rt.settings.limits.first_batch, now, deadline))
