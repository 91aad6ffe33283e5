"""The ``reminders`` command line: the local stack, the API, operator reads and recovery.

Every command reads its settings from the environment; when ``DATABASE_URL`` is unset and a
local stack runs (``reminders local up``), it points at that stack. ``REMINDERS_NOW`` fixes the
clock. Every failure is one line on stderr and an exit status scripts can rely on (see
``EXIT_STATUSES``): 0 success, 1 not done within bounds, 2 bad input or usage, 3 not found,
4 partial failure, 5 the database or AWS unreachable, 6 a conflict worth retrying.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from reminders.cli.common import (
    BULK_STATES,
    EXIT_STATUSES,
    STATES_FOR_CLI,
    _exit_for,
    _join_negative_values,
    _Parser,
    _stdout_gone,
    emit,
    escape_what_stdout_cannot_encode,
    parse_duration,
    settle_output,
    terminal_safe,
)
from reminders.cli.drills import DRILLS
from reminders.cli.local_stack import _counts_text
from reminders.cli.meta import cmd_version
from reminders.cli.recovery import DELIVERY_ALIASES, REMOTE_COMMANDS
from reminders.cli_schedules import REMOTE_COMMANDS as SCHEDULE_COMMANDS
from reminders.outcome import EXIT_OK
from reminders.reasons import checked_reason

__all__ = ["BULK_STATES", "COMMAND_GROUPS", "DRILLS", "EXIT_STATUSES", "GROUPS",
           "STATES_FOR_CLI", "_counts_text", "_exit_for", "_join_negative_values",
           "build_parser", "emit", "main",
           "parse_duration", "terminal_safe"]

# Where command groups register: each module's ``add_parsers(sub)`` adds its commands to the
# top-level subparsers, in this order (the order ``reminders --help`` lists them). A group
# imports its helpers from ``reminders.cli.common``, never from this package, so imports run
# one way: here -> groups -> common.
GROUPS = (
    "reminders.cli.local_stack",
    "reminders.cli.endpoints_kinds",
    "reminders.cli.channels",
    "reminders.cli.scheduling",
    "reminders.cli_schedules",
    "reminders.cli.recovery",
    "reminders.cli.throughput",
    "reminders.cli.meta",
    "reminders.cli.console",
    "reminders.cli.drills",
)


# How ``reminders --help`` lists the commands: a few groups, as ``gh`` and ``temporal`` do;
# ``show``, ``list`` and ``reconcile`` are short for ``deliveries show|list|reconcile``.
COMMAND_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("operator commands", ("status", "deliveries", "tenants", "throughput")),
    ("scheduling commands", ("schedule", "reschedule", "cancel", "schedules", "preview", "opt-out",
                    "opt-in", "opt-outs")),
    ("endpoint, channel and kind commands", ("endpoints", "channels", "kinds")),
    ("one-machine commands", ("local", "migrate", "tick", "work", "console", "demo", "drill")),
    ("shell commands", ("completion", "version")),
)
# Commands for scripts the command line itself writes, left out of ``--help``: what a shell's
# completion asks on Tab.
HIDDEN_COMMANDS = ("__complete",)


class _RootParser(_Parser):
    """The top-level parser: its help lists the commands by group, the aliases last."""

    def format_help(self) -> str:
        formatter = self._get_formatter()
        formatter.add_usage(self.usage, self._actions, self._mutually_exclusive_groups)
        formatter.add_text(self.description)
        sub = next(a for a in self._actions if isinstance(a, argparse._SubParsersAction))
        pseudo = {a.dest: a for a in sub._get_subactions()}
        for heading, names in COMMAND_GROUPS:
            formatter.start_section(heading)
            formatter.add_arguments([pseudo[name] for name in names])
            formatter.end_section()
        formatter.add_text("aliases: " + ", ".join(
            f"`{name}` is `deliveries {name}`" for name in DELIVERY_ALIASES))
        for group in self._action_groups:
            if any(isinstance(a, argparse._SubParsersAction) for a in group._group_actions):
                continue
            formatter.start_section(group.title)
            formatter.add_arguments(group._group_actions)
            formatter.end_section()
        formatter.add_text(self.epilog)
        return formatter.format_help()


def build_parser() -> argparse.ArgumentParser:
    parser = _RootParser(prog="reminders",
                         description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="store_true",
                        help="print the versions (as `reminders version`) and exit")
    parser.add_argument("--stack", metavar="NAME",
                        help="run the command in the deployed stack NAME (its operations "
                             "functions, with your AWS credentials: reads through NAME-ops-read, "
                             "writes through NAME-ops-write): status, show, list, reconcile, "
                             "cancel, tenants; e.g. `reminders --stack Reminders status`")
    parser.add_argument("--ops-function", metavar="NAME",
                        help="as --stack, naming the operations functions themselves, NAME-read "
                             "and NAME-write (e.g. Reminders-ops; skips the CloudFormation "
                             "lookup)")
    parser.epilog = EXIT_STATUSES
    sub = parser.add_subparsers(dest="command", required=False, parser_class=_Parser,
                                metavar="COMMAND")
    parser.set_defaults(root_parser=parser)
    for name in GROUPS:
        importlib.import_module(name).add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", os.environ["LOG_LEVEL"])
    escape_what_stdout_cannot_encode()
    raw = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(_join_negative_values(raw))
    if args.version and args.command is None:
        args.func, args.json = cmd_version, False
    elif args.command is None:
        parser.error("give a command, e.g. `reminders status`")
    contradiction = settle_output(args)
    if contradiction is not None:
        parser.error(contradiction)
    if (args.stack or args.ops_function) and args.command is not None:
        command = str(args.command) + (f" {args.action}" if args.command == "tenants" else "")
        command = f"{command} {args.schedules_action}" if command == "schedules" else command
        if command not in {**REMOTE_COMMANDS, **SCHEDULE_COMMANDS} \
                and command != "schedules cancel":
            parser.error(f"`{command}` does not run with --stack: it runs where the database "
                         "is reachable (DATABASE_URL); through the operations function run "
                         "status, show, list, reconcile, cancel, tenants pause|resume|list and "
                         "schedules list|show|pause|resume|trigger|backfill"
                         + (" (drills run on one machine only)" if command == "drill" else ""))
    try:
        if getattr(args, "reason", None) is not None:  # refused before anything is done
            checked_reason(args.reason, required=args.command == "reconcile")
        code: int = args.func(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        _stdout_gone()
        return EXIT_OK
    except KeyboardInterrupt:
        sys.stderr.write("reminders: interrupted\n")
        return 130
    except Exception as exc:
        if os.environ.get("REMINDERS_DEBUG"):
            raise
        return _exit_for(exc)

