"""``reminders schedules list|show|pause|resume|trigger|backfill|cancel``: one schedule held by
an operator. The work is :mod:`reminders.schedule_commands`' (the operations function runs the
same functions for ``--stack``); ``schedules cancel`` is ``reminders cancel``."""

from __future__ import annotations

import argparse
from typing import Any

# The ``--stack`` commands of this group and the arguments each sends (the parser's names).
REMOTE_COMMANDS: dict[str, tuple[str, ...]] = {
    "schedules list": ("tenant", "schedule_state", "after", "limit"),
    "schedules show": ("key", "tenant"),
    "schedules pause": ("key", "tenant", "reason"),
    "schedules resume": ("key", "tenant", "reason"),
    "schedules trigger": ("key", "tenant", "reason"),
    "schedules backfill": ("key", "tenant", "from", "to", "limit", "dry_run", "reason"),
}

# The request's names that are not the parser's (a schedule's states are not a delivery's).
_ATTRIBUTES = {"from": "from_", "schedule_state": "state"}


def command_of(args: argparse.Namespace) -> str:
    """``schedules cancel`` is the ``cancel`` command; the others are ``schedules VERB``."""
    return "cancel" if args.schedules_action == "cancel" else f"schedules {args.schedules_action}"


def cmd_schedules(args: argparse.Namespace) -> int:
    from reminders.cli.recovery import _print_outcome
    from reminders.cli.scheduling import cmd_cancel

    command = command_of(args)
    if command == "cancel":
        return cmd_cancel(args)
    if getattr(args, "stack", None) or getattr(args, "ops_function", None):
        from reminders import ops_client

        arguments = {name: getattr(args, _ATTRIBUTES.get(name, name))
                     for name in REMOTE_COMMANDS[command]}
        from reminders.cli.common import progress

        with progress(args, command) as shown:
            if command == "schedules backfill":
                shown.show("waiting for the operations function", force=True)
            outcome = ops_client.run_remote(command, arguments, stack=args.stack,
                                            function_name=args.ops_function)
    else:
        outcome = _local(args, command)
    return _print_outcome(args, outcome)


def _local(args: argparse.Namespace, command: str) -> Any:
    from reminders import operator
    from reminders import schedule_commands as commands
    from reminders.cli import common as cli

    with cli._conn() as conn:
        if command == "schedules list":
            return commands.list_schedules(conn, limit=args.limit, tenant=args.tenant,
                                           state=args.state, after=args.after)
        if command == "schedules show":
            return commands.show(conn, key=args.key, tenant=args.tenant, now=cli._now())
        if command == "schedules backfill":  # a dry run changes nothing and names no one
            with cli.progress(args, "backfill") as shown:
                return commands.backfill(
                    conn, now=cli._now(), key=args.key, tenant=args.tenant, start=args.from_,
                    end=args.to, limit=args.limit,
                    who=None if args.dry_run else operator.current_user(), via="cli",
                    reason=args.reason, dry_run=args.dry_run,
                    progress=lambda what: shown.show(what, force=True))
        who = operator.current_user()
        if command == "schedules trigger":
            return commands.trigger(conn, now=cli._now(), key=args.key, tenant=args.tenant,
                                    who=who, via="cli", reason=args.reason)
        return commands.hold(conn, now=cli._now(), key=args.key, tenant=args.tenant,
                             paused=command == "schedules pause", who=who, via="cli",
                             reason=args.reason)


def add_parsers(sub: Any) -> None:
    from reminders.cli import common as cli

    group = sub.add_parser("schedules", help="list, show, pause, resume, trigger, backfill or "
                                             "cancel one schedule",
                           description="E.g. `reminders schedules pause digest-7 --reason "
                                       "INC-12`.")
    g_sub = group.add_subparsers(dest="schedules_action", required=True,
                                 parser_class=type(group))

    def key_flags(p: argparse.ArgumentParser) -> None:
        p.add_argument("key", help="schedule key or one of its delivery keys")
        p.add_argument("--tenant", help="needed only when the key exists for several tenants")

    p = g_sub.add_parser("list", help="schedules by tenant and key, a page at a time",
                         description="E.g. `reminders schedules list --tenant acme --state "
                                     "paused`.")
    p.add_argument("--tenant", help="only this tenant, e.g. acme")
    p.add_argument("--state", choices=["active", "paused", "cancelled", "finished"],
                   help="only schedules in this state, e.g. paused")
    p.add_argument("--after", help="continue after this cursor (TENANT/KEY), as printed")
    p.add_argument("--limit", type=cli._count("--limit"), default=100,
                   help="at most this many (default 100)")
    cli._json_flag(p)
    p.set_defaults(func=cmd_schedules)

    p = g_sub.add_parser("show", help="a schedule: rule, state, next occurrences, deliveries "
                                      "by generation, operator actions",
                         description="E.g. `reminders schedules show digest-7 --json`.")
    key_flags(p)
    cli._json_flag(p)
    p.set_defaults(func=cmd_schedules)

    for action, text in (("pause", "its pending deliveries wait until resumed"),
                         ("resume", "its held deliveries are due again"),
                         ("trigger", "send it now, once per recipient, with its own key; the "
                                     "series stays as it was")):
        p = g_sub.add_parser(action, help=f"{action} a schedule: {text}",
                             description=f"E.g. `reminders schedules {action} digest-7 "
                                         "--reason INC-12`.")
        key_flags(p)
        cli._reason_flag(p)
        cli._json_flag(p)
        p.set_defaults(func=cmd_schedules)

    p = g_sub.add_parser("backfill", help="make the occurrences a window missed (never twice)",
                         description="E.g. `reminders schedules backfill digest-7 --from "
                                     "2027-01-04T00:00Z --to 2027-01-11T00:00Z --dry-run`. "
                                     "Backfilled deliveries are due now; their staleness "
                                     "window counts from now.")
    key_flags(p)
    p.add_argument("--from", dest="from_", required=True, help="window start, ISO-8601 instant")
    p.add_argument("--to", required=True, help="window end (inclusive; never after now)")
    p.add_argument("--limit", type=cli._count("--limit", high=1000), default=100,
                   help="at most this many occurrences (default 100)")
    p.add_argument("--dry-run", action="store_true", help="list what it would make")
    cli._reason_flag(p)
    cli._json_flag(p)
    cli._quiet_flag(p)
    p.set_defaults(func=cmd_schedules)

    p = g_sub.add_parser("cancel", help="as `reminders cancel`",
                         description="E.g. `reminders schedules cancel invoice-42`.")
    key_flags(p)
    p.add_argument("--dry-run", action="store_true",
                   help="list the pending deliveries it would suppress; change nothing")
    cli._reason_flag(p)
    cli._json_flag(p)
    p.set_defaults(func=cmd_schedules)
