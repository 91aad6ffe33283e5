"""The operator commands, once: ``status``, ``show``, ``list``, ``reconcile``, ``cancel`` and
``tenants pause|resume|list``.

Each takes a connection and plain values (strings as typed on the command line) and returns an
:class:`Outcome`: the JSON data, its text form, the exit status and any lines for stderr. The
local command line (``reminders.cli``) and the operations function (``functions/ops``) call the
same functions, so a command prints and exits the same way against a local database and
against the deployed stack. Errors are raised as :mod:`reminders.errors` types; the caller
turns them into one line and an exit status (:func:`error_line`).

The work itself is :mod:`reminders.operator`'s, which the console calls too. Every write names
``who`` did it and ``via`` what (``cli`` with :func:`reminders.operator.current_user`, ``ops``
with the operations function's proven caller) and records it in Postgres with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from reminders import db
from reminders.errors import InvalidInput, NotFound
from reminders.outcome import EXIT_PARTIAL_FAILURE, Outcome, first_line
from reminders.reasons import checked_reason

# Latest year an instant may have: room for any duration (at most 3650 days) to be added.
LAST_YEAR = 9980


def instant(text: str, flag: str) -> datetime:
    """An ISO-8601 instant with an offset, in UTC, refused (not crashed on) when out of range."""
    from datetime import UTC

    from reminders.clock import parse_instant

    try:
        value = parse_instant(text, flag).astimezone(UTC)
    except OverflowError:
        raise InvalidInput(f"{flag}: out of range: {text!r}") from None
    if value.year >= LAST_YEAR:
        raise InvalidInput(f"{flag}: out of range: {text!r} "
                           f"(the latest year accepted is {LAST_YEAR - 1})")
    return value


def _optional_instant(text: str | None, flag: str) -> datetime | None:
    return instant(text, flag) if text else None


_BAD_CHARS = {"\x00": "a NUL byte", "\n": "a line break", "\r": "a line break"}


def plain_text(value: str, flag: str) -> str:
    """One line of text: refused (naming ``flag``) when it holds a NUL byte or a line break."""
    for ch, what in _BAD_CHARS.items():
        if ch in value:
            raise InvalidInput(f"{flag}: contains {what}: {value[:40]!r}")
    return value


def resolve_tenant(conn: db.Connection, key: str, tenant: str | None) -> str:
    if tenant:
        return tenant
    rows = db.fetch_all(conn, "schedule_tenants_for_key", {"key": key})
    tenants = sorted({r["tenant"] for r in rows})
    if not tenants:
        raise NotFound(f"no schedule or delivery with key {key!r}")
    if len(tenants) > 1:
        raise InvalidInput(f"key {key!r} exists for tenants {', '.join(tenants)}; pass --tenant")
    return str(tenants[0])


def schedule_key(conn: db.Connection, key: str, tenant: str) -> str:
    """A delivery key names its schedule; a schedule key names itself."""
    row = db.fetch_one(conn, "delivery_by_key", {"key": key, "tenant": tenant})
    return str(row["schedule_key"]) if row else key


# ---------------------------------------------------------------- reads


QueueCounts = Callable[[], dict[str, dict[str, int]]]


def status(conn: db.Connection, *, now: datetime, tenant: str | None = None,
           queue_counts: QueueCounts | None = None,
           alarms: Callable[[], dict[str, Any]] | None = None) -> Outcome:
    """What Postgres knows and, when ``queue_counts`` is given, the queues' counts beside it.
    Queues that do not answer are a partial failure (exit 4); Postgres' counts still print.
    ``alarms``: where the alarms in ALARM are read from (the local stack's board)."""
    from reminders import operator

    data = operator.status(conn, now=now, tenant=tenant)
    if alarms is not None:
        data["alarms"] = alarms()
    if queue_counts is not None:
        try:
            data["queues"] = queue_counts()
        except Exception as exc:  # Postgres answered; say the transport did not
            if not type(exc).__module__.startswith(("botocore", "urllib3", "reminders")):
                raise
            data["queues_error"] = f"AWS: {first_line(exc)}"
    outcome = Outcome(data, operator.status_text(data))
    if data.get("queues_error"):
        outcome.code = EXIT_PARTIAL_FAILURE
        outcome.notes.append(f"status: queues unreachable: {data['queues_error']}")
    return outcome


def show(conn: db.Connection, *, key: str, tenant: str | None,
         limit: int | None = None) -> Outcome:
    from reminders import operator
    from reminders.cli_format import SHOW_DELIVERIES

    data = operator.show(conn, key=key, tenant=resolve_tenant(conn, key, tenant),
                         limit=limit or SHOW_DELIVERIES)
    return Outcome(data, operator.show_text(data))


def list_deliveries(conn: db.Connection, *, limit: int, state: str | None = None,
                    tenant: str | None = None, kind: str | None = None,
                    channel: str | None = None, recipient: str | None = None,
                    due_from: str | None = None, due_to: str | None = None,
                    after: str | None = None, attention: bool = False,
                    sort: str = "due", schedule: str | None = None) -> Outcome:
    """A page of deliveries by due time (``attention``: parked ones only, the console's
    worklist); the next page's cursor (``--after DUE/ID``) goes in the text, or to stderr
    with ``--json``."""
    from reminders import operator
    from reminders.cli_format import remark, table

    cursor_after: tuple[datetime, int] | None = None
    if after:
        stamp, _, ident = after.rpartition("/")
        if not stamp or not ident.isdigit():
            raise InvalidInput(f"--after: expected the cursor a previous page printed "
                               f"(DUE/ID), got {after!r}")
        cursor_after = (instant(stamp, "--after"), int(ident))
    filters: dict[str, Any] = {
        "limit": limit, "state": state, "tenant": tenant, "kind": kind, "channel": channel,
        "recipient": recipient, "due_from": _optional_instant(due_from, "--due-from"),
        "due_to": _optional_instant(due_to, "--due-to"), "after": cursor_after}
    if attention:
        if sort != "due" or schedule is not None:
            raise InvalidInput("--attention lists by due time only, without --schedule")
        rows, more = operator.attention(conn, **filters)
    else:
        rows, more = operator.deliveries(conn, sort=sort, schedule=schedule, **filters)
    cursor = operator.cursor_of(rows[-1], sort) if rows and more else None
    for r in rows:
        del r["id"]
    outcome = Outcome(rows, None)
    if cursor:
        outcome.json_notes.append(f"list: more match; next page: --after {cursor}")
    if not rows:
        outcome.text = (f"no {state} deliveries" if state else
                        "no parked deliveries match" if attention else "no deliveries match")
        return outcome
    lines = [table(["due", "state", "tenant", "kind", "channel", "recipient", "tries",
                    "delivery key", "reason"],
                   [(r["due_at"], r["state"], r["tenant"], r["kind"], r["channel"],
                     r["recipient"], r["attempts_made"], r["delivery_key"], r["reason"])
                    for r in rows])]
    if cursor:
        lines.append(remark(f"more match: next page with --after {cursor}"))
    outcome.text = "\n".join(lines)
    return outcome


def tenants_list(conn: db.Connection) -> Outcome:
    from reminders import operator
    from reminders.cli_format import table

    rows = operator.tenants(conn)
    return Outcome(rows, table(["tenant", "paused", "pending", "schedules"], [
        (r["tenant"], r["paused"], r["pending"],
         f"{r['schedules']}+" if r["schedules_more"] else r["schedules"]) for r in rows])
        if rows else "no tenants")


# ---------------------------------------------------------------- writes


def reconcile(conn: db.Connection, *, now: datetime, key: str | None, tenant: str | None,
              as_: str, reason: str, who: str, via: str, state: str | None = None,
              kind: str | None = None, channel: str | None = None,
              recipient: str | None = None, due_from: str | None = None,
              due_to: str | None = None, limit: int = 100, dry_run: bool = False,
              progress: Callable[[int, int], None] | None = None) -> Outcome:
    """One delivery by KEY, or (without one) every delivery of ``state`` in a tenant or kind
    (and a channel, recipient or due range), at most ``limit``. Each delivery's operator event
    names ``who``; a bulk reconcile is also one operator action, with ``via``, and tells
    ``progress`` (done, matched) after each delivery."""
    from reminders import operator

    reason = checked_reason(reason, required=True)
    if key is None:
        return _reconcile_bulk(conn, now=now, tenant=tenant, as_=as_, reason=reason, who=who,
                               via=via, state=state, kind=kind, channel=channel,
                               recipient=recipient, due_from=due_from, due_to=due_to,
                               limit=limit, dry_run=dry_run, progress=progress)
    if dry_run or state or kind or due_from or due_to or channel or recipient:
        raise InvalidInput("--state, --kind, --due-from, --due-to and --dry-run are for "
                           "reconciling many deliveries: give them instead of a KEY")
    data = operator.reconcile(conn, key=key, tenant=resolve_tenant(conn, key, tenant),
                              target=as_, reason=reason, now=now, who=who)
    return Outcome(data, f"{data['delivery_key']}: {data['state']} ({data['reason']})")


def _reconcile_bulk(conn: db.Connection, *, now: datetime, tenant: str | None, as_: str,
                    reason: str, who: str, via: str, state: str | None, kind: str | None,
                    channel: str | None, recipient: str | None, due_from: str | None,
                    due_to: str | None, limit: int, dry_run: bool,
                    progress: Callable[[int, int], None] | None = None) -> Outcome:
    from reminders import operator
    from reminders.cli_format import table

    data = operator.reconcile_bulk(
        conn, state=state, target=as_, reason=reason, limit=limit, now=now, actor=who,
        via=via, tenant=tenant, kind=kind, channel=channel, recipient=recipient,
        due_from=_optional_instant(due_from, "--due-from"),
        due_to=_optional_instant(due_to, "--due-to"), dry_run=dry_run, progress=progress)
    done = data["would_reconcile"] if dry_run else data["reconciled"]
    failed = data["failed"]
    verb = "would reconcile" if dry_run else "reconciled"
    text = f"{verb} {len(done)} {state} deliveries as {as_}" + (
        f"; {len(failed)} refused" if failed else "") + (
        f"; more match than --limit {limit}" if data["more"] else "")
    if done:
        text += "\n" + table(["delivery key", "tenant", "state", "reason"], [
            (d["delivery_key"], d["tenant"], d["state"], d["reason"]) for d in done])
    for f in failed:
        text += f"\nrefused: {f['delivery_key']}: {f['error']}"
    outcome = Outcome(data, text)
    if failed:
        outcome.code = EXIT_PARTIAL_FAILURE
        outcome.notes.append(f"reconcile: partial failure: {len(failed)} of "
                             f"{data['matched']} refused")
    return outcome


def cancel(conn: db.Connection, *, now: datetime, key: str, tenant: str | None,
           who: str | None, via: str, reason: str | None = None,
           dry_run: bool = False) -> Outcome:
    """Cancel a schedule (by its key or one of its deliveries' keys); again changes nothing.
    The cancel and its operator action (``who``, ``via``, ``reason``) commit together.
    ``dry_run`` lists the pending deliveries it would suppress (``who`` may then be None)."""
    from reminders import operator, schedules
    from reminders.clock import iso

    reason = checked_reason(reason, required=False)
    owner = resolve_tenant(conn, key, tenant)
    key = schedule_key(conn, key, owner)
    current = db.fetch_one(conn, "schedule_get", {"tenant": owner, "schedule_key": key})
    if dry_run:
        from reminders.cli_format import DRY_RUN_LISTED

        which = {"key": key, "tenant": owner}
        pending = db.fetch_all(conn, "pending_of_schedule_first",
                               {**which, "limit": DRY_RUN_LISTED})
        counted = db.fetch_one(conn, "pending_count_of_schedule", which)
        total = int(counted["n"]) if counted else 0
        cancelled = current is not None and current["state"] == "cancelled"
        rest = total - len(pending)
        return Outcome({"tenant": owner, "schedule_key": key, "dry_run": True,
                        "would_suppress": [r["delivery_key"] for r in pending],
                        "would_suppress_count": total},
                       f"{key} is already cancelled" if cancelled else
                       f"cancelling {key} would suppress {total} pending deliveries"
                       + "".join(f"\n  {r['delivery_key']}  {r['state']}  due {iso(r['due_at'])}"
                                 for r in pending)
                       + (f"\n  (and {rest} more)" if rest > 0 else ""))
    if who is None:
        raise ValueError("cancel: who is cancelling must be named")
    if current is not None and current["state"] == "cancelled":
        n, changed = 0, False
    else:
        with db.transaction(conn):
            n, changed = schedules.cancel(conn, tenant=owner, key=key, now=now), True
            operator.record_action(conn, action="cancelled", obj="schedule", name=key,
                                   tenant=owner, reason=reason, now=now, who=who, via=via)
    return Outcome({"tenant": owner, "schedule_key": key, "suppressed": n, "changed": changed},
                   f"cancelled {key}: {n} pending deliveries suppressed" if changed
                   else f"{key} was already cancelled: nothing changed")


def tenants_set(conn: db.Connection, *, now: datetime, tenant: str, paused: bool, who: str,
                via: str, reason: str | None = None, create: bool = False) -> Outcome:
    """Pause (its deliveries wait, nothing is lost) or resume a tenant; again changes nothing.
    A tenant that never scheduled anything needs ``create``. A change is recorded with
    ``who``, ``via`` and the reason."""
    from reminders import operator

    reason = checked_reason(reason, required=False)
    data = operator.set_tenant_paused(conn, tenant=tenant, paused=paused, now=now, actor=who,
                                      via=via, reason=reason, create=create)
    return Outcome(data, f"tenant {tenant} {'paused' if paused else 'resumed'}"
                   + ("" if data["changed"] else " (already)"))
