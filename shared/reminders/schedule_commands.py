"""Holding one schedule: ``schedules list|show|pause|resume|trigger|backfill``.

As :mod:`reminders.operator_commands`: each takes a connection and plain values and returns an
:class:`Outcome`; the local command line (:mod:`reminders.cli_schedules`) and the operations
function (:mod:`reminders.ops`) call the same functions, so both leave the same rows and the
same operator actions (who, via what, why).

The rules live in SQL (``hold_schedule``, ``trigger_for``, ``backfill_for`` in
``db/objects/functions``), the same ones an application calls for its own schedules
(``pause(key)``, ``resume(key)``, ``trigger(key)``). A backfill needs the rule expanded, which
only this service does, so it is the operator's alone.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from reminders import db
from reminders.clock import iso
from reminders.errors import InvalidInput, NotFound
from reminders.operator_commands import instant, resolve_tenant, schedule_key
from reminders.outcome import Outcome
from reminders.reasons import checked_reason

STATES = ("active", "paused", "cancelled", "finished")
MAX_PAGE = 1000
MAX_BACKFILL = 1000  # occurrences one backfill materialises, at most (each for every recipient)
PREVIEW_COUNT = 5
SHOWN_DELIVERIES = 50
SHOWN_ACTIONS = 50


def state_of(row: db.Row) -> str:
    """The operator's state of a schedule: active, paused, cancelled or finished."""
    if row["state"] == "cancelled":
        return "cancelled"
    if row["state"] == "ended":
        return "finished"
    return "paused" if row["paused"] else "active"


def _owner(conn: db.Connection, key: str, tenant: str | None) -> tuple[str, str]:
    owner = resolve_tenant(conn, key, tenant)
    return owner, schedule_key(conn, key, owner)


def _detail(conn: db.Connection, tenant: str, key: str) -> db.Row:
    row = db.fetch_one(conn, "schedule_detail", {"tenant": tenant, "key": key})
    if row is None:
        raise NotFound(f"no schedule with key {key!r} for tenant {tenant!r}")
    return row


# ---------------------------------------------------------------- reads


def list_schedules(conn: db.Connection, *, limit: int, tenant: str | None = None,
                   state: str | None = None, after: str | None = None) -> Outcome:
    """A page of schedules by (tenant, key); the next page's cursor (``--after TENANT/KEY``)
    goes in the text, or to stderr with ``--json``."""
    from reminders.cli_format import remark, table

    if state is not None and state not in STATES:
        raise InvalidInput(f"--state: must be one of {', '.join(STATES)}, got {state!r}")
    if not 1 <= limit <= MAX_PAGE * 10:
        raise InvalidInput(f"--limit: must be from 1 to {MAX_PAGE * 10}, got {limit}")
    after_tenant = after_key = None
    if after:
        after_tenant, sep, after_key = after.partition("/")
        if not sep or not after_tenant or not after_key:
            raise InvalidInput(f"--after: expected the cursor a previous page printed "
                               f"(TENANT/KEY), got {after!r}")
    rows = db.fetch_all(conn, "schedules_page", {
        "tenant": tenant, "state": state, "after_tenant": after_tenant,
        "after_key": after_key, "limit": limit + 1})
    more = len(rows) > limit
    rows = rows[:limit]
    data = [{"tenant": r["tenant"], "schedule_key": r["schedule_key"], "kind": r["kind"],
             "channel": r["channel"], "state": state_of(r),
             "rule": r["rrule"], "tz": r["tz"], "at": iso(r["at"]) if r["at"] else None,
             "revision": r["revision"], "generation": r["generation"],
             "updated_at": iso(r["updated_at"])} for r in rows]
    outcome = Outcome(data, None)
    cursor = f"{rows[-1]['tenant']}/{rows[-1]['schedule_key']}" if rows and more else None
    if cursor:
        outcome.json_notes.append(f"schedules list: more match; next page: --after {cursor}")
    if not rows:
        outcome.text = "no schedules match"
        return outcome
    lines = [table(["tenant", "key", "state", "kind", "channel", "rule or instant", "gen"],
                   [(d["tenant"], d["schedule_key"], d["state"], d["kind"], d["channel"],
                     d["rule"] or d["at"], d["generation"]) for d in data])]
    if cursor:
        lines.append(remark(f"more match: next page with --after {cursor}"))
    outcome.text = "\n".join(lines)
    return outcome


def _next_occurrences(row: db.Row, now: datetime) -> list[dict[str, str]]:
    from reminders.recurrence import preview
    from reminders.series import recurrence_of

    if row["state"] != "active":
        return []
    if row["rrule"] is None:
        return ([{"utc": row["at"].astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                  "local": row["at"].astimezone(UTC).isoformat()}] if row["at"] > now else [])
    return preview(recurrence_of(row), now, PREVIEW_COUNT)


def show(conn: db.Connection, *, key: str, tenant: str | None, now: datetime) -> Outcome:
    """The rule, zone, local time, DST policy, revision, generation and state; the next
    occurrences; the newest deliveries by generation; the operator actions on it."""
    owner, key = _owner(conn, key, tenant)
    row = _detail(conn, owner, key)
    deliveries = db.fetch_all(conn, "schedule_deliveries_page", {
        "schedule_id": row["id"], "tenant": owner, "limit": SHOWN_DELIVERIES})
    by_generation: dict[int, list[dict[str, Any]]] = {}
    for d in deliveries:
        by_generation.setdefault(int(d["generation"]), []).append({
            "delivery_key": d["delivery_key"], "origin": d["origin"],
            "recipient": d["recipient"], "occurrence_at": iso(d["occurrence_at"]),
            "due_at": iso(d["due_at"]), "state": d["state"], "reason": d["reason"],
            "attempts": d["attempts_made"]})
    timeline = [{"at": iso(a["at"]), "who": a["who"], "via": a["via"], "action": a["action"],
                 "reason": a["reason"]}
                for a in db.fetch_all(conn, "schedule_timeline",
                                      {"tenant": owner, "key": key, "limit": SHOWN_ACTIONS})]
    try:
        upcoming = _next_occurrences(row, now)
    except (ValueError, InvalidInput) as exc:
        upcoming = []
        problem = f"the rule cannot be expanded: {exc}"
    else:
        problem = row["problem"]
    data = {"tenant": owner, "schedule_key": key, "state": state_of(row), "kind": row["kind"],
            "channel": row["channel"], "rule": row["rrule"], "tz": row["tz"],
            "local_start": row["local_start"].isoformat() if row["local_start"] else None,
            "at": iso(row["at"]) if row["at"] else None,
            "dst": {"gap": row["gap_policy"], "overlap": row["overlap_policy"]},
            "revision": row["revision"], "generation": row["generation"],
            "problem": problem, "next": upcoming,
            "deliveries": [{"generation": g, "deliveries": ds}
                           for g, ds in sorted(by_generation.items(), reverse=True)],
            "timeline": timeline}
    lines = [f"{key} (tenant {owner}): {data['state']}",
             f"  rule: {row['rrule'] or 'once at ' + str(data['at'])}"
             + (f" in {row['tz']} from {data['local_start']}" if row["rrule"] else ""),
             f"  DST: gap {row['gap_policy']}, overlap {row['overlap_policy']}; "
             f"revision {row['revision']}, generation {row['generation']}"]
    if problem:
        lines.append(f"  problem: {problem}")
    lines.append("  next: " + (", ".join(o["local"] for o in upcoming) or "(none)"))
    for group in data["deliveries"]:
        lines.append(f"  generation {group['generation']}:")
        lines += [f"    {d['occurrence_at']}  {d['state']:<10} {d['origin']:<8} "
                  f"{d['delivery_key']}" for d in group["deliveries"]]
    lines.append("  timeline:" + ("" if timeline else " (no operator actions)"))
    lines += [f"    {a['at']}  {a['action']} by {a['who']} via {a['via']}"
              + (f": {a['reason']}" if a["reason"] else "") for a in timeline]
    return Outcome(data, "\n".join(lines))


# ---------------------------------------------------------------- writes


def hold(conn: db.Connection, *, now: datetime, key: str, tenant: str | None, paused: bool,
         who: str, via: str, reason: str | None = None) -> Outcome:
    """Pause (its pending deliveries wait; nothing pages) or resume one schedule; again changes
    nothing. The change and its operator action commit together."""
    from reminders import operator

    reason = checked_reason(reason, required=False)
    owner, key = _owner(conn, key, tenant)
    with db.transaction(conn):
        row = db.fetch_one(conn, "api_pause", {"tenant": owner, "key": key, "paused": paused,
                                               "now": now})
        changed = bool(row and row["changed"])
        if changed:
            operator.record_action(conn, action="paused" if paused else "resumed",
                                   obj="schedule", name=key, tenant=owner, reason=reason,
                                   now=now, who=who, via=via)
    verb = "paused" if paused else "resumed"
    return Outcome({"tenant": owner, "schedule_key": key, "paused": paused,
                    "changed": changed},
                   f"{key} {verb}" + ("" if changed else " (already)"))


def trigger(conn: db.Connection, *, now: datetime, key: str, tenant: str | None, who: str,
            via: str, reason: str | None = None) -> Outcome:
    """Send the schedule now, once per recipient, each with its own key
    (``...:trigger:<instant>``); the series stays as it was."""
    from reminders import operator

    reason = checked_reason(reason, required=False)
    owner, key = _owner(conn, key, tenant)
    with db.transaction(conn):
        rows = db.fetch_all(conn, "api_trigger", {"tenant": owner, "key": key, "now": now})
        if rows:
            operator.record_action(conn, action="triggered", obj="schedule", name=key,
                                   tenant=owner, reason=reason, now=now, who=who, via=via,
                                   detail={"deliveries": len(rows)})
    made = [{"recipient": r["recipient"], "delivery_key": r["delivery_key"],
             "due_at": iso(r["due_at"]), "state": r["state"]} for r in rows]
    return Outcome({"tenant": owner, "schedule_key": key, "triggered": made},
                   f"triggered {key}: {len(made)} deliveries due now"
                   + "".join(f"\n  {d['delivery_key']}" for d in made)
                   if made else f"{key} was already triggered at {iso(now)}: nothing new")


def _window(row: db.Row, start: datetime, end: datetime, now: datetime,
            limit: int) -> tuple[list[datetime], bool]:
    """The schedule's occurrences in [start, min(end, now)], at most ``limit`` (and whether
    more are in the window)."""
    from reminders.series import recurrence_of

    stop = min(end, now)
    if row["rrule"] is None:
        found = [row["at"]] if start <= row["at"] <= stop else []
        return found, False
    found = [o.utc for o in recurrence_of(row).occurrences_after(
        start - timedelta(microseconds=1), limit + 1) if o.utc <= stop]
    return found[:limit], len(found) > limit


def backfill(conn: db.Connection, *, now: datetime, key: str, tenant: str | None,
             start: str, end: str, limit: int, who: str | None, via: str,
             reason: str | None = None, dry_run: bool = False,
             progress: Callable[[str], None] | None = None) -> Outcome:
    """Materialise the occurrences [--from, --to] missed (never after now), at most ``limit``
    occurrences, each with its occurrence's key; an occurrence that exists for a recipient in
    any state is never made again. ``dry_run`` lists what it would make and changes nothing.
    Backfilled deliveries are due now, and their staleness window counts from now.
    ``progress`` is told what is being done, as each step begins."""
    def step(what: str) -> None:
        if progress is not None:
            progress(what)

    from reminders import operator
    from reminders.cli_format import table

    reason = checked_reason(reason, required=False)
    first, last = instant(start, "--from"), instant(end, "--to")
    if last < first:
        raise InvalidInput(f"--to ({iso(last)}) is before --from ({iso(first)})")
    if not 1 <= limit <= MAX_BACKFILL:
        raise InvalidInput(f"--limit: must be from 1 to {MAX_BACKFILL}, got {limit}")
    owner, key = _owner(conn, key, tenant)
    row = _detail(conn, owner, key)
    if row["state"] == "cancelled":
        raise InvalidInput(f"schedule {key!r} is cancelled: nothing to backfill")
    step(f"expanding the rule of {key} over the window")
    try:
        occurrences, more = _window(row, first, last, now, limit)
    except ValueError as exc:
        raise InvalidInput(f"schedule {key!r}: the rule cannot be expanded: {exc}") from None
    args = {"tenant": owner, "key": key, "occurrences": occurrences, "now": now}
    step(f"{len(occurrences)} occurrences in the window; "
         + ("finding those missing" if dry_run else "making their deliveries"))
    if dry_run:
        missing = db.fetch_all(conn, "backfill_missing", args)
        made = [{"recipient": r["recipient"], "occurrence_at": iso(r["occurrence_at"])}
                for r in missing]
    else:
        if who is None:
            raise ValueError("backfill: who is backfilling must be named")
        with db.transaction(conn):
            rows = db.fetch_all(conn, "api_backfill", args) if occurrences else []
            if rows:
                operator.record_action(
                    conn, action="backfilled", obj="schedule", name=key, tenant=owner,
                    reason=reason, now=now, who=who, via=via,
                    detail={"from": iso(first), "to": iso(last), "deliveries": len(rows)})
        made = [{"recipient": r["recipient"], "occurrence_at": iso(r["occurrence_at"]),
                 "delivery_key": r["delivery_key"], "state": r["state"]} for r in rows]
    data = {"tenant": owner, "schedule_key": key, "from": iso(first), "to": iso(last),
            "dry_run": dry_run, "occurrences": len(occurrences), "more": more,
            ("would_make" if dry_run else "made"): made}
    verb = "would make" if dry_run else "made"
    text = (f"backfill {key}: {len(occurrences)} occurrences in the window; {verb} "
            f"{len(made)} deliveries (those that exist are never made again)"
            + (f"; more occurrences than --limit {limit}" if more else "")
            + ("\n" + table(["occurrence", "recipient"],
                            [(d["occurrence_at"], d["recipient"]) for d in made])
               if made else ""))
    outcome = Outcome(data, text)
    if more:
        outcome.notes.append(f"backfill: more occurrences in the window than --limit {limit}; "
                             "run it again from the last one")
    return outcome
