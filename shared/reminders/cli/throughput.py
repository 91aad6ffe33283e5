"""``throughput``: the attempts finished over the last minutes, by outcome and, per minute, by
channel (what the console's live overview charts)."""

from __future__ import annotations

import argparse
from typing import Any

from reminders.cli.common import _conn, _count, _json_flag, _now, emit


def cmd_throughput(args: argparse.Namespace) -> int:
    from reminders.throughput import throughput, throughput_text

    with _conn() as conn:
        data = throughput(conn, now=_now(), minutes=args.minutes, tenant=args.tenant)
    emit(args, data, throughput_text(data))
    return 0


def add_parsers(sub: Any) -> None:
    from reminders.throughput import DEFAULT_MINUTES, MAX_MINUTES

    p = sub.add_parser("throughput", help="attempts finished per minute, by channel and outcome",
                       description="The attempts finished in the last --minutes whole minutes "
                                   "(the current one so far): totals by outcome (sent, "
                                   "transient, permanent, unknown) and, per channel, each "
                                   "minute's sends, failures and unknowns, as the console's "
                                   "overview charts them. E.g. `reminders throughput --minutes "
                                   "60 --tenant acme --json`.")
    p.add_argument("--tenant", help="only this tenant's, e.g. acme")
    p.add_argument("--minutes", type=_count("--minutes", 1, MAX_MINUTES),
                   default=DEFAULT_MINUTES,
                   help=f"the window in whole minutes, 1 to {MAX_MINUTES} (default "
                        f"{DEFAULT_MINUTES})")
    _json_flag(p)
    p.set_defaults(func=cmd_throughput)
