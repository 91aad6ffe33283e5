"""Recurring series: exactly one pending delivery per recipient, the next one materialised in
the transaction that records the current one's terminal outcome.

Catch-up after downtime is bounded: of the occurrences missed while nothing ran, only the
newest one still inside the kind's staleness window is sent; older ones are recorded as skipped
(state ``stale``), so a week's outage never turns into a burst of old digests.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from reminders import db
from reminders.db.instants import unreadable_reason
from reminders.errors import Conflict, DatabaseUnavailable, InvalidInput, RemindersError
from reminders.observability import logger
from reminders.recurrence import ExpansionDeadline, Occurrence, Recurrence, first_due
from reminders.schedules import Plan, insert_deliveries

MAX_CATCH_UP = 500  # missed occurrences looked at (and recorded as skipped) per advance


def recurrence_of(row: db.Row) -> Recurrence:
    """The stored rule of a schedule row (validated when it was saved)."""
    return Recurrence(rrule=row["rrule"], tz=row["tz"], local_start=row["local_start"],
                      gap=row["gap_policy"], overlap=row["overlap_policy"])


def superseded_by(row: db.Row, now: datetime) -> Occurrence | None:
    """For a recurring delivery: a newer occurrence that is already due, if any."""
    rec = recurrence_of(row)
    following = rec.next_after(row["occurrence_at"])
    if following is not None and following.utc <= now:
        return following
    return None


def plan_next(rec: Recurrence, last: datetime, now: datetime,
              stale_after: timedelta | None) -> Plan:
    """What follows the occurrence ``last``: skipped ones, then the one to deliver (if any)."""
    missed: list[Occurrence] = []
    following: Occurrence | None = None
    for occurrence in rec.occurrences_after(last, MAX_CATCH_UP + 1):
        if occurrence.utc <= now:
            missed.append(occurrence)
        else:
            following = occurrence
            break
    else:
        if len(missed) > MAX_CATCH_UP:  # more than we look at: start again from now
            following = rec.next_after(now)
            missed = missed[:MAX_CATCH_UP]
    plan: Plan = []
    newest = missed[-1] if missed else None
    if newest is not None and (stale_after is None or now <= newest.utc + stale_after):
        missed = missed[:-1]
        following = newest  # the newest missed one is still worth sending: due now
    for occurrence in missed:
        plan.append((occurrence.utc, "stale",
                     "skipped: missed while nothing ran; a newer occurrence replaces it"))
    if following is not None:
        plan.append((following.utc, "scheduled", None))
    return plan


def refuse_unreadable(row: db.Row) -> None:
    """Raise InvalidInput, naming the column and what Postgres wrote, when ``row`` (loaded
    each instant on its own terms) holds an instant Python cannot: the series' failure path
    then parks that one delivery or ends that one schedule."""
    unreadable = unreadable_reason(row)
    if unreadable is not None:
        raise InvalidInput(unreadable)


def advance_after_terminal(conn: db.Connection, tenant: str, schedule_id: int, recipient: str,
                           now: datetime, *, after: datetime) -> None:
    """Materialise the recipient's next delivery after the one (occurring at ``after``) that
    ended; end the series when the rule has ended. The series goes on from its newest
    occurrence in the current generation, or from ``after`` when that generation has none yet
    (a new revision alone starts a generation without deliveries)."""
    row = db.fetch_one(conn, "series_state", {"tenant": tenant, "schedule_id": schedule_id,
                                              "recipient": recipient}, every_instant=True)
    if row is None or row["state"] != "active" or row["rrule"] is None or row["has_pending"]:
        return
    refuse_unreadable(row)  # a local start or an occurrence written by hand
    last = row["last_occurrence"] if row["last_occurrence"] is not None else after
    plan = plan_next(recurrence_of(row), last, now, row["stale_after"])
    insert_deliveries(conn, tenant=tenant, schedule_id=schedule_id,
                      recipients=[recipient] * len(plan), plan=plan, now=now)
    if not plan or plan[-1][1] != "scheduled":
        db.execute(conn, "schedule_end", {"id": schedule_id, "tenant": tenant, "now": now})


def advance_flagged(conn: db.Connection, rows: list[db.Row], now: datetime, *,
                    actor: str, deadline: float | None = None,
                    skip_held: bool = False) -> tuple[int, int]:
    """Advance the series of deliveries flagged ``advance_series`` (rows with id, tenant,
    schedule_id, recipient, occurrence_at), each in its own transaction: the schedule's share
    lock first, then the deliveries, as everywhere. A series that cannot advance parks its
    delivery's flag with the reason; the others go on. Past ``deadline`` (``time.monotonic``)
    the rest keep their flags for the next pass. ``skip_held`` (the scanner): a schedule or a
    delivery another transaction holds is skipped, never waited for, and keeps its flag for
    the next pass. Returns (advanced, failed)."""
    advanced = failed = 0
    share, claim = (("schedule_share_unless_held", "series_advance_claim_unless_held")
                    if skip_held else ("schedule_share", "series_advance_claim"))
    for row in rows:
        if deadline is not None and time.monotonic() >= deadline:
            break
        ref = {"id": row["id"], "tenant": row["tenant"]}
        try:
            refuse_unreadable(row)  # its occurrence, written by hand
            with db.transaction(conn):
                if db.fetch_one(conn, share, {"id": row["schedule_id"],
                                              "tenant": row["tenant"]}) is None and skip_held:
                    continue  # held by another transaction (or gone): the next pass
                if db.fetch_one(conn, claim, ref) is None:
                    continue  # advanced already (by the consumer or another pass), or held
                advance_after_terminal(conn, row["tenant"], int(row["schedule_id"]),
                                       row["recipient"], now, after=row["occurrence_at"])
            advanced += 1
        except ExpansionDeadline:
            break  # the time is up inside this series' expansion: it keeps its flag
        except (DatabaseUnavailable, Conflict):
            raise  # not this series' fault: the flag stays for the next pass
        except (RemindersError, ValueError, TypeError, ArithmeticError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:300]
            logger.error("series not advanced", extra={"delivery_id": row["id"],
                                                       "error": error})
            with db.transaction(conn):
                db.execute(conn, "series_advance_failed", {**ref, "error": error, "now": now})
                db.execute(conn, "event_add", {**ref, "now": now, "actor": actor,
                                               "event": "series not advanced", "detail": error})
            failed += 1
    return advanced, failed


def materialise_first(conn: db.Connection, limit: int, now: datetime,
                      deadline: float | None = None) -> tuple[int, int]:
    """The first occurrence of recurring schedules recorded through the SQL API, whose callers
    could not expand the rule: at most ``limit`` schedules, read off their partial index, in
    one transaction that locks each schedule before its deliveries are made. A rule this
    service cannot expand ends its schedule with the reason in ``problem`` (visible to the
    application in ``my_schedules``); the others go on. Past ``deadline``
    (``time.monotonic``) the rest wait for the next tick. Returns (materialised, failed)."""
    done = failed = 0
    with db.transaction(conn):
        for row in db.fetch_all(conn, "schedules_pending_first", {"limit": limit},
                                every_instant=True):
            if deadline is not None and time.monotonic() >= deadline:
                break
            ref = {"id": row["id"], "tenant": row["tenant"], "now": now}
            try:
                refuse_unreadable(row)  # a local start written by hand
                first = first_due(recurrence_of(row), now)
            except ExpansionDeadline:
                break  # the time is up inside this rule's expansion: it is tried next tick
            except (RemindersError, ValueError, TypeError, ArithmeticError) as exc:
                problem = f"the rule cannot be expanded: {type(exc).__name__}: {exc}"[:300]
                logger.error("schedule not materialised", extra={"schedule_id": row["id"],
                                                                 "error": problem})
                db.fetch_one(conn, "schedule_materialise_first",
                             {**ref, "first_at": None, "problem": problem})
                failed += 1
                continue
            db.fetch_one(conn, "schedule_materialise_first", {
                **ref, "first_at": first.utc if first is not None else None, "problem": None})
            done += 1
    return done, failed
