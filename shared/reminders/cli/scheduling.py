"""The application API from a shell: ``schedule``, ``reschedule``, ``cancel``, ``opt-out``,
``opt-in``, ``opt-outs list``, ``preview``."""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from reminders import cli_windows
from reminders.cli.common import (
    _TENANT_HELP,
    _conn,
    _count,
    _instant,
    _json_flag,
    _now,
    _Parser,
    _plain_text,
    _reason_flag,
    emit,
    print_text,
)
from reminders.cli.recovery import _operator
from reminders.errors import InvalidInput
from reminders.payloads import MAX_DEPTH

_FLAG_FOR_FIELD = {"rrule:": "--rrule:", "tz:": "--tz:", "local_start:": "--start:",
                   "gap:": "--gap:", "overlap:": "--overlap:", "count:": "--count:"}


def _as_flags(exc: InvalidInput) -> InvalidInput:
    """The API names its parameters; the command line names the flags the user typed."""
    text = str(exc)
    for field, flag in _FLAG_FOR_FIELD.items():
        if text.startswith(field):
            return InvalidInput(flag + text[len(field):])
    return exc


def _parse_recurrence(rrule: str, tz: str, start: str, gap: str, overlap: str) -> Any:
    from reminders.recurrence import Recurrence

    try:
        return Recurrence.parse(rrule, tz, start, gap=gap, overlap=overlap)
    except InvalidInput as exc:
        raise _as_flags(exc) from None


def _recurrence(args: argparse.Namespace) -> Any:
    if not (args.rrule or args.tz or args.start):
        if args.gap or args.overlap:
            raise InvalidInput("--gap and --overlap apply to --rrule schedules only")
        return None
    missing = [flag for flag, value in (("--rrule", args.rrule), ("--tz", args.tz),
                                        ("--start", args.start)) if not value]
    if missing:
        raise InvalidInput(f"a recurring schedule needs --rrule, --tz and --start; "
                           f"missing {', '.join(missing)}")
    return _parse_recurrence(args.rrule, args.tz, args.start, args.gap or "shift",
                             args.overlap or "first")


def _recipients(args: argparse.Namespace) -> list[str]:
    from reminders.schedules import validate_recipient_text

    people: list[tuple[str, str]] = []  # (flag, recipient)
    if args.recipient is not None:
        if not args.recipient.strip():
            raise InvalidInput("--recipient: empty; give a recipient such as alice or "
                               "alice@example.com")
        people.append(("--recipient", args.recipient.strip()))
    if args.recipients is not None:
        given = [r.strip() for r in args.recipients.split(",") if r.strip()]
        if not given:
            raise InvalidInput("--recipients: empty; give comma-separated recipients")
        people += [("--recipients", r) for r in given]
    if args.recipients_file:
        path = Path(args.recipients_file)
        if path.is_dir():
            raise InvalidInput(f"--recipients-file: {str(path)!r} is a directory, not a file")
        if not path.exists():
            raise InvalidInput(f"--recipients-file: no such file {str(path)!r}")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"--recipients-file: cannot read {str(path)!r}: {exc}") from None
        for number, line in enumerate(text.splitlines(), start=1):
            item = line.strip()
            if item and not item.startswith("#"):
                people.append((f"--recipients-file line {number}", item))
        if not any(flag.startswith("--recipients-file") for flag, _ in people):
            raise InvalidInput(f"--recipients-file: no recipients in {args.recipients_file!r}")
    if not people:
        raise InvalidInput("give --recipient, --recipients or --recipients-file")
    for flag, person in people:
        try:
            validate_recipient_text(person)
        except InvalidInput as exc:
            raise InvalidInput(f"{flag}: {exc}") from None
    return [person for _, person in people]


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _payload(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        raise InvalidInput(f"--payload is not JSON: {exc}") from None
    except RecursionError:  # the decoder recurses once per level
        raise InvalidInput(f"--payload: nested too deeply (objects and arrays at most "
                           f"{MAX_DEPTH} levels)") from None
    if not isinstance(value, dict):
        raise InvalidInput("--payload must be a JSON object")
    from reminders.schedules import validate_payload

    try:
        validate_payload(value)
    except InvalidInput as exc:
        raise InvalidInput(f"--payload: {exc}") from None
    return value


def _schedule_text(data: dict[str, Any], verb: str) -> str:
    from reminders.cli_format import table

    head = f"schedule {data['schedule_key']} (tenant {data['tenant']}): {verb}"
    deliveries = data["deliveries"]
    if not deliveries:
        return head + "; no delivery pending"
    if isinstance(deliveries, str):
        return f"{head}; {deliveries}"
    return head + "\n" + table(["recipient", "due", "state", "delivery key"], [
        (d["recipient"], d["due_at"], d["state"], d["delivery_key"]) for d in deliveries])


def cmd_schedule(args: argparse.Namespace) -> int:
    from reminders import schedules

    recurrence = _recurrence(args)
    if args.at and recurrence is not None:
        raise InvalidInput("give either --at or --rrule/--tz/--start, not both")
    if not args.at and recurrence is None:
        raise InvalidInput("give --at ISO-8601 (with offset) or --rrule, --tz and --start")
    if args.channel == "webhook" and not args.to:
        raise InvalidInput("--channel webhook needs --to URL (a registered endpoint)")
    at = _instant(args.at, "--at") if args.at else None
    people = _recipients(args)
    payload = _payload(args.payload)
    _plain_text(args.tenant, "--tenant")
    if args.key is not None:
        _plain_text(args.key, "--key")
    now = _now()
    if recurrence is not None:
        from reminders.recurrence import first_due

        if first_due(recurrence, now) is None:
            raise InvalidInput("--rrule: no occurrence at or after now "
                               f"({now.isoformat()}); nothing would ever be delivered")
    with _conn() as conn:
        result = schedules.schedule(
            conn, tenant=args.tenant, recipients=people, channel=args.channel,
            to=args.to, at=at, recurrence=recurrence, kind=args.kind,
            payload=payload, revision=args.revision, key=args.key, now=now)
    data = result.as_json()
    if args.json:
        emit(args, data)
        return 0
    if len(result.deliveries) > 20:
        data["deliveries"] = f"{len(result.deliveries)} deliveries"
    print_text(_schedule_text(data, "created" if result.created
                              else "already existed, unchanged"))
    return 0


def _resolve_tenant(conn: Any, key: str, tenant: str | None) -> str:
    from reminders.operator_commands import resolve_tenant

    return resolve_tenant(conn, key, tenant)


def _schedule_key(conn: Any, key: str, tenant: str) -> str:
    from reminders.operator_commands import schedule_key

    return schedule_key(conn, key, tenant)


def _unchanged(current: Any, at: Any, revision: str | None, recurrence: Any) -> bool:
    """Would this reschedule ask for what the schedule already is? Then it changes nothing."""
    if current["state"] == "cancelled":
        return False  # the API refuses it, with its own message
    if at is not None and current["at"] != at:
        return False
    if revision is not None and current["revision"] != revision:
        return False
    if recurrence is None:
        return True
    stored = (current["rrule"], current["tz"], current["local_start"], current["gap_policy"],
              current["overlap_policy"])
    return stored == (recurrence.rrule, recurrence.tz, recurrence.local_start, recurrence.gap,
                      recurrence.overlap)


def cmd_reschedule(args: argparse.Namespace) -> int:
    from reminders import db, schedules

    at = _instant(args.at, "--at") if args.at else None
    recurrence = _recurrence(args)
    if at is None and args.revision is None and recurrence is None:
        raise InvalidInput("reschedule needs --at, --revision, or --rrule/--tz/--start")
    if args.revision is not None:
        _plain_text(args.revision, "--revision")
    with _conn() as conn:
        tenant = _resolve_tenant(conn, args.key, args.tenant)
        key = _schedule_key(conn, args.key, tenant)
        current = db.fetch_one(conn, "schedule_get", {"tenant": tenant, "schedule_key": key})
        if current is not None and _unchanged(current, at, args.revision, recurrence):
            rows = db.fetch_all(conn, "deliveries_of_schedule_generation", {
                "schedule_id": current["id"], "tenant": tenant,
                "generation": current["generation"]})
            result = schedules.ScheduleResult(
                tenant, key, int(current["id"]), False,
                [schedules.DeliveryRef(r["recipient"], r["delivery_key"], r["due_at"],
                                       r["state"]) for r in rows])
            changed = False
        else:
            try:
                result = schedules.reschedule(conn, tenant=tenant, key=key, at=at,
                                              revision=args.revision, recurrence=recurrence,
                                              now=_now())
            except InvalidInput as exc:
                raise _as_flags(exc) from None
            changed = True
    data = {**result.as_json(), "changed": changed}
    emit(args, data, _schedule_text(data, "rescheduled" if changed
                                    else "unchanged (it already says that)"))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    return _operator(args, "cancel")


def cmd_opt(args: argparse.Namespace) -> int:
    from reminders import settings_commands

    with _conn() as conn:
        data = settings_commands.set_opt_out(
            conn, tenant=args.tenant, recipient=args.recipient, channel=args.channel,
            opted_out=args.command == "opt-out", now=_now(), who=None, via="cli",
            reason=args.reason)
    verb = "opted out of" if args.command == "opt-out" else "opted in to"
    emit(args, data, f"{args.recipient} {verb} {args.channel}"
         + ("" if data["changed"] else " (already)"))
    return 0


def cmd_opt_outs_list(args: argparse.Namespace) -> int:
    from reminders import operator
    from reminders.cli_format import table

    with _conn() as conn:
        rows = operator.opt_outs(conn, tenant=args.tenant, channel=args.channel,
                                 recipient=args.recipient, limit=args.limit)
    emit(args, rows, table(["tenant", "recipient", "channel", "since"], [
        (r["tenant"], r["recipient"], r["channel"], r["created_at"]) for r in rows])
         if rows else "no opt-outs")
    return 0


def cmd_preview(args: argparse.Namespace) -> int:
    from reminders.recurrence import preview

    rec = _parse_recurrence(args.rrule, args.tz, args.start, args.gap, args.overlap)
    after = _instant(args.after, "--after") if args.after else None
    try:
        if after is None:
            first = rec.first()
            items = preview(rec, first.utc - timedelta(seconds=1), args.count) if first else []
        else:
            items = preview(rec, after, args.count)
    except InvalidInput as exc:
        raise _as_flags(exc) from None
    from reminders.cli_format import table

    held = cli_windows.preview_with_windows(args, items)
    emit(args, items, held or (table(["due", "local"], [(i["utc"], i["local"]) for i in items])
                               if items else "(no occurrences)"))
    return 0


def _recurrence_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rrule", help="RFC 5545 rule, e.g. FREQ=WEEKLY;BYDAY=MO;BYHOUR=9")
    p.add_argument("--tz", help="IANA time zone, e.g. Europe/Berlin")
    p.add_argument("--start", help="local start without offset, e.g. 2027-01-04T09:00")
    p.add_argument("--gap", choices=["shift", "skip"], help="DST gap policy (default shift)")
    p.add_argument("--overlap", choices=["first", "later"],
                   help="DST overlap policy (default first)")


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("schedule", help="schedule a reminder",
                       description="Schedule one reminder for one or many recipients, once "
                                   "(--at) or recurring (--rrule, --tz, --start). E.g. "
                                   "`reminders schedule --tenant acme --recipient "
                                   "alice@example.com --channel email --at "
                                   "2027-03-01T09:00:00+01:00 --key invoice-42`.")
    p.add_argument("--tenant", required=True, help="the application's tenant, e.g. acme")
    p.add_argument("--recipient", help="one recipient, e.g. alice@example.com")
    p.add_argument("--recipients", help="comma-separated, e.g. a@example.com,b@example.com")
    p.add_argument("--recipients-file", help="one recipient per line; # starts a comment")
    p.add_argument("--channel", required=True, choices=["webhook", "email", "sms"],
                   help="how it is delivered")
    p.add_argument("--to", help="webhook URL (registered with `endpoints add`), or the "
                                "address for a single recipient")
    p.add_argument("--at", help="ISO-8601 instant with offset, e.g. 2027-03-01T09:00:00Z")
    _recurrence_flags(p)
    p.add_argument("--kind", default="default", help="a kind from `kinds list` (default: "
                                                     "default)")
    p.add_argument("--key", help="idempotency key: retrying with it creates nothing new")
    p.add_argument("--revision", default="1", help="content revision (default 1)")
    p.add_argument("--payload", help='JSON object, e.g. \'{"invoice": 42}\'')
    _json_flag(p)
    p.set_defaults(func=cmd_schedule)

    p = sub.add_parser("reschedule", help="new time, rule or revision",
                       description="Move a schedule; repeating the same request changes "
                                   "nothing. E.g. `reminders reschedule invoice-42 --at "
                                   "2027-03-02T09:00:00Z`.")
    p.add_argument("key", help="schedule key or delivery key")
    p.add_argument("--tenant", help="needed only when the key exists for several tenants")
    p.add_argument("--at", help="new ISO-8601 instant with offset (one-off schedules)")
    p.add_argument("--revision", help="new content revision")
    _recurrence_flags(p)
    _json_flag(p)
    p.set_defaults(func=cmd_reschedule)

    p = sub.add_parser("cancel", help="cancel a schedule and its pending deliveries",
                       description="E.g. `reminders cancel invoice-42`; cancelling again "
                                   "changes nothing.")
    p.add_argument("key", help="schedule key or delivery key")
    p.add_argument("--tenant", help="needed only when the key exists for several tenants")
    p.add_argument("--dry-run", action="store_true",
                   help="list the pending deliveries it would suppress; change nothing")
    _reason_flag(p)
    _json_flag(p)
    p.set_defaults(func=cmd_cancel)

    for name in ("opt-out", "opt-in"):
        p = sub.add_parser(name, help=f"{name} a recipient on a channel, e.g. `{name} "
                                      "--tenant acme --recipient bob@example.com --channel "
                                      "email`")
        p.add_argument("--tenant", required=True, help="e.g. acme")
        p.add_argument("--recipient", required=True, help="as scheduled, e.g. bob@example.com")
        p.add_argument("--channel", required=True, choices=["webhook", "email", "sms"],
                       help="the channel to stop or resume")
        _reason_flag(p)
        _json_flag(p)
        p.set_defaults(func=cmd_opt)
    p = sub.add_parser("opt-outs", help="recipients who opted out")
    o_sub = p.add_subparsers(dest="action", required=True, parser_class=_Parser)
    p = o_sub.add_parser("list", help="e.g. `opt-outs list --tenant acme --channel email`")
    p.add_argument("--tenant", help=_TENANT_HELP)
    p.add_argument("--channel", choices=["webhook", "email", "sms"], help="only this channel")
    p.add_argument("--recipient", help="only this recipient")
    p.add_argument("--limit", type=_count("--limit"), default=1000,
                   help="at most this many, 1 to 10000 (default 1000)")
    _json_flag(p)
    p.set_defaults(func=cmd_opt_outs_list)
    p = sub.add_parser("preview", help="the next due instants of a rule")
    p.add_argument("--rrule", required=True, help="RFC 5545 rule, e.g. FREQ=WEEKLY;BYDAY=MO")
    p.add_argument("--tz", required=True, help="IANA time zone, e.g. Europe/Berlin")
    p.add_argument("--start", required=True, help="local start, e.g. 2027-01-04T09:00")
    p.add_argument("--gap", choices=["shift", "skip"], default="shift",
                   help="DST gap policy (default shift)")
    p.add_argument("--overlap", choices=["first", "later"], default="first",
                   help="DST overlap policy (default first)")
    p.add_argument("--count", type=int, default=10, help="0 to 1000 (default 10)")
    p.add_argument("--after", help="ISO-8601 instant; default: from the start")
    cli_windows.add_preview_flags(p)
    _json_flag(p)
    p.set_defaults(func=cmd_preview)
