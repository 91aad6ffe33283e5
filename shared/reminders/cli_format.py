"""Text output of the command line: tables, short durations, instants to the second.

A table is aligned under a header in a terminal and tab-separated values, one row a line and
no header, when stdout is a pipe or a file (as ``gh`` prints them). A command builds its text
before it knows where it goes (the operations function builds it in Lambda), so :func:`table`
writes the table into the text as one marked line and :func:`render` lays it out where it is
printed; a :func:`remark` (a next-page cursor) is shown in place in a terminal and goes to
stderr when piped, so that a pipe gets the rows alone.

Plain functions with no dependencies, so nothing here reaches the Lambda handlers' imports.
"""

from __future__ import annotations

import json
import os
import re
import sys
import unicodedata
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

# How many of a schedule's deliveries `show SCHEDULE_KEY` shows by default, and at most (each
# with its attempts, events and actions: four reads a delivery, and a fan-out has thousands).
SHOW_DELIVERIES = 20
MAX_SHOW_DELIVERIES = 1000
# How many of the deliveries a cancel would suppress `cancel --dry-run` lists (all are counted).
DRY_RUN_LISTED = 100


def duration(value: float | timedelta | None, *, none: str = "never") -> str:
    """``10800`` -> ``3h``; ``4800`` -> ``1h20m``; ``90`` -> ``1m30s``; ``0`` -> ``0s``."""
    if value is None:
        return none
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    sign = "-" if seconds < 0 else ""
    rest = round(abs(seconds))
    if rest == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return sign + "".join(parts)


def instant(value: datetime, *, microseconds: bool = False) -> str:
    """An instant in UTC with ``Z``, to the second unless ``microseconds`` (a naive one, a
    local wall-clock time, as it is)."""
    if not microseconds:
        value = value.replace(microsecond=0)
    if value.tzinfo is None:
        return value.isoformat()
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


# An ISO-8601 instant with a fraction of a second, as ``clock.iso`` writes one.
_FRACTION = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.\d+(Z|[+-]\d\d:\d\d)?")


def to_the_second(text: str) -> str:
    """An ISO-8601 instant (the whole of ``text``) to the second: ``2027-03-01T09:00:05.1234Z``
    reads ``2027-03-01T09:00:05Z``; anything else as it is (a delivery key that holds an
    instant is a name, kept whole). JSON keeps instants exact."""
    found = _FRACTION.fullmatch(text)
    return found.group(1) + (found.group(2) or "") if found else text


def _width(text: str) -> int:
    """Terminal columns: East Asian wide characters take two, combining marks none."""
    total = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        total += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return total


def cell(value: Any) -> str:
    """One table cell: no Python reprs, control characters shown escaped, never raw."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return instant(value)
    if isinstance(value, timedelta):
        return duration(value)
    text = to_the_second(str(value))
    if any(unicodedata.category(ch) == "Cc" for ch in text):
        text = "".join(ch if unicodedata.category(ch) != "Cc" else repr(ch)[1:-1] for ch in text)
    return text


# A table, and a remark, travel inside a command's text as a line that starts with one of these
# (ASCII's record and group separators): no cell can hold one, since :func:`cell` shows every
# control character as an escape, and :func:`terminal_safe` would show one from elsewhere.
_TABLE = "\x1e"
_REMARK = "\x1d"
FORCE_TTY_ENV = "REMINDERS_FORCE_TTY"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """The table as one line of a command's text, laid out by :func:`render`: aligned under
    a header in a terminal, tab-separated values when piped."""
    cells = [[None if v is None else cell(v) for v in row] for row in rows]
    return _TABLE + json.dumps({"headers": list(headers), "rows": cells}, ensure_ascii=False)


def remark(text: str) -> str:
    """A line beside the rows (a next-page cursor): in place in a terminal, on stderr when
    piped."""
    return _REMARK + text


def aligned(headers: Sequence[str], rows: Sequence[Sequence[str | None]]) -> str:
    """Columns aligned on display width under an upper-case header, two spaces apart; an
    empty cell shows ``-``."""
    cells = [["-" if v is None else v for v in row] for row in rows]
    widths = [_width(h) for h in headers]
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], _width(text))

    def line(values: Sequence[str]) -> str:
        padded = [v + " " * (widths[i] - _width(v)) for i, v in enumerate(values)]
        return "  ".join(padded).rstrip()

    return "\n".join([line([h.upper() for h in headers]), *(line(r) for r in cells)])


def separated(rows: Sequence[Sequence[str | None]]) -> str:
    """One row a line, its cells separated by tabs, no header; an empty cell is empty. A tab
    or a line break inside a cell is already an escape (:func:`cell`)."""
    return "\n".join("\t".join("" if v is None else v for v in row) for row in rows)


def _table_of(line: str) -> tuple[list[str], list[list[str | None]]] | None:
    try:
        found = json.loads(line[1:])
        headers, rows = found["headers"], found["rows"]
    except (ValueError, TypeError, KeyError):
        return None
    if not (isinstance(headers, list) and isinstance(rows, list)
            and all(isinstance(r, list) and len(r) == len(headers) for r in rows)):
        return None
    return [str(h) for h in headers], [[None if v is None else str(v) for v in r] for r in rows]


def render(text: str, *, terminal: bool) -> tuple[str, list[str]]:
    """The text to print, its tables laid out for a terminal or a pipe, and the remarks that
    go to stderr (none in a terminal: there they stay in place)."""
    out: list[str] = []
    aside: list[str] = []
    for line in text.split("\n"):
        found = _table_of(line) if line.startswith(_TABLE) else None
        if found is not None:
            headers, rows = found
            laid = aligned(headers, rows) if terminal else separated(rows)
            if laid or terminal:
                out.append(laid)
        elif line.startswith(_REMARK):
            (out if terminal else aside).append(line[1:])
        else:
            out.append(line)
    return "\n".join(out), aside


def stdout_is_terminal() -> bool:
    """Whether stdout is a terminal (``REMINDERS_FORCE_TTY=1`` says it is, for a pager or
    ``watch``; ``=0`` that it is not)."""
    forced = os.environ.get(FORCE_TTY_ENV)
    if forced:
        return forced not in ("0", "false", "no")
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


# What a terminal would act on rather than show: C0 controls but newline and tab, DEL, C1
# controls (ESC starts colour, cursor and title sequences; CSI, OSC), and the bidirectional
# overrides and isolates that reorder what follows them.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: str) -> str:
    """``text`` with every character a terminal would act on shown as a visible escape
    (``\\x1b``, ``\\u202e``): a receiver's reason phrase, a recipient or a payload value
    reaches an operator's screen as text, never as a command to the terminal."""
    return _UNSAFE.sub(lambda m: (f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100
                                  else f"\\u{ord(m[0]):04x}"), text)
