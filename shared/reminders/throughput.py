"""Throughput as it happens: the attempts finished over the last minutes, by outcome, and per
minute and channel the sends and the failures. `reminders throughput --json` prints it; the
console's overview charts the same figures, refreshed in place.

The window is whole minutes: the ``minutes`` ending with the current one (that one so far),
so each bar of a chart is one clock minute and the last one grows until the minute ends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from reminders import db
from reminders.clock import iso

CHANNELS = ("webhook", "email", "sms")
# An attempt's outcome (the ledger's names): sent; transient (it will be tried again, within
# its budget); permanent (failed for good); unknown (a send may have happened, unrecorded).
OUTCOMES = ("sent", "transient", "permanent", "unknown")
# The charts' series: sends, failures (transient and permanent), and unknown apart.
SERIES = ("sent", "failed", "unknown")
SERIES_OF = {"sent": "sent", "transient": "failed", "permanent": "failed", "unknown": "unknown"}
MAX_MINUTES = 1440
DEFAULT_MINUTES = 60


def window(now: datetime, minutes: int) -> tuple[datetime, list[datetime]]:
    """The window's start and its minutes, oldest first: the ``minutes`` whole minutes ending
    with the one ``now`` is in."""
    if not 1 <= minutes <= MAX_MINUTES:
        from reminders.errors import InvalidInput

        raise InvalidInput(f"minutes: from 1 to {MAX_MINUTES}, got {minutes}")
    current = now.astimezone(UTC).replace(second=0, microsecond=0)
    starts = [current - timedelta(minutes=minutes - 1 - i) for i in range(minutes)]
    return starts[0], starts


def throughput(conn: db.Connection, *, now: datetime, minutes: int = DEFAULT_MINUTES,
               tenant: str | None = None) -> dict[str, Any]:
    """The attempts finished in the window: totals by outcome, by channel and outcome, and per
    channel one entry a minute (every minute of the window, zeros included) of its series."""
    since, starts = window(now, minutes)
    rows = db.fetch_all(conn, "throughput_by_minute",
                        {"since": since, "now": now, "tenant": tenant})
    by_outcome = dict.fromkeys(OUTCOMES, 0)
    by_channel = {c: dict.fromkeys(OUTCOMES, 0) for c in CHANNELS}
    index = {start: i for i, start in enumerate(starts)}
    per_minute: dict[str, list[dict[str, Any]]] = {c: _minutes(starts) for c in CHANNELS}
    for r in rows:
        n, outcome, channel = int(r["n"]), r["outcome"], r["channel"]
        by_outcome[outcome] += n
        by_channel.setdefault(channel, dict.fromkeys(OUTCOMES, 0))[outcome] += n
        minute = r["minute"].astimezone(UTC)
        series = per_minute.setdefault(channel, _minutes(starts))
        series[index[minute]][SERIES_OF[outcome]] += n
    return {"now": iso(now), "since": iso(since), "minutes": minutes, "tenant": tenant,
            "attempts": sum(by_outcome.values()), "by_outcome": by_outcome,
            "by_channel": by_channel, "per_minute": per_minute}


def _minutes(starts: list[datetime]) -> list[dict[str, Any]]:
    return [{"minute": iso(start), **dict.fromkeys(SERIES, 0)} for start in starts]


def throughput_text(data: dict[str, Any]) -> str:
    """The totals, then each channel's minutes that had an attempt (the JSON has every one)."""
    from reminders.cli_format import table

    who = f" of tenant {data['tenant']}" if data["tenant"] else ""
    outcomes = ", ".join(f"{k} {v}" for k, v in data["by_outcome"].items())
    text = (f"attempts finished{who} in the {data['minutes']} minutes from {data['since']} "
            f"to {data['now']}: {data['attempts']} ({outcomes})")
    busy = [(entry["minute"], channel, *(entry[s] for s in SERIES))
            for channel, entries in data["per_minute"].items() for entry in entries
            if any(entry[s] for s in SERIES)]
    if busy:
        text += "\n" + table(["minute", "channel", *SERIES], sorted(busy))
    else:
        text += "\nno attempt finished in the window"
    return text
