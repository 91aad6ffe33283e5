"""Text output of the command line: aligned tables with headers and short durations.

Plain functions with no dependencies, so nothing here reaches the Lambda handlers' imports.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any


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
    text = str(value)
    if any(unicodedata.category(ch) == "Cc" for ch in text):
        text = "".join(ch if unicodedata.category(ch) != "Cc" else repr(ch)[1:-1] for ch in text)
    return text


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Columns aligned on display width, a header line, two spaces between columns."""
    cells = [[cell(v) for v in row] for row in rows]
    widths = [_width(h) for h in headers]
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], _width(text))

    def line(values: Sequence[str]) -> str:
        padded = [v + " " * (widths[i] - _width(v)) for i, v in enumerate(values)]
        return "  ".join(padded).rstrip()

    return "\n".join([line([h.upper() for h in headers]), *(line(r) for r in cells)])


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
