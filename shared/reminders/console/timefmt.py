"""Instants on the console's pages: absolute in UTC to the second (never microseconds), with
how long ago or how far ahead beside them ("3m ago", "in 2h")."""

from __future__ import annotations

from datetime import UTC, datetime

from markupsafe import Markup, escape


def _parse(value: str | datetime | None) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        moment = value
    else:
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def absolute(value: str | datetime | None) -> str:
    """``2027-03-01T09:03:00Z``: UTC, to the second; '' for nothing."""
    moment = _parse(value)
    if moment is None:
        return "" if value is None else str(value)
    return moment.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def relative(value: str | datetime | None, now: datetime) -> str:
    """``3m ago``, ``in 2h``, ``now``: the largest unit and the next one, rounded down."""
    from reminders.cli_format import duration

    moment = _parse(value)
    if moment is None:
        return ""
    seconds = int((now.astimezone(UTC) - moment).total_seconds())
    if abs(seconds) < 1:
        return "now"
    text = duration(abs(seconds))
    units = [part for part in _units(text)][:2]
    short = "".join(units)
    return f"{short} ago" if seconds > 0 else f"in {short}"


def _units(text: str) -> list[str]:
    parts, current = [], ""
    for ch in text:
        current += ch
        if ch.isalpha():
            parts.append(current)
            current = ""
    return parts


def when(value: str | datetime | None, now: datetime) -> Markup:
    """The absolute instant in a <time> element, its relative form beside it."""
    moment = absolute(value)
    if not moment:
        return Markup('<span class="muted">never</span>')
    return Markup('<time datetime="{0}">{0}</time> <span class="ago">({1})</span>').format(
        escape(moment), escape(relative(value, now)))


def detail(value: object) -> str:
    """A recorded detail (JSON) in words: ``key: value`` pairs, never ``None`` or ``{}``."""
    if value is None or value == {} or value == [] or value == "":
        return "no detail"
    if isinstance(value, dict):
        return "; ".join(f"{k}: {detail(v) if isinstance(v, dict | list) else _word(v)}"
                         for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(detail(v) if isinstance(v, dict | list) else _word(v) for v in value)
    return _word(value)


def _word(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)
