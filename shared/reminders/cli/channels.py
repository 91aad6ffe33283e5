"""Pacing (``channels set``, ``channels list``, ``endpoints set --rate``): the send rate of each
channel and each webhook endpoint, shared by every consumer (reminders.pacing)."""

from __future__ import annotations

import argparse
from typing import Any

from reminders.cli.common import (
    _conn,
    _json_flag,
    _now,
    _Parser,
    _reason_flag,
    _record,
    emit,
)
from reminders.errors import InvalidInput, NotFound

OFF = "off"


def _burst(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise InvalidInput(f"--burst must be a number of sends, e.g. 14; got {text!r}") from None
    if not 1 <= value <= 1_000_000:
        raise InvalidInput(f"--burst must be between 1 and 1000000 sends, got {text!r}")
    return value


def _set(args: argparse.Namespace, key: str, obj: str, name: str) -> int:
    from reminders import db, pacing

    removing = args.rate.strip().lower() == OFF
    if removing and args.burst is not None:
        raise InvalidInput("--burst goes with a rate, not with --rate off")
    rate = None if removing else pacing.parse_rate(args.rate)
    burst = _burst(args.burst)
    if rate is not None:
        pacing.check_burst(burst, rate)
    with _conn() as conn:
        if obj == "endpoint" and db.fetch_one(conn, "endpoint_by_url", {"url": name}) is None:
            raise NotFound(f"no endpoint {name} registered (add it with `endpoints add`)")
        if rate is None:
            with db.transaction(conn):
                removed = pacing.remove_rate(conn, key)
                if removed:
                    _record(conn, args, "unpaced", obj, name, None)
            emit(args, {"key": key, "rate_per_second": None, "changed": removed},
                 f"{name}: not paced" + ("" if removed else " (it was not)"))
            return 0
        with db.transaction(conn):
            row = pacing.set_rate(conn, key, rate, burst, _now())
            assert row is not None  # an operator's setting always applies
            _record(conn, args, "paced", obj, name, None)
    emit(args, {"key": key, "rate_per_second": row["rate"], "burst": row["burst"],
                "shards": row["shards"], "changed": True},
         f"{name}: paced at {row['rate']:g}/s, burst {row['burst']:g} "
         f"({row['shards']} shard{'s' if row['shards'] > 1 else ''})")
    return 0


def cmd_channels_set(args: argparse.Namespace) -> int:
    from reminders import pacing

    return _set(args, pacing.channel_key(args.channel), "channel", args.channel)


def cmd_endpoints_set(args: argparse.Namespace) -> int:
    from reminders import pacing

    return _set(args, pacing.endpoint_key(args.url), "endpoint", args.url)


def cmd_channels_list(args: argparse.Namespace) -> int:
    from reminders import pacing
    from reminders.cli_format import table

    now = _now()
    with _conn() as conn:
        rows = [pacing.describe(r) for r in pacing.rates(conn, now)]
    emit(args, rows, table(
        ["paced", "rate", "burst", "in force", "used last minute", "this minute", "throttles",
         "set by"],
        [(r["key"], f"{r['rate_per_second']:g}/s", f"{r['burst']:g}",
          f"{r['rate_in_force_per_second']:g}/s", r["used_last_minute"],
          r["used_this_minute"], r["throttles"], r["source"]) for r in rows])
         if rows else "nothing is paced (channels set email --rate 14/s)")
    return 0


def _rate_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rate", required=True,
                   help="sends at most, over every consumer: e.g. 14/s, 600/m, 1000/h; 'off' "
                        "stops pacing")
    p.add_argument("--burst", help="sends the bucket holds (default: one second of the rate, "
                                   "at least 1)")
    _reason_flag(p)
    _json_flag(p)


def add_endpoint_parser(ep_sub: Any) -> None:
    """``endpoints set URL --rate 50/s``, under the ``endpoints`` group."""
    p = ep_sub.add_parser("set", help="pace a webhook endpoint, e.g. `endpoints set URL "
                                      "--rate 50/s`")
    p.add_argument("url", help="the URL as registered")
    _rate_flags(p)
    p.set_defaults(func=cmd_endpoints_set)


def add_parsers(sub: Any) -> None:
    channels = sub.add_parser("channels", help="send rates of the e-mail and SMS channels and "
                                               "of webhook endpoints")
    c_sub = channels.add_subparsers(dest="action", required=True, parser_class=_Parser)
    p = c_sub.add_parser("set", help="pace a channel, e.g. `channels set email --rate 14/s`",
                         description="Pace a channel to its provider's quota: the consumers "
                                     "together send at most --rate, give or take --burst. "
                                     "E.g. `reminders channels set sms --rate 20/s`.")
    p.add_argument("channel", help="email or sms")
    _rate_flags(p)
    p.set_defaults(func=cmd_channels_set)
    p = c_sub.add_parser("list", help="each paced channel and endpoint, its rate and its use",
                         description="E.g. `reminders channels list --json`.")
    _json_flag(p)
    p.set_defaults(func=cmd_channels_list)
