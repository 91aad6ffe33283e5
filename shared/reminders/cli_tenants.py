"""``reminders tenants set``: a tenant's limits on what applications add, or the deployment's
defaults (``--default``), which every tenant without limits of its own has."""

from __future__ import annotations

import argparse
from typing import Any

from reminders.errors import InvalidInput

_NOT_GIVEN: Any = object()  # a flag left out: the limit is kept as it is


def _limit(name: str) -> Any:
    """A whole number, or ``default`` (the tenant takes the deployment's default again)."""

    def parse(text: str) -> int | None:
        if text.strip().lower() == "default":
            return None
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{name}: expected a whole number or 'default', got {text!r}") from None
        return value

    return parse


def add_parsers(t_sub: Any) -> None:
    """``set`` under ``tenants``."""
    from reminders.cli.common import _json_flag, _reason_flag

    p = t_sub.add_parser(
        "set", help="a tenant's limits: pending deliveries, schedules created a minute",
        description="E.g. `reminders tenants set acme --max-pending 200000 "
                    "--schedules-per-minute 600`; `--max-pending default` gives the tenant "
                    "the deployment's default again; `reminders tenants set --default "
                    "--max-pending 1000000` sets that default. The SQL API refuses past them "
                    "with SQLSTATE RM429.")
    p.add_argument("tenant", nargs="?", help="e.g. acme (or --default)")
    p.add_argument("--default", action="store_true",
                   help="the deployment's defaults, for every tenant without its own")
    p.add_argument("--max-pending", type=_limit("--max-pending"), default=_NOT_GIVEN,
                   help="pending deliveries (scheduled, retrying, leased) at most")
    p.add_argument("--schedules-per-minute", type=_limit("--schedules-per-minute"),
                   default=_NOT_GIVEN,
                   help="schedules an application creates in any minute at most")
    p.add_argument("--create", action="store_true",
                   help="also for a tenant that has never scheduled anything")
    _reason_flag(p)
    _json_flag(p)
    p.set_defaults(func=cmd_tenants_set)


def cmd_tenants_set(args: argparse.Namespace) -> int:
    from reminders import operator
    from reminders.cli.common import _conn, _now, emit

    if args.default == (args.tenant is not None):
        raise InvalidInput("tenants set: name a tenant, or give --default (not both)")
    limits = {name: getattr(args, name) for name in operator.LIMITS
              if getattr(args, name) is not _NOT_GIVEN}
    if not limits:
        raise InvalidInput("tenants set: give --max-pending, --schedules-per-minute or both")
    with _conn() as conn:
        data = operator.set_tenant_limits(conn, tenant=args.tenant, now=_now(),
                                          reason=args.reason, create=args.create, **limits)
    who = f"tenant {args.tenant}" if args.tenant else "the default"
    text = (f"{who}: at most {_shown(data['max_pending'])} pending deliveries, "
            f"{_shown(data['schedules_per_minute'])} schedules created a minute"
            + ("" if data["changed"] else " (already)"))
    emit(args, data, text)
    return 0


def _shown(value: int | None) -> str:
    return "the default" if value is None else str(value)
