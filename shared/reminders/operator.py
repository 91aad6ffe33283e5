"""Operator reads: system status and one delivery's story (state, reason, attempts, events);
operator actions, each recorded with who and why."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from datetime import datetime
from typing import Any

from reminders import db
from reminders.cli_format import MAX_SHOW_DELIVERIES, SHOW_DELIVERIES
from reminders.clock import iso
from reminders.errors import InvalidInput, NotFound

ACTOR_ENV = "REMINDERS_ACTOR"
# Operator actions `show` lists with a delivery: the latest on its tenant, endpoint, kind and
# schedule.
ACTIONS_SHOWN = 20
OBJECTS = ("tenant", "endpoint", "kind", "schedule", "deliveries", "channel")
VIAS = ("cli", "console", "ops")

STATES = ("scheduled", "leased", "retrying", "sent", "failed", "suppressed", "stale", "unknown",
          "dead")


# The held deliveries `status` counts stop here (a count of at least this many says so).
HELD_COUNT_CAP = 10_000


def status(conn: db.Connection, *, now: datetime, tenant: str | None = None) -> dict[str, Any]:
    params = {"now": now, "tenant": tenant}
    by_state = dict.fromkeys(STATES, 0)
    by_channel: dict[str, dict[str, int]] = {}
    breakdown: list[dict[str, Any]] = []
    for row in db.fetch_all(conn, "status_breakdown", params):
        n = int(row["n"])
        by_state[row["state"]] += n
        channel = by_channel.setdefault(row["channel"], {})
        channel[row["state"]] = channel.get(row["state"], 0) + n
        breakdown.append({"tenant": row["tenant"], "kind": row["kind"],
                          "channel": row["channel"], "state": row["state"], "n": n})
    by_channel = {name: dict(sorted(counts.items())) for name, counts in sorted(
        by_channel.items())}
    first = db.fetch_one(conn, "oldest_overdue_delivery", params)
    oldest = db.fetch_one(conn, "status_oldest_overdue", params) or {}
    removed = db.fetch_one(conn, "retention_removed", params) or {}
    expired = db.fetch_one(conn, "status_expired_leases", params) or {}
    from reminders.timezones import tzdata_version

    paused = [r["tenant"] for r in db.fetch_all(conn, "tenants_paused")
              if tenant is None or r["tenant"] == tenant]
    held = db.fetch_one(conn, "status_paused_schedules", {**params, "cap": HELD_COUNT_CAP}) or {}
    # A paused tenant's groups count its pending deliveries (due or not) from the kept counts:
    # its backlog is never read row by row ("paused": true).
    overdue_by = [{"tenant": r["tenant"], "kind": r["kind"], "channel": r["channel"],
                   "overdue": int(r["n"]),
                   "oldest_overdue_seconds": round(float(r["seconds"] or 0.0), 3),
                   "paused": bool(r["paused"])}
                  for r in db.fetch_all(conn, "status_overdue_by", params)]
    return {"now": iso(now), "tenant": tenant, "by_state": by_state, "by_channel": by_channel,
            "paused_tenants": paused, "overdue_by": overdue_by,
            "pacing": pacing_status(conn, now=now, tenant=tenant),
            # A paused schedule's pending deliveries wait, apart from every overdue figure
            # above (as a paused tenant's do on the scanner's metrics): counted here instead.
            "paused_schedules": {
                "schedules": int(held.get("schedules") or 0),
                "held": int(held.get("held") or 0),
                "held_due": int(held.get("held_due") or 0),
                "oldest_held_due_seconds": round(float(held.get("oldest_held_due_seconds")
                                                       or 0.0), 3),
                "counted_up_to": HELD_COUNT_CAP},
            "by_tenant_kind_channel": breakdown,
            "oldest_overdue_delivery": None if first is None else {
                "tenant": first["tenant"], "delivery_key": first["delivery_key"],
                "due_at": iso(first["due_at"]), "state": first["state"]},
            "total": sum(by_state.values()),
            "oldest_overdue_seconds": round(float(oldest.get("seconds") or 0.0), 3),
            "expired_leases": int(expired.get("n") or 0),
            # Counted under scheduled/retrying above: their rows are not written until a
            # consumer takes the lease.
            "pending_leases": int(expired.get("pending") or 0), "tzdata": tzdata_version(),
            "retention_removed": {
                "last_7_days": {"deliveries": int(removed.get("deliveries_7d") or 0),
                                "attempts": int(removed.get("attempts_7d") or 0),
                                "events": int(removed.get("events_7d") or 0)},
                "deliveries_in_all": int(removed.get("deliveries_total") or 0)}}


PACING_ENDPOINTS_SHOWN = 20  # status_pacing's bound: the channels and this many endpoints


def pacing_status(conn: db.Connection, *, now: datetime,
                  tenant: str | None = None) -> list[dict[str, Any]]:
    """Each paced channel, and at most ``PACING_ENDPOINTS_SHOWN`` paced endpoints (those
    throttled in the last hour first; the last row says ``more_endpoints`` when others are
    paced: ``channels list`` shows every one): its rate and the rate in force, the sends
    waiting for a token (the slots its bucket booked ahead for deliveries released for want
    of one), and its provider throttles in the last hour (every throttled send, counted by the
    minute) with the latest one's instant. Read off the bucket's own rows: an unpaced channel
    has none. A tenant's view shows the channels, not the endpoints (an endpoint's URL is its
    owner's)."""
    from reminders.pacing import RECOVER_PER_SECOND

    limit = 0 if tenant is not None else PACING_ENDPOINTS_SHOWN
    rows = db.fetch_all(conn, "status_pacing", {"now": now, "recover": RECOVER_PER_SECOND,
                                                "limit": limit})
    out = []
    for row in rows:
        channel, _, url = str(row["key"]).partition(" ")
        last = row["last_throttled_at"]
        out.append({
            "key": row["key"], "channel": channel, "endpoint": url or None,
            "rate_per_second": row["rate"], "burst": row["burst"],
            "rate_in_force_per_second": round(float(row["rate_now"]), 3),
            "waiting_for_token": int(row["waiting"]),
            "booked_until": None if row["booked_until"] is None else iso(row["booked_until"]),
            "throttles_last_hour": int(row["throttles_last_hour"]),
            "last_throttled_at": None if last is None else iso(last),
            "throttled_in_last_hour": int(row["throttles_last_hour"]) > 0,
            "rate_halvings": int(row["halvings"])})
    if tenant is None and out and out[-1]["endpoint"] and rows[-1]["more_endpoints"]:
        out[-1]["more_endpoints"] = True
    return out


def pacing_text(rows: list[dict[str, Any]]) -> str:
    from reminders.cli_format import table, terminal_safe

    def throttled(r: dict[str, Any]) -> str:
        if not r["throttles_last_hour"]:
            return "none"
        return f"{r['throttles_last_hour']} (the last {r['last_throttled_at']})"

    text = "paced channels:\n" + table(
        ["channel", "rate", "in force", "waiting for a token", "provider throttles, last hour"],
        [(terminal_safe(str(r["key"])), f"{r['rate_per_second']:g}/s",
          f"{r['rate_in_force_per_second']:g}/s",
          str(r["waiting_for_token"]) + (f" (booked until {r['booked_until']})"
                                         if r["booked_until"] else ""),
          throttled(r)) for r in rows])
    if rows and rows[-1].get("more_endpoints"):
        text += (f"\n(the first {PACING_ENDPOINTS_SHOWN} paced endpoints, those throttled in "
                 "the last hour first; `reminders channels list` shows every one)")
    return text


def status_text(data: dict[str, Any]) -> str:
    from reminders.cli_format import duration

    states = ", ".join(f"{k} {v}" for k, v in data["by_state"].items() if v)
    text = (f"deliveries: {data['total']} ({states or 'none'})\n"
            f"oldest overdue: {duration(data['oldest_overdue_seconds'])}; "
            f"expired leases: {data['expired_leases']}; "
            f"leases pending (on the queue, not taken yet): {data.get('pending_leases', 0)}")
    if data.get("paused_tenants"):
        text += f"\npaused tenants: {', '.join(data['paused_tenants'])}"
    held = data.get("paused_schedules") or {}
    if held.get("schedules") or held.get("held"):
        cap = held.get("counted_up_to")
        more = "+" if cap is not None and held["held"] >= cap else ""
        text += (f"\npaused schedules: {held['schedules']}, holding {held['held']}{more} "
                 f"pending deliveries ({held['held_due']} already due"
                 + (f", the oldest {duration(held['oldest_held_due_seconds'])} late"
                    if held["held_due"] else "") + "; apart from the overdue figures)")
    if data.get("overdue_by"):
        from reminders.cli_format import table

        text += "\noverdue by tenant, kind and channel:\n" + table(
            ["tenant", "kind", "channel", "overdue", "oldest"],
            [(r["tenant"] + (" (paused: all pending)" if r.get("paused") else ""), r["kind"],
              r["channel"], r["overdue"], duration(r["oldest_overdue_seconds"]))
             for r in data["overdue_by"]])
    if data.get("pacing"):
        text += "\n" + pacing_text(data["pacing"])
    removed = data.get("retention_removed")
    if removed and removed["deliveries_in_all"]:
        week = removed["last_7_days"]
        text += (f"\nretention removed: {week['deliveries']} deliveries in the last 7 days "
                 f"({removed['deliveries_in_all']} in all)")
    for name, counts in data.get("queues", {}).items():
        text += f"\n{name} queue: {counts['visible']} waiting, {counts['in_flight']} in flight"
    if data.get("queues_error"):
        text += f"\nqueues: unreachable ({data['queues_error']}); the counts above are Postgres'"
    if "alarms" in data:
        text += "\n" + alarms_text(data["alarms"])
    return text


def alarms_text(alarms: dict[str, Any]) -> str:
    """The alarms in ALARM, one a line, or why none can be shown."""
    from reminders.cli_format import terminal_safe

    if not alarms.get("available"):
        return f"alarms: {terminal_safe(str(alarms.get('why', 'not available')))}"
    firing = alarms.get("in_alarm") or []
    when = f" (evaluated {terminal_safe(str(alarms.get('evaluated_at')))})"
    if not firing:
        return f"alarms: none in ALARM{when}"
    lines = [f"alarms in ALARM{when}:"]
    lines += [f"  {terminal_safe(str(a.get('name')))} since {terminal_safe(str(a.get('since')))}"
              f": {terminal_safe(str(a.get('reason')))}" for a in firing]
    return "\n".join(lines)


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


# Who is acting, in parts (the operations function's proven caller: the role and the session
# name apart), added to every operator action recorded while it is set.
ACTING: ContextVar[dict[str, str] | None] = ContextVar("reminders_acting", default=None)


def record_action(conn: db.Connection, *, action: str, obj: str, name: str,
                  tenant: str | None, reason: str | None, now: datetime,
                  who: str | None = None, via: str = "cli",
                  detail: dict[str, Any] | None = None) -> None:
    """One operator action on a tenant, an endpoint, a kind, a schedule or a filtered set of
    deliveries: who, why, and through what (the command line, the console, the operations
    function)."""
    from psycopg.types.json import Jsonb

    if obj not in OBJECTS:
        raise ValueError(f"operator action on {obj!r}: expected one of {OBJECTS}")
    if via not in VIAS:
        raise ValueError(f"operator action via {via!r}: expected one of {VIAS}")
    from reminders.reasons import checked_reason

    db.execute(conn, "operator_action_add", {
        "now": now, "who": who or current_user(), "action": action, "object": obj,
        "tenant": tenant, "name": name, "reason": checked_reason(reason, required=False),
        "via": via, "detail": Jsonb({**(detail or {}), **(
            {"caller": ACTING.get()} if ACTING.get() else {})})})


def queue_counts(settings: Any) -> dict[str, Any]:
    """The transport's view beside the authority's: each queue's waiting and in-flight counts
    as ``{"queues": {...}}``, or ``{"queues_error": "AWS: ..."}`` when they do not answer (and
    ``{}`` when no queues are configured)."""
    if settings.queues is None:
        return {}
    from reminders import aws
    from reminders.queue import Queue

    try:
        sqs = aws.client("sqs")
        return {"queues": {name: Queue(sqs, url).counts() for name, url in (
            ("deliveries", settings.queues.deliveries), ("dlq", settings.queues.dlq),
            ("parking", settings.queues.parking))}}
    except Exception as exc:  # Postgres answered; say the transport did not
        if not type(exc).__module__.startswith(("botocore", "urllib3", "reminders")):
            raise
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return {"queues_error": f"AWS: {first}"}


def _schedule_json(row: db.Row | None, occurrence: datetime) -> dict[str, Any] | None:
    if row is None:
        return None
    local = None
    if row["tz"]:
        from zoneinfo import ZoneInfo

        local = occurrence.astimezone(ZoneInfo(row["tz"])).replace(tzinfo=None).isoformat()
    return {"schedule_key": row["schedule_key"], "kind": row["kind"], "state": row["state"],
            "at": iso(row["at"]) if row["at"] else None, "rrule": row["rrule"],
            "tz": row["tz"],
            "local_start": row["local_start"].isoformat() if row["local_start"] else None,
            "gap_policy": row["gap_policy"], "overlap_policy": row["overlap_policy"],
            "revision": row["revision"], "generation": row["generation"],
            "occurrence_local": local}


def _delivery_json(conn: db.Connection, row: db.Row) -> dict[str, Any]:
    ref = {"id": row["id"], "tenant": row["tenant"]}
    attempts = db.fetch_all(conn, "attempts_of_delivery", ref)
    events = db.fetch_all(conn, "events_of_delivery", ref)
    actions = db.fetch_all(conn, "operator_actions_of_delivery", {
        "tenant": row["tenant"], "destination": row["destination"], "kind": row["kind"],
        "schedule_key": row["schedule_key"], "limit": ACTIONS_SHOWN})
    schedule = _schedule_json(db.fetch_one(conn, "schedule_of_delivery", ref),
                              row["occurrence_at"])
    return {
        "delivery_key": row["delivery_key"], "schedule_key": row["schedule_key"],
        "tenant": row["tenant"], "kind": row["kind"], "recipient": row["recipient"],
        "channel": row["channel"], "destination": row["destination"],
        "occurrence_at": iso(row["occurrence_at"]), "due_at": iso(row["due_at"]),
        "revision": row["revision"], "state": row["state"], "reason": row["reason"],
        # Why it was due later than its occurrence: its kind's send window, its spread.
        "held": row.get("held"),
        "attempts_made": row["attempts_made"], "redrives": row["redrives"],
        # Leased by the scanner, its message on the queue, not taken by a consumer yet: the
        # row itself still says scheduled or retrying.
        "lease_pending_until": iso(row["pending_lease_expires_at"])
        if row.get("pending_lease_expires_at") else None,
        "attempts": [{**a, "started_at": iso(a["started_at"]),
                      "took_seconds": (a["finished_at"] - a["started_at"]).total_seconds()
                      if a["finished_at"] else None,
                      "finished_at": iso(a["finished_at"]) if a["finished_at"] else None,
                      "retry_after": iso(a["retry_after"]) if a["retry_after"] else None}
                     for a in attempts],
        "events": [{**e, "at": iso(e["at"])} for e in events],
        "operator_actions": [{**a, "at": iso(a["at"])} for a in actions],
        "schedule": schedule,
    }


def show(conn: db.Connection, *, key: str, tenant: str,
         limit: int = SHOW_DELIVERIES) -> dict[str, Any]:
    """A delivery by its key; or, given a schedule key, the schedule's first ``limit``
    deliveries (by occurrence, then recipient), and ``more`` when it has others (``list
    --schedule`` pages through them all)."""
    if not 1 <= limit <= MAX_SHOW_DELIVERIES:
        raise InvalidInput(f"--limit: 1 to {MAX_SHOW_DELIVERIES}, got {limit}")
    row = db.fetch_one(conn, "delivery_by_key", {"key": key, "tenant": tenant})
    if row is not None:
        return _delivery_json(conn, row)
    rows = db.fetch_all(conn, "deliveries_of_schedule_first",
                        {"key": key, "tenant": tenant, "limit": limit + 1})
    if not rows:
        raise NotFound(f"no delivery or schedule with key {key!r} for tenant {tenant!r}")
    return {"schedule_key": key, "tenant": tenant,
            "deliveries": [_delivery_json(conn, r) for r in rows[:limit]],
            "more": len(rows) > limit}


def payload_of(conn: db.Connection, *, key: str, tenant: str) -> Any:
    """The payload a delivery's sends carry, as its schedule holds it now."""
    row = db.fetch_one(conn, "delivery_payload", {"key": key, "tenant": tenant})
    if row is None:
        raise NotFound(f"no delivery with key {key!r} for tenant {tenant!r}")
    return row["payload"]


RECONCILE_TARGETS = ("sent", "failed", "dead", "retry")


def reconcile(conn: db.Connection, *, key: str, tenant: str, target: str, reason: str,
              now: datetime, who: str | None = None, note: str | None = None) -> dict[str, Any]:
    """Settle a parked delivery (typically ``unknown``) after an operator checked what the
    receiver got: ``sent`` (it arrived), ``failed``/``dead`` (give up), or ``retry`` (due again
    now, with the same delivery key). Recorded as an operator event with who (default: the
    current user) and the reason (:func:`reminders.reasons.checked_reason`), followed by
    ``note`` in brackets when given (where and by whom, for a bulk or console action)."""
    from reminders.errors import InvalidInput
    from reminders.reasons import checked_reason

    if target not in RECONCILE_TARGETS:
        raise InvalidInput(f"--as must be one of {', '.join(RECONCILE_TARGETS)}, got {target!r}")
    reason = checked_reason(reason, required=True) + (f" ({note})" if note else "")
    with db.transaction(conn):
        try:
            row = db.fetch_one(conn, "delivery_reconcile", {
                "key": key, "tenant": tenant, "target": target, "now": now,
                "reason": f"operator: {reason}"})
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
            "event": f"reconciled as {target}", "detail": reason})
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
    from reminders.cli_format import to_the_second as sec

    items = data.get("deliveries", [data])
    lines = []
    for d in items:
        lines.append(f"{d['delivery_key']}: {d['state']}"
                     + (f" ({d['reason']})" if d["reason"] else ""))
        lines.append(f"  tenant {d['tenant']}, kind {d['kind']}, recipient {d['recipient']} "
                     f"on {d['channel']}, due {sec(str(d['due_at']))}, "
                     f"schedule {d['schedule_key']}")
        if d.get("held"):
            lines.append(f"  occurrence {sec(str(d['occurrence_at']))}, {d['held']}")
        lines += [f"  attempt {a['attempt_no']}: {a['outcome'] or 'open'} {a['detail'] or ''}"
                  .rstrip() for a in d["attempts"]]
        timeline = [(e["at"], f"{e['actor']}" + (f" {e['who']}" if e.get("who") else "")
                     + f": {e['event']}" + (f" ({e['detail']})" if e.get("detail") else ""))
                    for e in d["events"]]
        timeline += [(a["at"], f"operator {a['who']}: {a['action']} {a['object']} {a['name']}"
                      + (f" ({a['reason']})" if a["reason"] else " (no reason given)"))
                     for a in d.get("operator_actions", [])]
        lines += [f"  {sec(str(at))}  {what}"
                  for at, what in sorted(timeline, key=lambda t: t[0])]
    if data.get("more"):
        lines.append(f"(the first {len(items)} deliveries of schedule {data['schedule_key']}; "
                     f"all of them: reminders list --schedule {shlex.quote(data['schedule_key'])} "
                     f"--tenant {shlex.quote(data['tenant'])})")
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
               after: tuple[datetime, int] | None = None,
               sort: str = "due",
               schedule: str | None = None) -> tuple[list[dict[str, Any]], bool]:
    """A page of deliveries matching every filter given, by due time (``sort="due"``, oldest
    first) or by last change (``sort="updated"``, newest first); and whether more match.
    ``after`` is the (due_at or updated_at, id) the previous page ended on."""
    from reminders.errors import InvalidInput

    if state is not None and state not in STATES:
        raise InvalidInput(f"unknown state {state!r}; expected one of {', '.join(STATES)}")
    if sort not in SORTS:
        raise InvalidInput(f"sort: one of {', '.join(SORTS)}, got {sort!r}")
    query = "deliveries_filtered" if sort == "due" else "deliveries_filtered_by_updated"
    return _page(conn, query, limit=limit, state=state, tenant=tenant,
                 kind=kind, channel=channel, recipient=recipient, due_from=due_from,
                 due_to=due_to, after=after, schedule=schedule)


SORTS = ("due", "updated")


def cursor_of(row: dict[str, Any], sort: str = "due") -> str:
    """The cursor a page's last row gives the next page (``--after``)."""
    return f"{row['due_at' if sort == 'due' else 'updated_at']}/{row['id']}"


def find(conn: db.Connection, *, text: str, tenant: str | None = None,
         ) -> list[dict[str, Any]]:
    """What a delivery key, a schedule key or a webhook-id names: each a (what, tenant, key),
    where ``what`` is ``delivery`` or ``schedule``. A webhook-id is the delivery key itself,
    or its percent-encoded form (:func:`reminders.channels.signing.message_id`)."""
    from urllib.parse import unquote

    from reminders.errors import InvalidInput

    text = text.strip()
    if not text:
        raise InvalidInput("go to: give a delivery key, a schedule key or a webhook-id")
    if len(text) > 2000:
        raise InvalidInput(f"go to: at most 2000 characters, got {len(text)}")
    found = [dict(r) for r in db.fetch_all(conn, "delivery_find",
                                           {"text": text, "tenant": tenant})]
    decoded = unquote(text) if "%" in text else text
    if not found and decoded != text:
        found = [dict(r) for r in db.fetch_all(conn, "delivery_find",
                                               {"text": decoded, "tenant": tenant})]
    return found


def _page(conn: db.Connection, query: str, *, limit: int, state: str | None,
          tenant: str | None, kind: str | None, channel: str | None, recipient: str | None,
          due_from: datetime | None, due_to: datetime | None,
          after: tuple[datetime, int] | None,
          schedule: str | None = None) -> tuple[list[dict[str, Any]], bool]:
    """One page of ``query`` (a keyset page by (due_at, id)), and whether more match. Each
    listing keeps its own query so the planner sees its literal predicate (the parked one is
    read off the partial index of parked rows)."""
    from reminders.errors import InvalidInput

    if not 1 <= limit <= 10_000:
        raise InvalidInput(f"limit must be from 1 to 10000, got {limit}")
    rows = db.fetch_all(conn, query, {
        "state": state, "tenant": tenant, "kind": kind, "channel": channel,
        "recipient": recipient, "due_from": due_from, "due_to": due_to, "schedule": schedule,
        "after_due": after[0] if after else None, "after_id": after[1] if after else None,
        "limit": limit + 1})
    return [{**_page_row(r), "id": r["id"]} for r in rows[:limit]], len(rows) > limit


# The tenants list counts each tenant's active schedules up to this many (then says more): the
# listing reads at most this many index entries a tenant, never every schedule it has.
COUNTED_SCHEDULES = 1000


def tenants(conn: db.Connection, *, limit: int = 1000) -> list[dict[str, Any]]:
    """The first ``limit`` tenants: paused or not, pending deliveries (the kept counts),
    active schedules (counted up to COUNTED_SCHEDULES; ``schedules_more`` when past it)."""
    return [{"tenant": r["tenant"], "paused": r["paused"], "pending": int(r["pending"]),
             "schedules": min(int(r["schedules"]), COUNTED_SCHEDULES),
             "schedules_more": int(r["schedules"]) > COUNTED_SCHEDULES,
             "created_at": iso(r["created_at"]),
             "max_pending": int(r["max_pending"]),
             "schedules_per_minute": int(r["schedules_per_minute"]),
             "default_limits": bool(r["default_limits"])}
            for r in db.fetch_all(conn, "tenants_list", {"limit": limit,
                                                         "counted": COUNTED_SCHEDULES})]


# The largest limit a tenant may be given (a bigint holds it, and nothing reaches it).
MAX_LIMIT = 10**12
LIMITS = ("max_pending", "schedules_per_minute")
# Left as it is (a limit not named); None: back to the deployment's default.
KEEP: Any = object()


def set_tenant_limits(conn: db.Connection, *, tenant: str | None, now: datetime,
                      actor: str | None = None,
                      max_pending: int | None = KEEP, schedules_per_minute: int | None = KEEP,
                      via: str = "cli", reason: str | None = None,
                      create: bool = False) -> dict[str, Any]:
    """A tenant's limits on what applications add (the SQL API's check_quota refuses past them
    with RM429), or, with ``tenant`` None, the deployment's defaults, which apply to every
    tenant without its own. A limit not given is kept; None gives a tenant the default again
    (the defaults themselves are always numbers). A change is recorded with who and why."""
    from reminders import schedules
    from reminders.errors import InvalidInput
    from reminders.reasons import checked_reason

    reason = checked_reason(reason, required=False)
    asked = {"max_pending": max_pending, "schedules_per_minute": schedules_per_minute}
    for name, value in asked.items():
        if value is KEEP or (value is None and tenant is not None):
            continue
        if value is None:
            raise InvalidInput(f"{name}: the deployment's default must be a number")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LIMIT:
            raise InvalidInput(f"{name}: must be a whole number from 0 to {MAX_LIMIT}, "
                               f"got {value!r}")
    with db.transaction(conn):
        if tenant is None:
            row = db.fetch_one(conn, "tenant_defaults_get")
        else:
            schedules.validate_tenant(tenant)
            row = db.fetch_one(conn, "tenant_get", {"tenant": tenant})
            if row is None and not create:
                raise NotFound(f"no tenant {tenant!r} (it has never scheduled anything); "
                               "pass --create to set its limits before it does")
            if row is None:
                db.execute(conn, "tenant_ensure", {"tenant": tenant})
                row = {"max_pending": None, "schedules_per_minute": None}
        assert row is not None
        before = {name: row[name] for name in LIMITS}
        after = {name: before[name] if asked[name] is KEEP else asked[name] for name in LIMITS}
        changed = after != before
        if changed:
            if tenant is None:
                db.execute(conn, "tenant_defaults_set", after)
            else:
                db.execute(conn, "tenant_limits_set", {**after, "tenant": tenant})
            record_action(conn, action="limits set", obj="tenant", name=tenant or "*",
                          tenant=tenant, reason=reason, now=now, who=actor, via=via,
                          detail={"before": before, "after": after})
    return {"tenant": tenant, **after, "changed": changed}


def tenant(conn: db.Connection, *, tenant: str) -> dict[str, Any]:
    row = db.fetch_one(conn, "tenant_get", {"tenant": tenant})
    if row is None:
        raise NotFound(f"no tenant {tenant!r} (it has never scheduled anything)")
    return {"tenant": row["id"], "paused": row["paused"], "created_at": iso(row["created_at"])}


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


# ---------------------------------------------------------------- the worklist and actions
# The command line and the console both call these: nothing either does is possible only there.

PARKED_STATES = ("unknown", "dead", "failed", "stale")
BULK_STATES = ("unknown", "failed", "dead", "stale", "suppressed")


def attention(conn: db.Connection, *, limit: int, state: str | None = None,
              tenant: str | None = None, kind: str | None = None, channel: str | None = None,
              recipient: str | None = None, due_from: datetime | None = None,
              due_to: datetime | None = None,
              after: tuple[datetime, int] | None = None) -> tuple[list[dict[str, Any]], bool]:
    """A page of parked deliveries (unknown, dead, failed, stale) with their reasons, by due
    time, every filter optional; and whether more match (``after`` as for :func:`deliveries`)."""
    from reminders.errors import InvalidInput

    if state is not None and state not in PARKED_STATES:
        raise InvalidInput(f"state must be one of {', '.join(PARKED_STATES)}, got {state!r}")
    return _page(conn, attention_query(tenant=tenant, state=state, kind=kind,
                                       recipient=recipient, channel=channel),
                 limit=limit, state=state,
                 tenant=tenant, kind=kind, channel=channel, recipient=recipient,
                 due_from=due_from, due_to=due_to, after=after)


def attention_query(*, tenant: str | None, state: str | None, kind: str | None = None,
                    recipient: str | None = None, channel: str | None = None) -> str:
    """The statement a page of the worklist runs: with a tenant, a state, a kind or a
    recipient, a range per parked state merged in due order (O(page) however many rows the
    tenant, the state, the kind or the recipient has, and one probe each when none match);
    else the parked index from its start, already O(page), and cheaper for it (one lookup of
    each schedule for the page, where the four ranges look a schedule up once each: 92 buffers
    against 228 for the first page at 1,000,000 rows). The same for a channel (migration
    0032). A due range alone is read off the parked index from due_from, filtered."""
    if any(f is not None for f in (tenant, state, kind, recipient, channel)):
        return "deliveries_parked_page_by_state"
    return "deliveries_parked_page"


def reconcile_bulk(conn: db.Connection, *, state: str | None, target: str, reason: str,
                   limit: int, now: datetime, actor: str, via: str = "cli",
                   tenant: str | None = None, kind: str | None = None,
                   channel: str | None = None, recipient: str | None = None,
                   due_from: datetime | None = None, due_to: datetime | None = None,
                   dry_run: bool = False,
                   only_keys: Sequence[str] | None = None,
                   progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Every delivery of ``state`` matching the filters (a tenant or a kind at least), at most
    ``limit``; ``dry_run`` lists them and changes nothing. Each is reconciled as ``target``
    and keeps an operator event with the reason and who ran it; the whole action is recorded
    in ``operator_actions``. ``only_keys``: reconcile only these of the rows that still match
    (what a dry run counted; a row that changed or newly matches since is left alone).
    ``progress`` is told (done, matched) after each row."""
    from reminders.errors import InvalidInput, RemindersError
    from reminders.reasons import checked_reason

    if via not in VIAS:
        raise ValueError(f"operator action via {via!r}: expected one of {VIAS}")
    if state not in BULK_STATES:
        raise InvalidInput("without a KEY, reconcile needs --state (one of "
                           f"{', '.join(BULK_STATES)}) and --tenant or --kind")
    if not (tenant or kind):
        raise InvalidInput("without a KEY, reconcile needs --tenant or --kind to bound it")
    if target not in RECONCILE_TARGETS:
        raise InvalidInput(f"--as must be one of {', '.join(RECONCILE_TARGETS)}, got {target!r}")
    reason = checked_reason(reason, required=True)
    filters: dict[str, Any] = {"state": state, "tenant": tenant, "kind": kind,
                               "channel": channel, "recipient": recipient,
                               "due_from": due_from, "due_to": due_to}
    skipped: list[dict[str, Any]] = []
    if only_keys is None:
        rows, more = deliveries(conn, limit=limit, **filters)
    else:
        rows, skipped = _counted_rows(conn, list(dict.fromkeys(only_keys)), limit=limit,
                                      **filters)
        more = False
    done: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    where = _BULK_WHERE[via]
    for row in rows:
        if dry_run:
            done.append({"delivery_key": row["delivery_key"], "tenant": row["tenant"],
                         "state": row["state"], "reason": row["reason"]})
            continue
        try:
            done.append(reconcile(conn, key=row["delivery_key"], tenant=row["tenant"],
                                  target=target, reason=reason, now=now, who=actor,
                                  note=f"{where}, by {actor}"))
        except RemindersError as exc:
            failed.append({"delivery_key": row["delivery_key"], "tenant": row["tenant"],
                           "error": str(exc)})
        if progress is not None:
            progress(len(done) + len(failed), len(rows))
    data: dict[str, Any] = {
        "dry_run": dry_run, "as": target, "matched": len(rows), "more": more,
        "reconciled": [] if dry_run else done, "would_reconcile": done if dry_run else [],
        "failed": failed}
    if only_keys is not None:
        # Exactly the keys given are acted on; each one that was not is named with why.
        data["changed_since_counted"] = len(skipped)
        data["not_acted_on"] = skipped + [
            {"delivery_key": f["delivery_key"], "why": f["error"]} for f in failed]
    if not dry_run:
        shown = {**filters, "due_from": iso(due_from) if due_from else None,
                 "due_to": iso(due_to) if due_to else None, "limit": limit}
        detail: dict[str, Any] = {
            "filters": {k: v for k, v in shown.items() if v is not None},
            "reconciled": len(done), "refused": len(failed)}
        if only_keys is not None:
            detail["counted"] = len(rows) + len(skipped)
            detail["not_acted_on"] = len(data["not_acted_on"])
        record_action(conn, action=f"reconciled as {target}", obj="deliveries",
                      name=_filters_text(shown), tenant=tenant, reason=reason, now=now,
                      who=actor, via=via, detail=detail)
    return data


def _counted_rows(conn: db.Connection, keys: list[str], *, limit: int, state: str | None,
                  tenant: str | None, kind: str | None, channel: str | None,
                  recipient: str | None, due_from: datetime | None,
                  due_to: datetime | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Of exactly these keys (what a dry run counted, or the rows an operator selected), the
    rows that still match every filter, by due time; and each key that does not, with why. A
    row that came to match since is never among them: only the keys given are read."""
    from reminders.errors import InvalidInput

    if len(keys) > limit:
        raise InvalidInput(f"{len(keys)} deliveries named, more than the limit of {limit}")
    found = {r["delivery_key"]: r for r in db.fetch_all(conn, "deliveries_by_keys", {
        "keys": keys, "tenant": tenant, "limit": max(1, len(keys))})}
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for key in keys:
        r = found.get(key)
        if r is None:
            skipped.append({"delivery_key": key, "why": "no such delivery" + (
                f" of tenant {tenant}" if tenant else "")})
            continue
        why = _mismatch(r, state=state, kind=kind, channel=channel, recipient=recipient,
                        due_from=due_from, due_to=due_to)
        if why is None:
            rows.append({**_page_row(r), "id": r["id"]})
        else:
            skipped.append({"delivery_key": key, "why": why})
    rows.sort(key=lambda r: (r["due_at"], r["id"]))
    return rows, skipped


def _mismatch(r: db.Row, *, state: str | None, kind: str | None, channel: str | None,
              recipient: str | None, due_from: datetime | None,
              due_to: datetime | None) -> str | None:
    """Why a row no longer matches a bulk action's filters, or None when it does."""
    if state is not None and r["state"] != state:
        return f"it is {r['state']} now, not {state}"
    for name, wanted in (("kind", kind), ("channel", channel), ("recipient", recipient)):
        if wanted is not None and r[name] != wanted:
            return f"its {name} is {r[name]}, not {wanted}"
    if due_from is not None and r["due_at"] < due_from:
        return f"it is due {iso(r['due_at'])} now, before {iso(due_from)}"
    if due_to is not None and r["due_at"] >= due_to:
        return f"it is due {iso(r['due_at'])} now, not before {iso(due_to)}"
    return None


_BULK_WHERE = {"cli": "bulk", "console": "bulk in the console",
               "ops": "bulk through the operations function"}


def _filters_text(filters: dict[str, Any]) -> str:
    """A filtered set of deliveries, named by its filters: ``state=dead tenant=acme``."""
    return " ".join(f"{k}={v}" for k, v in filters.items() if v is not None and k != "limit")


def set_tenant_paused(conn: db.Connection, *, tenant: str, paused: bool, now: datetime,
                      actor: str, via: str = "cli", reason: str | None = None,
                      create: bool = False) -> dict[str, Any]:
    """Pause or resume a tenant (its deliveries wait while paused). A tenant that has never
    scheduled anything is refused unless ``create``. A change is recorded in
    ``operator_actions`` with who and the reason (optional here; the console requires one)."""
    from reminders import schedules
    from reminders.reasons import checked_reason

    schedules.validate_tenant(tenant)
    reason = checked_reason(reason, required=False)
    with db.transaction(conn):
        row = db.fetch_one(conn, "tenant_get", {"tenant": tenant})
        if row is None and not create:
            raise NotFound(f"no tenant {tenant!r} (it has never scheduled anything); "
                           "pass --create to pause it before it does")
        changed = row is None or bool(row["paused"]) != paused
        schedules.set_tenant_paused(conn, tenant=tenant, paused=paused)
        if changed:
            record_action(conn, action="paused" if paused else "resumed", obj="tenant",
                          name=tenant, tenant=tenant, reason=reason, now=now, who=actor,
                          via=via)
    return {"tenant": tenant, "paused": paused, "changed": changed}


LATENESS_BOUNDS = (0.0, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 900.0, 1800.0, 3600.0,
                   7200.0, 21600.0, 86400.0)


def lateness(conn: db.Connection, *, now: datetime, window_seconds: int,
             tenant: str | None = None) -> dict[str, Any]:
    """Sends of the last ``window_seconds``: how late each was (occurrence due -> sent) in
    buckets (``LATENESS_BOUNDS``, upper bounds exclusive; the first bucket holds early sends,
    the last everything a day late or more) and p50/p95/p99 in seconds."""
    from datetime import timedelta

    rows = db.fetch_all(conn, "lateness_histogram", {
        "now": now, "since": now - timedelta(seconds=window_seconds), "tenant": tenant,
        "bounds": list(LATENESS_BOUNDS)})
    counts = [0] * (len(LATENESS_BOUNDS) + 1)
    total, pcts = 0, None
    for r in rows:
        if r["bucket"] is None:
            total, pcts = int(r["n"]), r["pcts"]
        else:
            counts[int(r["bucket"])] = int(r["n"])
    names = ["early", *(f"<{_short(b)}" for b in LATENESS_BOUNDS[1:]),
             f">={_short(LATENESS_BOUNDS[-1])}"]
    p50, p95, p99 = (round(float(x), 3) for x in pcts) if pcts else (None, None, None)
    return {"window_seconds": window_seconds, "sent": total,
            "buckets": [{"name": name, "n": n} for name, n in zip(names, counts, strict=True)],
            "p50_seconds": p50, "p95_seconds": p95, "p99_seconds": p99}


def _short(seconds: float) -> str:
    from reminders.cli_format import duration

    return duration(seconds)


def recent_actions(conn: db.Connection, *, limit: int = 20) -> list[dict[str, Any]]:
    return [{**r, "at": iso(r["at"])}
            for r in db.fetch_all(conn, "operator_actions_recent", {"limit": limit})]
