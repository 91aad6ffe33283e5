"""`reminders kinds set`'s send-window, spread and priority flags (windows.py)."""

from __future__ import annotations

import argparse
from typing import Any

from reminders.windows import describe, parse_windows


def add_kind_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--send-window", action="append", metavar="[DAYS] HH:MM-HH:MM",
                   help="hours a delivery may go, in the recipient's zone, e.g. 08:00-21:00 or "
                        "'Mon-Fri 08:00-18:00'; repeat for several; 'none' for any time")
    p.add_argument("--spread", help="spread deliveries due at one instant over this long, "
                                    "e.g. 15m; 'none' for not spread")
    p.add_argument("--priority", type=int, help="0-9, leased highest first within a tenant's "
                                                 "share (default 5)")


def kind_options(args: argparse.Namespace) -> dict[str, Any]:
    """set_kind's keyword arguments for the flags given (what is not given is kept)."""
    from reminders.cli.common import parse_duration
    from reminders.schedules import KEEP

    options: dict[str, Any] = {"priority": args.priority}
    if args.send_window is None:
        options["send_windows"] = KEEP
    elif [w.strip().lower() for w in args.send_window] == ["none"]:
        options["send_windows"] = None
    else:
        options["send_windows"] = parse_windows(args.send_window)
    if args.spread is None:
        options["spread"] = KEEP
    elif args.spread.strip().lower() == "none":
        options["spread"] = None
    else:
        options["spread"] = parse_duration(args.spread, "--spread")
    return options


def kind_json(row: dict[str, Any]) -> dict[str, Any]:
    return {"send_windows": row["send_windows"],
            "spread_seconds": row["spread"].total_seconds() if row["spread"] else None,
            "priority": row["priority"]}


def kind_text(data: dict[str, Any]) -> str:
    from reminders.cli_format import duration

    spread = data["spread_seconds"]
    return (f", send window {describe(data['send_windows'])}, spread "
            f"{duration(spread) if spread else 'none'}, priority {data['priority']}")


def add_preview_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--send-window", action="append", metavar="[DAYS] HH:MM-HH:MM",
                   help="show each instant as a kind's send window moves it (repeatable)")


def preview_with_windows(args: argparse.Namespace, items: list[dict[str, str]]) -> str | None:
    """Add each occurrence's due instant under ``--send-window`` to the preview items (its
    ``due_utc``/``due_local``, and ``held``); return the text lines, or None without windows."""
    from datetime import datetime

    from reminders import timezones
    from reminders.windows import next_opening

    if not args.send_window:
        return None
    spec = parse_windows(args.send_window)
    zone = timezones.zone(args.tz)
    lines: list[tuple[str, str, str | None, str | None]] = []
    for item in items:
        at = datetime.fromisoformat(item["utc"].replace("Z", "+00:00"))
        due = next_opening(at, args.tz, spec, gap=args.gap, overlap=args.overlap)
        item["due_utc"] = due.strftime("%Y-%m-%dT%H:%M:%SZ") if due else None  # type: ignore[assignment]
        item["due_local"] = due.astimezone(zone).isoformat() if due else None  # type: ignore[assignment]
        item["held"] = due != at  # type: ignore[assignment]
        lines.append((item["utc"], item["local"], item["due_utc"] if due != at else None,
                      item["due_local"] if due != at else None))
    from reminders.cli_format import table

    return table(["due", "local", "held until", "held until (local)"], lines) if lines \
        else "(no occurrences)"
