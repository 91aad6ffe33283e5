"""The operator's reads and recovery: ``status``, ``show``, ``list``, ``reconcile``, ``tenants``;
locally or, with ``--stack``, through the deployed stack's operations function."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from reminders.cli.common import (
    _TENANT_HELP,
    BULK_STATES,
    STATES_FOR_CLI,
    _aws_environment,
    _conn,
    _count,
    _json_flag,
    _now,
    _Parser,
    _quiet_flag,
    _reason_flag,
    _seconds,
    _settings,
    emit,
    progress,
    terminal_safe,
)
from reminders.cli_format import MAX_SHOW_DELIVERIES, SHOW_DELIVERIES
from reminders.outcome import Outcome
from reminders.reasons import MAX_REASON_LENGTH


def cmd_tenants(args: argparse.Namespace) -> int:
    return _operator(args, f"tenants {args.action}")


def cmd_tenants_list(args: argparse.Namespace) -> int:
    return _operator(args, "tenants list")


def cmd_status(args: argparse.Namespace) -> int:
    if args.watch is None:
        return _status_once(args)
    import time

    shown = 0
    code = 0
    while args.times is None or shown < args.times:
        if shown:
            time.sleep(args.watch)
        if not args.json and sys.stdout.isatty():
            sys.stdout.write("\x1b[H\x1b[2J")
        code = _status_once(args)
        sys.stdout.flush()
        shown += 1
    return code


def _status_once(args: argparse.Namespace) -> int:
    return _operator(args, "status")


def cmd_show(args: argparse.Namespace) -> int:
    return _operator(args, "show")


def cmd_list(args: argparse.Namespace) -> int:
    return _operator(args, "list")


def cmd_reconcile(args: argparse.Namespace) -> int:
    return _operator(args, "reconcile")


# The commands ``--stack`` runs through the operations function, and the arguments each sends
# (the parser's names; the function refuses any other). ``drill`` is not among them: it starts
# its own Postgres and moto and injects faults (kill -9, Postgres restarts) on one machine.
REMOTE_COMMANDS: dict[str, tuple[str, ...]] = {
    "status": ("tenant",),
    "show": ("key", "tenant", "limit"),
    "list": ("state", "attention", "tenant", "kind", "channel", "recipient", "due_from",
             "due_to", "after", "limit", "sort", "schedule"),
    "reconcile": ("key", "tenant", "state", "kind", "channel", "recipient", "due_from",
                  "due_to", "limit", "dry_run", "as", "reason"),
    "cancel": ("key", "tenant", "dry_run", "reason"),
    "tenants pause": ("tenant", "create", "reason"),
    "tenants resume": ("tenant", "create", "reason"),
    "tenants list": (),
}


def _operator(args: argparse.Namespace, command: str) -> int:
    """Run an operator command against the local database, or with ``--stack`` through the
    deployed stack's operations function; print and exit the same way either way."""
    if getattr(args, "stack", None) or getattr(args, "ops_function", None):
        from reminders import ops_client

        arguments = {name: getattr(args, "as_" if name == "as" else name)
                     for name in REMOTE_COMMANDS[command]}
        with progress(args, command) as shown:
            if command == "reconcile" and args.key is None:  # bulk: it may take a while
                shown.show("waiting for the operations function", force=True)
            outcome = ops_client.run_remote(command, arguments, stack=args.stack,
                                            function_name=args.ops_function)
        if command == "status" and isinstance(outcome.data, dict):
            from reminders.operator import alarms_text

            outcome.data["alarms"] = STACK_ALARMS
            if outcome.text:
                outcome.text += "\n" + alarms_text(STACK_ALARMS)
    else:
        outcome = _operator_local(args, command)
    return _print_outcome(args, outcome)


def _operator_local(args: argparse.Namespace, command: str) -> Outcome:
    """The command against the local database; a write is by the current user (REMINDERS_ACTOR
    or the OS user), through the command line."""
    from reminders import operator
    from reminders import operator_commands as commands

    with _conn() as conn:
        if command == "status":
            return commands.status(conn, now=_now(), tenant=args.tenant,
                                   queue_counts=_queue_counts(), alarms=local_alarms)
        if command == "show":
            return commands.show(conn, key=args.key, tenant=args.tenant, limit=args.limit)
        if command == "list":
            return commands.list_deliveries(
                conn, limit=args.limit, state=args.state, tenant=args.tenant, kind=args.kind,
                channel=args.channel, recipient=args.recipient, due_from=args.due_from,
                due_to=args.due_to, after=args.after, attention=args.attention,
                sort=args.sort, schedule=args.schedule)
        if command == "tenants list":
            return commands.tenants_list(conn)
        if command == "cancel":  # a dry run changes nothing and names no one
            return commands.cancel(conn, now=_now(), key=args.key, tenant=args.tenant,
                                   who=None if args.dry_run else operator.current_user(),
                                   via="cli", reason=args.reason, dry_run=args.dry_run)
        who = operator.current_user()
        if command == "reconcile":
            with progress(args, "reconcile") as shown:
                return commands.reconcile(
                    conn, now=_now(), key=args.key, tenant=args.tenant, as_=args.as_,
                    reason=args.reason, who=who, via="cli", state=args.state, kind=args.kind,
                    channel=args.channel, recipient=args.recipient, due_from=args.due_from,
                    due_to=args.due_to, limit=args.limit, dry_run=args.dry_run,
                    progress=lambda n, total: shown.show(
                        f"reconciling {args.state} deliveries as {args.as_}", done=n,
                        total=total, force=n == total))
        return commands.tenants_set(conn, now=_now(), tenant=args.tenant,
                                    paused=args.action == "pause", who=who, via="cli",
                                    reason=args.reason, create=args.create)


STACK_ALARMS = {"available": False, "why": (
    "not shown with --stack: the deployed alarms are CloudWatch's (the stack's alarm topic "
    "and dashboard; `aws cloudwatch describe-alarms --state-value ALARM`)")}


def local_alarms() -> dict[str, Any]:
    """The local stack's alarms in ALARM as ``reminders tick``/``work`` last evaluated them
    (REMINDERS_HOME/alarms.json), or why there are none to show."""
    from reminders.local import stack
    from reminders.local.twin import watch

    path = watch.alarms_path(stack.home())
    state = watch.read_state(path)
    if state is None:
        return {"available": False, "why": (
            "not evaluated yet: on the local stack `reminders tick` and `reminders work` "
            f"evaluate the template's alarms and keep them in {path}")}
    return {"available": True, **state}


def _queue_counts() -> Callable[[], dict[str, dict[str, int]]] | None:
    """The transport's view beside the authority's, when queues are configured."""
    settings = _settings()
    if settings.queues is None:
        return None
    urls = settings.queues

    def counts() -> dict[str, dict[str, int]]:
        from reminders import aws
        from reminders.queue import Queue

        _aws_environment()
        sqs = aws.client("sqs")
        return {name: Queue(sqs, url).counts() for name, url in (
            ("deliveries", urls.deliveries), ("dlq", urls.dlq), ("parking", urls.parking))}

    return counts


def _print_outcome(args: argparse.Namespace, outcome: Outcome) -> int:
    emit(args, outcome.data, outcome.text)
    notes = outcome.notes + (outcome.json_notes if getattr(args, "json", False) else [])
    if notes:
        sys.stdout.flush()
    for note in notes:
        sys.stderr.write(f"reminders: {terminal_safe(note)}\n")
    return outcome.code


def add_parsers(sub: Any) -> None:
    tenants = sub.add_parser("tenants", help="list, pause, resume tenants or set their limits")
    t_sub = tenants.add_subparsers(dest="action", required=True, parser_class=_Parser)
    for action in ("pause", "resume"):
        p = t_sub.add_parser(action, help=f"{action} a tenant, e.g. `tenants {action} acme`")
        p.add_argument("tenant", help="e.g. acme")
        p.add_argument("--create", action="store_true",
                       help="also for a tenant that has never scheduled anything")
        _reason_flag(p)
        _json_flag(p)
        p.set_defaults(func=cmd_tenants)
    p = t_sub.add_parser("list", help="tenants, paused or not, with their pending deliveries",
                         description="E.g. `reminders tenants list --json`.")
    _json_flag(p)
    p.set_defaults(func=cmd_tenants_list)
    from reminders import cli_tenants

    cli_tenants.add_parsers(t_sub)
    p = sub.add_parser("status", help="counts by state and channel, oldest overdue, leases",
                       description="What Postgres knows (counts by state and channel, "
                                   "lateness by tenant, kind and channel, paused tenants, "
                                   "expired leases) and, beside it, the queues' counts. "
                                   "E.g. `reminders status --tenant acme --watch 5`.")
    p.add_argument("--tenant", help=_TENANT_HELP)
    p.add_argument("--watch", type=_seconds, metavar="SECONDS",
                   help="refresh every SECONDS until interrupted")
    p.add_argument("--times", type=_count("--times", 1, 1_000_000),
                   help="with --watch: stop after this many refreshes")
    _json_flag(p)
    p.set_defaults(func=cmd_status)

    deliveries = sub.add_parser(
        "deliveries", help="show, list and reconcile deliveries (`show`, `list` and "
                           "`reconcile` are short for them)",
        description="One delivery with its attempts, pages of deliveries by filter, and the "
                    "settling of parked ones. E.g. `reminders deliveries list --state dead`.")
    d_sub = deliveries.add_subparsers(dest="deliveries_action", required=True,
                                      parser_class=_Parser)
    for name, add in (("show", _add_show), ("list", _add_list), ("reconcile", _add_reconcile)):
        # Both forms name the command alike (args.command), whichever of them ran it.
        add(d_sub, name).set_defaults(command=name)
        add(sub, name).set_defaults(command=name)


# `reminders show|list|reconcile` are aliases of `reminders deliveries show|list|reconcile`.
DELIVERY_ALIASES = ("show", "list", "reconcile")


def _filter_flags(p: argparse.ArgumentParser, *, bulk: bool) -> None:
    """The filters ``list`` and a bulk ``reconcile`` share, beside --tenant and --state."""
    say = "bulk: " if bulk else ""
    p.add_argument("--kind", help=f"{say}only this kind's, e.g. trip")
    p.add_argument("--channel", choices=["webhook", "email", "sms"],
                   help=f"{say}only this channel's")
    p.add_argument("--recipient", help=f"{say}only this recipient's, e.g. alice@example.com")
    p.add_argument("--due-from", help=f"{say}ISO-8601 instant: due at or after it")
    p.add_argument("--due-to", help=f"{say}ISO-8601 instant: due before it")


def _add_show(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help="a delivery (or a schedule's deliveries) with attempts")
    p.add_argument("key", help="delivery key or schedule key")
    p.add_argument("--tenant", help=_TENANT_HELP)
    p.add_argument("--limit", type=_count("--limit", 1, MAX_SHOW_DELIVERIES),
                   default=SHOW_DELIVERIES,
                   help=f"a schedule's first deliveries shown, 1 to {MAX_SHOW_DELIVERIES} "
                        f"(default {SHOW_DELIVERIES}); `list --schedule KEY` pages through all")
    _json_flag(p)
    p.set_defaults(func=cmd_show)
    return p


def _add_list(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help="deliveries by state, tenant, kind, channel, recipient, due",
        description="Deliveries matching every filter given, by due time, a page at a time; "
                    "e.g. `reminders deliveries list --state dead --tenant acme --due-from "
                    "2027-03-01T00:00Z`.")
    p.add_argument("--state", help=f"one of {', '.join(STATES_FOR_CLI)}")
    p.add_argument("--tenant", help="only this tenant's, e.g. acme")
    _filter_flags(p, bulk=False)
    p.add_argument("--attention", action="store_true",
                   help="only parked deliveries (unknown, dead, failed, stale): the worklist "
                        "the console's Attention page shows")
    p.add_argument("--after", help="continue after the cursor a previous page printed")
    p.add_argument("--schedule", help="only this schedule's (its key), e.g. invoice-8")
    p.add_argument("--sort", choices=["due", "updated"], default="due",
                   help="due: by due time, oldest first (default); updated: newest change first")
    p.add_argument("--limit", type=_count("--limit"), default=100,
                   help="rows per page, 1 to 10000 (default 100)")
    _json_flag(p)
    p.set_defaults(func=cmd_list)
    return p


def _add_reconcile(sub: Any, name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help="settle parked deliveries after checking the receiver",
        description="Settle one delivery by KEY, or many: every delivery of --state in a "
                    "--tenant or --kind (and a due range), at most --limit; --dry-run lists "
                    "them first. E.g. `reminders deliveries reconcile --state dead --tenant "
                    "acme --as retry --reason 'endpoint fixed' --dry-run`.")
    p.add_argument("key", nargs="?", help="delivery key (omit for a bulk reconcile)")
    p.add_argument("--tenant", help=_TENANT_HELP)
    p.add_argument("--state", help=f"bulk: one of {', '.join(BULK_STATES)}")
    _filter_flags(p, bulk=True)
    p.add_argument("--limit", type=_count("--limit"), default=100,
                   help="bulk: at most this many (default 100)")
    p.add_argument("--dry-run", action="store_true", help="bulk: list them, change nothing")
    p.add_argument("--as", dest="as_", required=True, choices=["sent", "failed", "dead", "retry"],
                   help="sent (it arrived), failed/dead (give up), retry (due again, same key)")
    p.add_argument("--reason", required=True,
                   help=f"what you checked: one line, at most {MAX_REASON_LENGTH} characters")
    _json_flag(p)
    _quiet_flag(p)
    p.set_defaults(func=cmd_reconcile)
    return p
