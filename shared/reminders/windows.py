"""Send windows and spreading, per kind: when in the recipient's local hours a delivery may go.

A kind's send windows (``kinds set billing --send-window "Mon-Fri 08:00-18:00"``) are read on
the wall clock of the recipient's zone (the recipient's own, else the schedule's, else UTC). A
delivery due outside them is due at their next opening instead, decided once, when it is
materialised (``materialise`` in ``db/objects/functions``): the scanner never leases it early,
and its occurrence stays its key and the start of its staleness window. Each day's window opens
and closes at instants resolved as the schedule's occurrences are, under its gap and overlap
policy (``recurrence.py``): an opening in a spring-forward gap moves forward by the gap's length
(``shift``) or leaves that day's window out (``skip``); an opening that occurs twice is the
first (``first``) or the second (``later``) of them; a closing in a gap always shifts.

A spread (``--spread 15m``) moves each delivery by its key's place in it: the first 60 bits of
the MD5 of its delivery key modulo the spread in milliseconds, the same on every retry and
replay, uniform over many keys. It is applied after the window: a night's reminders do not all
land on the window's opening.

The database computes the due instants (``send_window_due``, ``spread_offset``); this module
parses the flags and is their twin for ``reminders preview``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, TypedDict

from reminders import timezones
from reminders.errors import InvalidInput

MAX_WINDOWS = 14
_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_SPEC = re.compile(r"^\s*(?:(?P<days>[A-Za-z,\- ]+?)\s+)?(?P<start>\d{1,2}:\d{2})\s*-\s*"
                   r"(?P<end>\d{1,2}:\d{2})\s*$")


class Window(TypedDict):
    days: list[int]  # ISO weekdays, 1 (Monday) to 7
    start: str  # HH:MM
    end: str  # HH:MM, "24:00" for midnight; at or before start: runs past midnight


def _clock(text: str, flag: str, spec: str, *, midnight: bool) -> str:
    hours, minutes = (int(part) for part in text.split(":"))
    if not (0 <= hours <= 23 and 0 <= minutes <= 59) and not (midnight and text == "24:00"):
        raise InvalidInput(f"{flag}: {spec!r}: {text} is not a time of day (00:00 to "
                           f"{'24:00' if midnight else '23:59'})")
    return f"{hours:02d}:{minutes:02d}"


def _days(text: str | None, flag: str, spec: str) -> list[int]:
    if text is None:
        return list(range(1, 8))
    days: set[int] = set()
    for part in text.replace(" ", "").lower().split(","):
        ends = part.split("-")
        if len(ends) > 2 or any(end[:3] not in _DAYS or len(end) < 3 for end in ends):
            raise InvalidInput(f"{flag}: {spec!r}: {part!r} is not a weekday or a range of "
                               "them (Mon, Mon-Fri, Sat,Sun)")
        first, last = (_DAYS.index(end[:3]) + 1 for end in (ends[0], ends[-1]))
        span = range(first, last + 1) if first <= last else [*range(first, 8),
                                                             *range(1, last + 1)]
        days.update(span)
    return sorted(days)


def parse_window(spec: str, flag: str = "--send-window") -> Window:
    """``"08:00-21:00"`` or ``"Mon-Fri 08:00-18:00"`` or ``"Sat,Sun 10:00-14:00"``."""
    if not isinstance(spec, str):
        raise InvalidInput(f"{flag}: must be text such as 'Mon-Fri 08:00-18:00', got {spec!r}")
    match = _SPEC.match(spec)
    if match is None:
        raise InvalidInput(f"{flag}: {spec!r} is not a window; write [DAYS] HH:MM-HH:MM, e.g. "
                           "'08:00-21:00' or 'Mon-Fri 08:00-18:00'")
    start = _clock(match["start"], flag, spec, midnight=False)
    end = _clock(match["end"], flag, spec, midnight=True)
    if start == end:
        raise InvalidInput(f"{flag}: {spec!r} opens and closes at {start}; an all-day window "
                           "is 00:00-24:00")
    return {"days": _days(match["days"], flag, spec), "start": start, "end": end}


def parse_windows(specs: Iterable[str], flag: str = "--send-window") -> list[Window]:
    windows = [parse_window(spec, flag) for spec in specs]
    if len(windows) > MAX_WINDOWS:
        raise InvalidInput(f"{flag}: at most {MAX_WINDOWS} windows, got {len(windows)}")
    return windows


def check_windows(value: Any, flag: str = "send_windows") -> list[Window]:
    """Windows as the Python API takes them: window strings, or the stored dictionaries."""
    if not isinstance(value, (list, tuple)):
        raise InvalidInput(f"{flag}: must be a list of windows, got {value!r}")
    out: list[Window] = []
    for item in value:
        if isinstance(item, dict):
            days = item.get("days")
            text = f"{item.get('start')}-{item.get('end')}"
            parsed = parse_window(text, flag)
            if (not isinstance(days, list) or not days
                    or any(not isinstance(d, int) or not 1 <= d <= 7 for d in days)):
                raise InvalidInput(f"{flag}: days must be ISO weekdays 1-7, got {days!r}")
            parsed["days"] = sorted(set(days))
            out.append(parsed)
        else:
            out.append(parse_window(item, flag))
    if len(out) > MAX_WINDOWS:
        raise InvalidInput(f"{flag}: at most {MAX_WINDOWS} windows, got {len(out)}")
    return out


def describe(windows: Sequence[Window] | None) -> str:
    if not windows:
        return "any time"
    parts = []
    for w in windows:
        days = w["days"]
        if days == list(range(1, 8)):
            label = ""
        elif days == list(range(days[0], days[-1] + 1)) and len(days) > 1:
            label = f"{_DAYS[days[0] - 1].title()}-{_DAYS[days[-1] - 1].title()} "
        else:
            label = ",".join(_DAYS[d - 1].title() for d in days) + " "
        parts.append(f"{label}{w['start']}-{w['end']}")
    return ", ".join(parts)


def spread_offset(delivery_key: str, spread: timedelta | None) -> timedelta:
    """The key's place in the spread (the SQL function ``spread_offset``'s twin)."""
    if spread is None:
        return timedelta(0)
    millis = max(1, round(spread.total_seconds() * 1000))
    place = int(hashlib.md5(delivery_key.encode()).hexdigest()[:15], 16) % millis
    return timedelta(milliseconds=place)


def _local_instant(local: datetime, zone: str, gap: str, overlap: str) -> datetime | None:
    tzinfo = timezones.zone(zone)
    candidates: list[datetime] = []
    for fold in (0, 1):
        offset = local.replace(tzinfo=tzinfo, fold=fold).utcoffset()
        assert offset is not None
        candidates.append((local - offset).replace(tzinfo=UTC))
    real = sorted({c for c in candidates
                   if c.astimezone(tzinfo).replace(tzinfo=None) == local})
    if real:
        return real[-1] if overlap == "later" else real[0]
    return None if gap == "skip" else max(candidates)


def _at(day: date, clock: str) -> datetime:
    hours, minutes = (int(part) for part in clock.split(":"))
    return datetime.combine(day, time()) + timedelta(hours=hours, minutes=minutes)


def next_opening(at: datetime, zone: str, windows: Sequence[Window] | None, *,
                 gap: str = "shift", overlap: str = "first") -> datetime | None:
    """The first instant at or after ``at`` inside a window (``send_window_due``'s twin)."""
    if not windows:
        return at
    first = at.astimezone(timezones.zone(zone)).date() - timedelta(days=1)
    best: datetime | None = None
    for i in range(10):
        day = first + timedelta(days=i)
        for w in windows:
            if day.isoweekday() not in w["days"]:
                continue
            start, end = _at(day, w["start"]), _at(day, w["end"])
            if end <= start:
                end += timedelta(days=1)
            opens = _local_instant(start, zone, gap, overlap)
            if opens is None:
                continue
            closes = _local_instant(end, zone, "shift", overlap)
            assert closes is not None
            if opens <= at < closes:
                return at
            if opens > at and (best is None or opens < best):
                best = opens
    return best
