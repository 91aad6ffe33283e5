"""The ``reminders`` command line: the local stack, the API, operator reads and recovery.

Every command reads its settings from the environment; when ``DATABASE_URL`` is unset and a
local stack runs (``reminders local up``), it points at that stack. ``REMINDERS_NOW`` fixes the
clock. A bad argument exits with status 2 and one line on stderr; ``work`` exits 4 when
some records failed or an invocation raised.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

from reminders.errors import InvalidInput, RemindersError

Handler = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"reminders: error: {message} (see --help)\n")
        raise SystemExit(2)


def emit(args: argparse.Namespace, data: Any, text: str | None = None) -> None:
    if getattr(args, "json", False) or text is None:
        print(json.dumps(data, indent=2, default=str))
    else:
        print(text)


_DURATION = re.compile(r"(\d+)\s*([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str, name: str) -> timedelta | None:
    """``90s``, ``15m``, ``3h``, ``2d``, ``1h30m``, ISO ``PT3H``; ``none`` for no limit."""
    raw = text.strip().lower()
    if raw in ("none", "never", "off"):
        return None
    iso = re.fullmatch(r"p(?:(\d+)d)?(?:t(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?)?", raw)
    if iso and any(iso.groups()):
        d, h, m, s = (int(g or 0) for g in iso.groups())
        seconds = ((d * 24 + h) * 60 + m) * 60 + s
    else:
        parts = _DURATION.findall(raw)
        if not parts or _DURATION.sub("", raw).strip():
            raise InvalidInput(f"{name}: not a duration: {text!r} (try 90s, 15m, 3h, 2d or PT3H)")
        seconds = sum(int(n) * _UNITS[u] for n, u in parts)
    if seconds > 3650 * 86400:
        raise InvalidInput(f"{name}: duration out of range (at most 3650 days): {text!r}")
    return timedelta(seconds=seconds)


# ---------------------------------------------------------------- environment


def environment() -> dict[str, str]:
    env = dict(os.environ)
    if not env.get("DATABASE_URL") and not env.get("REMINDERS_DB_HOST"):
        from reminders.local import stack

        running = stack.load()
        if running is not None:
            env = {**running.env(), **env}
    return env


def _settings() -> Any:
    from reminders import config

    return config.load(environment())


def _now() -> Any:
    from reminders.clock import clock_from_env

    return clock_from_env(environment()).now()


def _conn() -> Any:
    from reminders import db

    settings = _settings()
    return db.connect(settings.database_url, prepare=settings.db_prepare)


def _aws_environment() -> dict[str, str]:
    env = environment()
    for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                "AWS_DEFAULT_REGION", "AWS_REGION"):
        if key in env:  # boto3 reads these from the process environment
            os.environ.setdefault(key, env[key])
    return env


def _runtime() -> Any:
    from reminders import runtime

    return runtime.from_env(_aws_environment())


# ---------------------------------------------------------------- commands


def cmd_migrate(args: argparse.Namespace) -> int:
    from reminders.db import migrate

    with _conn() as conn:
        applied = migrate.apply(conn)
    emit(args, {"applied": applied}, f"applied migrations: {applied or 'none (up to date)'}")
    return 0


def cmd_local_up(args: argparse.Namespace) -> int:
    from reminders.local import stack

    running, restarted = stack.start()
    emit(args, {**running.as_json(), "restarted": list(restarted)}, "\n".join(
        [*restarted.values(), "local stack running:"]) + "\n" + "\n".join(
        f"  {k}={v}" for k, v in running.env().items() if not k.startswith("AWS_") or
        k == "AWS_ENDPOINT_URL") + f"\n  webhook receiver: {running.receiver_url}")
    return 0


def cmd_local_down(args: argparse.Namespace) -> int:
    from reminders.local import stack

    found = stack.stop()  # None: no stack was recorded; else what had already ended
    emit(args, {"stopped": found is not None, "not_running": list(found or {})},
         "nothing was running" if found is None else
         "\n".join([*found.values(), "local stack stopped"]))
    return 0


def cmd_tick(args: argparse.Namespace) -> int:
    from reminders.local import pipeline

    rt = _runtime()
    summary = pipeline.tick(rt)
    emit(args, summary, f"leased {summary['leased']}, published {summary['published']}, "
                        f"released {summary['released']}, reclaimed {summary['reclaimed']}")
    return 0


EXIT_PARTIAL_FAILURE = 4  # `work`: some records failed or an invocation raised
WORK_EXIT_STATUSES = (
    "exit status: 0 the queues emptied and no record failed; 1 the queues did not empty within "
    "the bounds; 4 some records failed or an invocation raised (a partial failure: the counts "
    "and the first error go to stderr, and the failed records are retried, dead-lettered or "
    "parked as in Lambda); 2 a bad argument.")


def cmd_work(args: argparse.Namespace) -> int:
    from reminders.local import pipeline

    rt = _runtime()
    summary = pipeline.work(rt, max_seconds=args.max_seconds)
    emit(args, summary, f"consumer: {_work_counts(summary['consumer'])}; "
                        f"redrive: {_work_counts(summary['redrive'])}; idle: {summary['idle']}")
    not_idle = f"the queues did not empty within {args.max_seconds:g}s"
    if summary["failed_records"] or summary["invocation_errors"]:
        tail = "" if summary["idle"] else f"; {not_idle}"
        sys.stderr.write(f"reminders: work: partial failure: {_work_failures(summary)}{tail}\n")
        return EXIT_PARTIAL_FAILURE
    if not summary["idle"]:
        sys.stderr.write(f"reminders: work: {not_idle}\n")
        return 1
    return 0


def _work_counts(counts: dict[str, Any]) -> str:
    return (f"{counts['batches']} batches, {counts['records']} records, "
            f"{counts['failures']} failed, {counts['errors']} invocations raised")


def _work_failures(summary: dict[str, Any]) -> str:
    """One line: per function what failed, then the first invocation error, if one raised."""
    parts = [f"{name} {summary[name]['failures']} of {summary[name]['records']} records "
             f"failed, {summary[name]['errors']} invocations raised"
             for name in ("consumer", "redrive")]
    first = next((f"{name}: {summary[name]['first_error']}" for name in ("consumer", "redrive")
                  if summary[name]["first_error"]), None)
    why = f"first error: {first}" if first else "the handlers' log lines above say why"
    return "; ".join([*parts, why])


def cmd_endpoints_add(args: argparse.Namespace) -> int:
    from reminders import db
    from reminders.channels.signing import validate_secret

    validate_secret(args.secret)
    if not re.match(r"^https?://[^\s/]+", args.url):
        raise InvalidInput(f"endpoint URL must be http(s)://..., got {args.url!r}")
    with _conn() as conn, db.transaction(conn):
        if args.tenant:
            db.execute(conn, "tenant_ensure", {"tenant": args.tenant})
        row = db.fetch_one(conn, "endpoint_add", {"tenant": args.tenant, "url": args.url,
                                                  "secret": args.secret})
    emit(args, row, f"endpoint registered: {args.url}")
    return 0


def _kind_json(row: dict[str, Any]) -> dict[str, Any]:
    return {"name": row["name"],
            "stale_after_seconds": row["stale_after"].total_seconds()
            if row["stale_after"] is not None else None,
            "max_attempts": row["max_attempts"], "redrive_budget": row["redrive_budget"],
            "backoff_base_seconds": row["backoff_base"].total_seconds(),
            "backoff_cap_seconds": row["backoff_cap"].total_seconds(),
            "retention_seconds": row["retention"].total_seconds()}


def cmd_kinds_set(args: argparse.Namespace) -> int:
    from reminders import schedules

    stale = (schedules.KEEP if args.stale_after is None
             else parse_duration(args.stale_after, "--stale-after"))
    base = parse_duration(args.backoff_base, "--backoff-base") if args.backoff_base else None
    cap = parse_duration(args.backoff_cap, "--backoff-cap") if args.backoff_cap else None
    keep = parse_duration(args.retention, "--retention") if args.retention else None
    with _conn() as conn:
        row = schedules.set_kind(conn, name=args.name, now=_now(), stale_after=stale,
                                 max_attempts=args.max_attempts,
                                 redrive_budget=args.redrive_budget, backoff_base=base,
                                 backoff_cap=cap, retention=keep)
    data = _kind_json(row)
    emit(args, data, f"kind {row['name']}: " + ", ".join(
        f"{k.replace('_', ' ')} {v}" for k, v in data.items() if k != "name"))
    return 0


def cmd_kinds_list(args: argparse.Namespace) -> int:
    from reminders import db

    with _conn() as conn:
        rows = [_kind_json(r) for r in db.fetch_all(conn, "kinds_list")]
    emit(args, rows, "\n".join(f"{r['name']}: {r}" for r in rows))
    return 0


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
    people: list[str] = []
    if args.recipient:
        people.append(args.recipient)
    if args.recipients:
        people += [r.strip() for r in args.recipients.split(",") if r.strip()]
    if args.recipients_file:
        path = Path(args.recipients_file)
        if not path.is_file():
            raise InvalidInput(f"--recipients-file: no such file {str(path)!r}")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"--recipients-file: cannot read {str(path)!r}: {exc}") from None
        lines = (line.strip() for line in text.splitlines())
        people += [line for line in lines if line and not line.startswith("#")]
    if not people:
        if args.recipients_file:
            raise InvalidInput(f"--recipients-file: no recipients in {args.recipients_file!r}")
        raise InvalidInput("give --recipient, --recipients or --recipients-file")
    return people


def _payload(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidInput(f"--payload is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidInput("--payload must be a JSON object")
    return value


def cmd_schedule(args: argparse.Namespace) -> int:
    from reminders import schedules
    from reminders.clock import parse_instant

    recurrence = _recurrence(args)
    if args.at and recurrence is not None:
        raise InvalidInput("give either --at or --rrule/--tz/--start, not both")
    if not args.at and recurrence is None:
        raise InvalidInput("give --at ISO-8601 (with offset) or --rrule, --tz and --start")
    at = parse_instant(args.at, "--at") if args.at else None
    with _conn() as conn:
        result = schedules.schedule(
            conn, tenant=args.tenant, recipients=_recipients(args), channel=args.channel,
            to=args.to, at=at, recurrence=recurrence, kind=args.kind,
            payload=_payload(args.payload), revision=args.revision, key=args.key, now=_now())
    data = result.as_json()
    if len(result.deliveries) > 20 and not args.json:
        data["deliveries"] = f"{len(result.deliveries)} deliveries"
    print(json.dumps(data, indent=2, default=str))
    return 0


def _resolve_tenant(conn: Any, key: str, tenant: str | None) -> str:
    if tenant:
        return tenant
    from reminders import db

    rows = db.fetch_all(conn, "schedule_tenants_for_key", {"key": key})
    tenants = sorted({r["tenant"] for r in rows})
    if not tenants:
        raise InvalidInput(f"no schedule or delivery with key {key!r}")
    if len(tenants) > 1:
        raise InvalidInput(f"key {key!r} exists for tenants {', '.join(tenants)}; pass --tenant")
    return str(tenants[0])


def _schedule_key(conn: Any, key: str, tenant: str) -> str:
    from reminders import db

    row = db.fetch_one(conn, "delivery_by_key", {"key": key, "tenant": tenant})
    return str(row["schedule_key"]) if row else key


def cmd_reschedule(args: argparse.Namespace) -> int:
    from reminders import schedules
    from reminders.clock import parse_instant

    at = parse_instant(args.at, "--at") if args.at else None
    with _conn() as conn:
        tenant = _resolve_tenant(conn, args.key, args.tenant)
        key = _schedule_key(conn, args.key, tenant)
        result = schedules.reschedule(conn, tenant=tenant, key=key, at=at, revision=args.revision,
                                      recurrence=_recurrence(args), now=_now())
    print(json.dumps(result.as_json(), indent=2, default=str))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from reminders import schedules

    with _conn() as conn:
        tenant = _resolve_tenant(conn, args.key, args.tenant)
        key = _schedule_key(conn, args.key, tenant)
        n = schedules.cancel(conn, tenant=tenant, key=key, now=_now())
    emit(args, {"tenant": tenant, "schedule_key": key, "suppressed": n},
         f"cancelled {key}: {n} pending deliveries suppressed")
    return 0


def cmd_opt(args: argparse.Namespace) -> int:
    from reminders import schedules

    with _conn() as conn:
        if args.command == "opt-out":
            schedules.opt_out(conn, tenant=args.tenant, recipient=args.recipient,
                              channel=args.channel, now=_now())
            changed = True
        else:
            changed = schedules.opt_in(conn, tenant=args.tenant, recipient=args.recipient,
                                       channel=args.channel)
    emit(args, {"tenant": args.tenant, "recipient": args.recipient, "channel": args.channel,
                "opted_out": args.command == "opt-out", "changed": changed},
         f"{args.recipient} {'opted out of' if args.command == 'opt-out' else 'opted in to'} "
         f"{args.channel}")
    return 0


def cmd_tenants(args: argparse.Namespace) -> int:
    from reminders import schedules

    paused = args.action == "pause"
    with _conn() as conn:
        schedules.set_tenant_paused(conn, tenant=args.tenant, paused=paused)
    emit(args, {"tenant": args.tenant, "paused": paused},
         f"tenant {args.tenant} {'paused' if paused else 'resumed'}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from reminders import operator

    with _conn() as conn:
        data = operator.status(conn, now=_now(), tenant=args.tenant)
    settings = _settings()
    if settings.queues is not None:  # the transport's view beside the authority's
        from reminders import aws
        from reminders.queue import Queue

        _aws_environment()
        sqs = aws.client("sqs")
        data["queues"] = {name: Queue(sqs, url).counts() for name, url in (
            ("deliveries", settings.queues.deliveries), ("dlq", settings.queues.dlq),
            ("parking", settings.queues.parking))}
    emit(args, data, operator.status_text(data))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from reminders import operator

    with _conn() as conn:
        tenant = _resolve_tenant(conn, args.key, args.tenant)
        data = operator.show(conn, key=args.key, tenant=tenant)
    emit(args, data, operator.show_text(data))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from reminders import operator

    with _conn() as conn:
        rows = operator.in_state(conn, state=args.state, tenant=args.tenant, limit=args.limit)
    emit(args, rows, "\n".join(f"{r['delivery_key']}  {r['state']}  {r['reason'] or ''}"
                                for r in rows) or f"no {args.state} deliveries")
    return 0


def cmd_reconcile(args: argparse.Namespace) -> int:
    from reminders import operator

    with _conn() as conn:
        tenant = _resolve_tenant(conn, args.key, args.tenant)
        data = operator.reconcile(conn, key=args.key, tenant=tenant, target=args.as_,
                                  reason=args.reason, now=_now())
    emit(args, data, f"{data['delivery_key']}: {data['state']} ({data['reason']})")
    return 0


def cmd_preview(args: argparse.Namespace) -> int:
    from reminders.clock import parse_instant
    from reminders.recurrence import preview

    rec = _parse_recurrence(args.rrule, args.tz, args.start, args.gap, args.overlap)
    after = parse_instant(args.after, "--after") if args.after else None
    try:
        if after is None:
            first = rec.first()
            items = preview(rec, first.utc - timedelta(seconds=1), args.count) if first else []
        else:
            items = preview(rec, after, args.count)
    except InvalidInput as exc:
        raise _as_flags(exc) from None
    emit(args, items, "\n".join(f"{i['utc']}  {i['local']}" for i in items) or "(no occurrences)")
    return 0


def cmd_version(args: argparse.Namespace) -> int:
    from reminders import __version__
    from reminders.timezones import tzdata_version

    data = {"reminders": __version__, "tzdata": tzdata_version(),
            "python": sys.version.split()[0]}
    emit(args, data, " ".join(f"{k} {v}" for k, v in data.items()))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from reminders.local import demo

    return demo.main(json_output=args.json)


DRILLS = ("consumer-kill", "scanner-kill", "terminate-backends", "postgres-restart",
          "racing-scanners", "consumer-outage", "duplicate-message", "garbage")
_DRILL_EPILOG = """drills:
  consumer-kill       kill -9 of `reminders work` while it waits on a send
  scanner-kill        kill -9 of `reminders tick` once its leases are committed
  terminate-backends  pg_terminate_backend of the service's sessions mid-work
  postgres-restart    Postgres stopped and started again mid-work
  racing-scanners     four scanners start every tick together
  consumer-outage     no consumer for an hour of simulated time, the scanner ticking on
  duplicate-message   copies of lease messages, one taken while its send is in flight, and
                      messages of old leases on the deliveries queue and the dead-letter queue
  garbage             garbage bodies on the deliveries queue and the dead-letter queue

The drills run on a Postgres and a moto server of their own (started in a temporary directory
and removed afterwards; a running `reminders local up` stack is left alone), each drill on its
own database and queues, on a simulated clock.

exit status: 0 when no drill found a violation, 1 when one did, 2 on a bad argument."""


def cmd_drill(args: argparse.Namespace) -> int:
    from reminders.local import drills

    names = list(DRILLS) if args.name == "all" else [args.name]

    def show(result: drills.DrillResult) -> None:
        if not args.json:
            print(drills.text(result) + "\n", flush=True)

    results = drills.run_drills(names, short=args.short, on_result=show)
    found = sum(len(r.violations) for r in results)
    emit(args, {"short": args.short, "violations": found,
                "drills": [r.as_json() for r in results]},
         f"{len(results)} drill(s), {found} violation(s)")
    return 0 if found == 0 else 1


# ---------------------------------------------------------------- parser


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON")


def _recurrence_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rrule", help="RFC 5545 rule, e.g. FREQ=WEEKLY;BYDAY=MO;BYHOUR=9")
    p.add_argument("--tz", help="IANA time zone, e.g. Europe/Berlin")
    p.add_argument("--start", help="local start without offset, e.g. 2027-01-04T09:00")
    p.add_argument("--gap", choices=["shift", "skip"], help="DST gap policy (default shift)")
    p.add_argument("--overlap", choices=["first", "later"],
                   help="DST overlap policy (default first)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="reminders", description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("migrate", help="apply database migrations")
    _json_flag(p)
    p.set_defaults(func=cmd_migrate)

    local = sub.add_parser("local", help="the one-machine stack")
    local_sub = local.add_subparsers(dest="action", required=True, parser_class=_Parser)
    p = local_sub.add_parser("up", help="start Postgres, moto and the webhook receiver")
    _json_flag(p)
    p.set_defaults(func=cmd_local_up)
    p = local_sub.add_parser("down", help="stop them")
    _json_flag(p)
    p.set_defaults(func=cmd_local_down)

    p = sub.add_parser("tick", help="one scanner pass")
    _json_flag(p)
    p.set_defaults(func=cmd_tick)
    p = sub.add_parser("work", help="run the consumer and redrive loops until the queues idle",
                       description="Feed the queues to the consumer and redrive handlers, as "
                                   "Lambda's event source mappings do, until the queues are "
                                   "empty or --max-seconds has passed.",
                       epilog=WORK_EXIT_STATUSES)
    _json_flag(p)
    p.add_argument("--max-seconds", type=float, default=60.0,
                   help="wall-time bound (default: 60)")
    p.set_defaults(func=cmd_work)

    endpoints = sub.add_parser("endpoints", help="webhook endpoints")
    ep_sub = endpoints.add_subparsers(dest="action", required=True, parser_class=_Parser)
    p = ep_sub.add_parser("add", help="register an endpoint and its signing secret")
    p.add_argument("url")
    p.add_argument("--secret", required=True, help="whsec_... (Standard Webhooks)")
    p.add_argument("--tenant", help="only this tenant may use it (default: any)")
    _json_flag(p)
    p.set_defaults(func=cmd_endpoints_add)

    kinds = sub.add_parser("kinds", help="kinds of reminder and their policies")
    k_sub = kinds.add_subparsers(dest="action", required=True, parser_class=_Parser)
    p = k_sub.add_parser("set", help="create or change a kind")
    p.add_argument("name")
    p.add_argument("--stale-after", help="e.g. 3h; 'none' for never")
    p.add_argument("--max-attempts", type=int)
    p.add_argument("--redrive-budget", type=int)
    p.add_argument("--backoff-base")
    p.add_argument("--backoff-cap")
    p.add_argument("--retention", help="how long finished deliveries are kept, e.g. 30d")
    _json_flag(p)
    p.set_defaults(func=cmd_kinds_set)
    p = k_sub.add_parser("list")
    _json_flag(p)
    p.set_defaults(func=cmd_kinds_list)

    p = sub.add_parser("schedule", help="schedule a reminder")
    p.add_argument("--tenant", required=True)
    p.add_argument("--recipient")
    p.add_argument("--recipients", help="comma-separated")
    p.add_argument("--recipients-file", help="one recipient per line")
    p.add_argument("--channel", required=True, choices=["webhook", "email", "sms"])
    p.add_argument("--to", help="webhook URL, or the address for a single recipient")
    p.add_argument("--at", help="ISO-8601 instant with offset")
    _recurrence_flags(p)
    p.add_argument("--kind", default="default")
    p.add_argument("--key", help="idempotency key: retrying with it creates nothing new")
    p.add_argument("--revision", default="1")
    p.add_argument("--payload", help="JSON object")
    _json_flag(p)
    p.set_defaults(func=cmd_schedule)

    p = sub.add_parser("reschedule", help="new time, rule or revision")
    p.add_argument("key", help="schedule key or delivery key")
    p.add_argument("--tenant")
    p.add_argument("--at")
    p.add_argument("--revision")
    _recurrence_flags(p)
    _json_flag(p)
    p.set_defaults(func=cmd_reschedule)

    p = sub.add_parser("cancel", help="cancel a schedule")
    p.add_argument("key", help="schedule key or delivery key")
    p.add_argument("--tenant")
    _json_flag(p)
    p.set_defaults(func=cmd_cancel)

    for name in ("opt-out", "opt-in"):
        p = sub.add_parser(name, help=f"{name} a recipient on a channel")
        p.add_argument("--tenant", required=True)
        p.add_argument("--recipient", required=True)
        p.add_argument("--channel", required=True, choices=["webhook", "email", "sms"])
        _json_flag(p)
        p.set_defaults(func=cmd_opt)

    tenants = sub.add_parser("tenants", help="pause or resume a tenant")
    t_sub = tenants.add_subparsers(dest="action", required=True, parser_class=_Parser)
    for action in ("pause", "resume"):
        p = t_sub.add_parser(action)
        p.add_argument("tenant")
        _json_flag(p)
        p.set_defaults(func=cmd_tenants)

    p = sub.add_parser("status", help="counts by state and channel, oldest overdue, leases")
    p.add_argument("--tenant")
    _json_flag(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("show", help="a delivery (or a schedule's deliveries) with attempts")
    p.add_argument("key", help="delivery key or schedule key")
    p.add_argument("--tenant")
    _json_flag(p)
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("list", help="deliveries in one state (e.g. the parked: unknown, dead)")
    p.add_argument("--state", required=True)
    p.add_argument("--tenant")
    p.add_argument("--limit", type=int, default=100)
    _json_flag(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("reconcile", help="settle a parked delivery after checking the receiver")
    p.add_argument("key", help="delivery key")
    p.add_argument("--tenant")
    p.add_argument("--as", dest="as_", required=True, choices=["sent", "failed", "dead", "retry"])
    p.add_argument("--reason", required=True, help="what you checked")
    _json_flag(p)
    p.set_defaults(func=cmd_reconcile)

    p = sub.add_parser("preview", help="the next due instants of a rule")
    p.add_argument("--rrule", required=True)
    p.add_argument("--tz", required=True)
    p.add_argument("--start", required=True)
    p.add_argument("--gap", choices=["shift", "skip"], default="shift")
    p.add_argument("--overlap", choices=["first", "later"], default="first")
    p.add_argument("--count", type=int, default=10)
    p.add_argument("--after", help="ISO-8601 instant; default: from the start")
    _json_flag(p)
    p.set_defaults(func=cmd_preview)

    p = sub.add_parser("version", help="versions, including the time-zone data")
    _json_flag(p)
    p.set_defaults(func=cmd_version)

    p = sub.add_parser("demo", help="the whole pipeline on one machine, on a simulated clock")
    _json_flag(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("drill", help="inject a fault into the pipeline on one machine and count "
                                     "the invariants broken (exit 1 if any)",
                       description="Run a fault drill: schedule a batch, inject the fault, run "
                                   "the clock on until everything due has an outcome, and "
                                   "report what was done, the time to recover and every "
                                   "violation of the invariants found (the goal is none).",
                       epilog=_DRILL_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", choices=[*DRILLS, "all"], metavar="NAME|all",
                   help="a drill (listed below), or all of them")
    p.add_argument("--short", action="store_true",
                   help="smaller batches, as CI runs them")
    _json_flag(p)
    p.set_defaults(func=cmd_drill)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", os.environ["LOG_LEVEL"])
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except RemindersError as exc:
        sys.stderr.write(f"reminders: error: {exc}\n")
        return 2
    except Exception as exc:
        if type(exc).__module__.startswith("botocore"):  # an AWS call failed: say which, once
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            sys.stderr.write(f"reminders: error: AWS: {first}\n")
            return 1
        raise


if __name__ == "__main__":
    raise SystemExit(main())
