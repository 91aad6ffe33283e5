"""Operator reads: system status and one delivery's story (state, reason, attempts, events);
operator actions, each recorded with who and why."""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from reminders import db
from reminders.clock import iso
from reminders.errors import NotFound

ACTOR_ENV = "REMINDERS_ACTOR"
# Operator actions `show` lists with a delivery: the latest on its tenant, endpoint, kind and
# schedule.
ACTIONS_SHOWN = 20
OBJECTS = ("tenant", "endpoint", "kind", "schedule")

STATES = ("scheduled", "leased", "retrying", "sent", "failed", "suppressed", "stale", "unknown",
          "dead")


def status(conn: db.Connection, *, now: datetime, tenant: str | None = None) -> dict[str, Any]:
    params = {"now": now, "tenant": tenant}
    by_state = dict.fromkeys(STATES, 0)
    by_channel: dict[str, dict[str, int]] = {}
    for row in db.fetch_all(conn, "status_by_state", params):
        by_state[row["state"]] += row["n"]
        by_channel.setdefault(row["channel"], {})[row["state"]] = row["n"]
    oldest = db.fetch_one(conn, "status_oldest_overdue", params) or {}
    removed = db.fetch_one(conn, "retention_removed", params) or {}
    expired = db.fetch_one(conn, "status_expired_leases", params) or {}
    from reminders.timezones import tzdata_version

    paused = [r["tenant"] for r in db.fetch_all(conn, "tenants_paused")
              if tenant is None or r["tenant"] == tenant]
    overdue_by = [{"tenant": r["tenant"], "kind": r["kind"], "channel": r["channel"],
                   "overdue": int(r["n"]),
                   "oldest_overdue_seconds": round(float(r["seconds"] or 0.0), 3)}
                  for r in db.fetch_all(conn, "status_overdue_by", params)]
    return {"now": iso(now), "tenant": tenant, "by_state": by_state, "by_channel": by_channel,
            "paused_tenants": paused, "overdue_by": overdue_by,
            "total": sum(by_state.values()),
            "oldest_overdue_seconds": round(float(oldest.get("seconds") or 0.0), 3),
            "expired_leases": int(expired.get("n") or 0), "tzdata": tzdata_version(),
            "retention_removed": {
                "last_7_days": {"deliveries": int(removed.get("deliveries_7d") or 0),
                                "attempts": int(removed.get("attempts_7d") or 0),
                                "events": int(removed.get("events_7d") or 0)},
                "deliveries_in_all": int(removed.get("deliveries_total") or 0)}}


def status_text(data: dict[str, Any]) -> str:
    from reminders.cli_format import duration

    states = ", ".join(f"{k} {v}" for k, v in data["by_state"].items() if v)
    text = (f"deliveries: {data['total']} ({states or 'none'})\n"
            f"oldest overdue: {duration(data['oldest_overdue_seconds'])}; "
            f"expired leases: {data['expired_leases']}")
    if data.get("paused_tenants"):
        text += f"\npaused tenants: {', '.join(data['paused_tenants'])}"
    if data.get("overdue_by"):
        from reminders.cli_format import table

        text += "\noverdue by tenant, kind and channel:\n" + table(
            ["tenant", "kind", "channel", "overdue", "oldest"],
            [(r["tenant"], r["kind"], r["channel"], r["overdue"],
              duration(r["oldest_overdue_seconds"])) for r in data["overdue_by"]])
    removed = data.get("retention_removed")
    if removed and removed["deliveries_in_all"]:
        week = removed["last_7_days"]
        text += (f"\nretention removed: {week['deliveries']} deliveries in the last 7 days "
                 f"({removed['deliveries_in_all']} in all)")
    for name, counts in data.get("queues", {}).items():
        text += f"\n{name} queue: {counts['visible']} waiting, {counts['in_flight']} in flight"
    if data.get("queues_error"):
        text += f"\nqueues: unreachable ({data['queues_error']}); the counts above are Postgres'"
    return text


def current_user(env: dict[str, str] | None = None) -> str:
    """Who is acting: ``REMINDERS_ACTOR`` when set (a shared service account names its human),
    else the operating-system user."""
    from reminders.errors import InvalidInput

    named = (os.environ if env is None else env).get(ACTOR_ENV)
    if named is not None:
        if not named.strip() or not named.isprintable() or len(named) > 200:
            raise InvalidInput(f"{ACTOR_ENV}: expected a name such as alice@example.com, "
                               f"got {named!r}")
        return named.strip()
    import getpass

    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "unknown"


def record_action(conn: db.Connection, *, action: str, obj: str, name: str,
                  tenant: str | None, reason: str | None, now: datetime,
                  who: str | None = None) -> None:
    """One operator action on a tenant, an endpoint, a kind or a schedule: who and why."""
    if obj not in OBJECTS:
        raise ValueError(f"operator action on {obj!r}: expected one of {OBJECTS}")
    db.execute(conn, "operator_action_add", {
        "now": now, "who": who or current_user(), "action": action, "object": obj,
        "tenant": tenant, "name": name, "reason": (reason or "").strip() or None})


def _delivery_json(conn: db.Connection, row: db.Row) -> dict[str, Any]:
    ref = {"id": row["id"], "tenant": row["tenant"]}
    attempts = db.fetch_all(conn, "attempts_of_delivery", ref)
    events = db.fetch_all(conn, "events_of_delivery", ref)
    actions = db.fetch_all(conn, "operator_actions_of_delivery", {
        "tenant": row["tenant"], "destination": row["destination"], "kind": row["kind"],
        "schedule_key": row["schedule_key"], "limit": ACTIONS_SHOWN})
    return {
        "delivery_key": row["delivery_key"], "schedule_key": row["schedule_key"],
        "tenant": row["tenant"], "kind": row["kind"], "recipient": row["recipient"],
        "channel": row["channel"], "destination": row["destination"],
        "occurrence_at": iso(row["occurrence_at"]), "due_at": iso(row["due_at"]),
        "revision": row["revision"], "state": row["state"], "reason": row["reason"],
        "attempts_made": row["attempts_made"], "redrives": row["redrives"],
        "attempts": [{**a, "started_at": iso(a["started_at"]),
                      "finished_at": iso(a["finished_at"]) if a["finished_at"] else None,
                      "retry_after": iso(a["retry_after"]) if a["retry_after"] else None}
                     for a in attempts],
        "events": [{**e, "at": iso(e["at"])} for e in events],
        "operator_actions": [{**a, "at": iso(a["at"])} for a in actions],
    }


def show(conn: db.Connection, *, key: str, tenant: str) -> dict[str, Any]:
    """A delivery by its key; or, given a schedule key, every delivery of that schedule."""
    row = db.fetch_one(conn, "delivery_by_key", {"key": key, "tenant": tenant})
    if row is not None:
        return _delivery_json(conn, row)
    rows = db.fetch_all(conn, "deliveries_of_schedule", {"key": key, "tenant": tenant})
    if not rows:
        raise NotFound(f"no delivery or schedule with key {key!r} for tenant {tenant!r}")
    return {"schedule_key": key, "tenant": tenant,
            "deliveries": [_delivery_json(conn, r) for r in rows]}


RECONCILE_TARGETS = ("sent", "failed", "dead", "retry")


def reconcile(conn: db.Connection, *, key: str, tenant: str, target: str, reason: str,
              now: datetime, who: str | None = None) -> dict[str, Any]:
    """Settle a parked delivery (typically ``unknown``) after an operator checked what the
    receiver got: ``sent`` (it arrived), ``failed``/``dead`` (give up), or ``retry`` (due again
    now, with the same delivery key). Recorded as an operator event with who (default: the
    current user) and the reason."""
    from reminders.errors import InvalidInput

    if target not in RECONCILE_TARGETS:
        raise InvalidInput(f"--as must be one of {', '.join(RECONCILE_TARGETS)}, got {target!r}")
    if not reason.strip():
        raise InvalidInput("a reason is required: say what you checked")
    with db.transaction(conn):
        try:
            row = db.fetch_one(conn, "delivery_reconcile", {
                "key": key, "tenant": tenant, "target": target, "now": now,
                "reason": f"operator: {reason.strip()}"})
        except InvalidInput as exc:
            if "deliveries_one_pending" not in str(exc):
                raise
            raise InvalidInput(f"delivery {key}: its series already has a pending delivery for "
                               "this recipient; retrying this one too would send two") from None
        if row is None:
            current = db.fetch_one(conn, "delivery_by_key", {"key": key, "tenant": tenant})
            if current is None:
                raise NotFound(f"no delivery with key {key!r} for tenant {tenant!r}")
            moved = db.fetch_one(conn, "delivery_schedule_moved_on", {"key": key,
                                                                     "tenant": tenant})
            if target == "retry" and moved is not None and current["state"] in (
                    "unknown", "failed", "dead", "stale", "suppressed"):
                why = ("its schedule is cancelled" if moved["schedule_state"] == "cancelled"
                       else "its schedule was rescheduled since" if moved["rescheduled"]
                       else "its schedule has a newer revision")
                raise InvalidInput(f"delivery {key}: {why}; a retry would only be suppressed")
            raise InvalidInput(f"delivery {key} is {current['state']}: only unknown, failed, "
                               "dead, stale or suppressed deliveries can be reconciled")
        db.execute(conn, "operator_event_add", {
            "tenant": tenant, "id": row["id"], "now": now, "who": who or current_user(),
            "event": f"reconciled as {target}", "detail": reason.strip()})
    return {"delivery_key": key, "tenant": tenant, "state": row["state"], "reason": row["reason"]}


def in_state(conn: db.Connection, *, state: str, tenant: str | None,
             limit: int) -> list[dict[str, Any]]:
    from reminders.errors import InvalidInput

    if state not in STATES:
        raise InvalidInput(f"unknown state {state!r}; expected one of {', '.join(STATES)}")
    rows = db.fetch_all(conn, "deliveries_in_state", {"state": state, "tenant": tenant,
                                                      "limit": max(1, min(limit, 10_000))})
    return [{"delivery_key": r["delivery_key"], "tenant": r["tenant"],
             "schedule_key": r["schedule_key"], "recipient": r["recipient"],
             "channel": r["channel"], "state": r["state"], "reason": r["reason"],
             "occurrence_at": iso(r["occurrence_at"]), "attempts_made": r["attempts_made"],
             "updated_at": iso(r["updated_at"])} for r in rows]


def show_text(data: dict[str, Any]) -> str:
    items = data.get("deliveries", [data])
    lines = []
    for d in items:
        lines.append(f"{d['delivery_key']}: {d['state']}"
                     + (f" ({d['reason']})" if d["reason"] else ""))
        lines.append(f"  tenant {d['tenant']}, kind {d['kind']}, recipient {d['recipient']} "
                     f"on {d['channel']}, due {d['due_at']}, schedule {d['schedule_key']}")
        lines += [f"  attempt {a['attempt_no']}: {a['outcome'] or 'open'} {a['detail'] or ''}"
                  .rstrip() for a in d["attempts"]]
        timeline = [(e["at"], f"{e['actor']}" + (f" {e['who']}" if e.get("who") else "")
                     + f": {e['event']}" + (f" ({e['detail']})" if e.get("detail") else ""))
                    for e in d["events"]]
        timeline += [(a["at"], f"operator {a['who']}: {a['action']} {a['object']} {a['name']}"
                      + (f" ({a['reason']})" if a["reason"] else " (no reason given)"))
                     for a in d.get("operator_actions", [])]
        lines += [f"  {at}  {what}" for at, what in sorted(timeline, key=lambda t: t[0])]
    return "\n".join(lines)


def _page_row(r: db.Row) -> dict[str, Any]:
    return {"delivery_key": r["delivery_key"], "tenant": r["tenant"],
            "schedule_key": r["schedule_key"], "recipient": r["recipient"],
            "channel": r["channel"], "state": r["state"], "reason": r["reason"],
            "occurrence_at": iso(r["occurrence_at"]), "attempts_made": r["attempts_made"],
            "updated_at": iso(r["updated_at"]), "kind": r["kind"], "due_at": iso(r["due_at"])}


def deliveries(conn: db.Connection, *, limit: int, state: str | None = None,
               tenant: str | None = None, kind: str | None = None, channel: str | None = None,
               recipient: str | None = None, due_from: datetime | None = None,
               due_to: datetime | None = None,
               after: tuple[datetime, int] | None = None) -> tuple[list[dict[str, Any]], bool]:
    """A page of deliveries matching every filter given, by due time; and whether more match.
    ``after`` is the (due_at, id) the previous page ended on."""
    from reminders.errors import InvalidInput

    if state is not None and state not in STATES:
        raise InvalidInput(f"unknown state {state!r}; expected one of {', '.join(STATES)}")
    if not 1 <= limit <= 10_000:
        raise InvalidInput(f"limit must be from 1 to 10000, got {limit}")
    rows = db.fetch_all(conn, "deliveries_filtered", {
        "state": state, "tenant": tenant, "kind": kind, "channel": channel,
        "recipient": recipient, "due_from": due_from, "due_to": due_to,
        "after_due": after[0] if after else None, "after_id": after[1] if after else None,
        "limit": limit + 1})
    more = len(rows) > limit
    page = [{**_page_row(r), "id": r["id"]} for r in rows[:limit]]
    return page, more


def tenants(conn: db.Connection, *, limit: int = 1000) -> list[dict[str, Any]]:
    return [{"tenant": r["tenant"], "paused": r["paused"], "pending": int(r["pending"]),
             "schedules": int(r["schedules"]), "created_at": iso(r["created_at"])}
            for r in db.fetch_all(conn, "tenants_list", {"limit": limit})]


def endpoints(conn: db.Connection, *, tenant: str | None,
              limit: int = 1000) -> list[dict[str, Any]]:
    return [{"id": r["id"], "tenant": r["tenant"], "url": r["url"],
             "created_at": iso(r["created_at"])}
            for r in db.fetch_all(conn, "endpoints_list", {"tenant": tenant, "limit": limit})]


def opt_outs(conn: db.Connection, *, tenant: str | None, channel: str | None,
             recipient: str | None, limit: int = 1000) -> list[dict[str, Any]]:
    return [{"tenant": r["tenant"], "recipient": r["recipient"], "channel": r["channel"],
             "created_at": iso(r["created_at"])}
            for r in db.fetch_all(conn, "opt_outs_list", {
                "tenant": tenant, "channel": channel, "recipient": recipient,
                "limit": limit})]
