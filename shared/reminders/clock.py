"""The one clock every component asks for "now".

Production uses :class:`SystemClock`; tests and the demo use :class:`FixedClock`, which only
moves when told to. ``REMINDERS_NOW`` (ISO-8601 with an offset) fixes the clock for a command;
``REMINDERS_CLOCK_FILE`` names a file holding the instant, read at every ``now()`` (the functions'
processes on one machine, on the clock the demo and the drills advance).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from reminders.errors import InvalidInput


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, timezone-aware, in UTC."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class FixedClock:
    """A clock that stands still until advanced: tests and the demo run on it."""

    def __init__(self, instant: datetime) -> None:
        self._now = require_aware(instant, "instant").astimezone(UTC)

    def now(self) -> datetime:
        return self._now

    def set(self, instant: datetime) -> None:
        self._now = require_aware(instant, "instant").astimezone(UTC)

    def advance(self, delta: timedelta) -> datetime:
        self._now += delta
        return self._now


def require_aware(value: datetime, name: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(f"{name} must carry a UTC offset or zone, got naive {value.isoformat()}")
    return value


def iso(value: datetime) -> str:
    """An instant as ISO-8601 in UTC with ``Z``, as every JSON answer writes it (one Python
    cannot hold, read off a row written by hand, as Postgres wrote it, marked so)."""
    written = getattr(value, "written", None)
    if written is not None:
        return f"{written} (outside the years 1-9999)"
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_instant(text: str, name: str) -> datetime:
    """Parse an ISO-8601 instant that must carry an offset (``Z`` allowed)."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInput(f"{name}: not an ISO-8601 instant: {text!r}") from None
    return require_aware(value, name).astimezone(UTC)


class FileClock:
    """The instant a file holds, read afresh at every ``now()``: how the functions' processes
    on one machine share the one clock the demo and the drills advance
    (``REMINDERS_CLOCK_FILE``; :class:`SharedClock` writes it)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def now(self) -> datetime:
        try:
            with open(self.path) as given:
                text = given.read()
        except OSError as exc:
            raise InvalidInput(f"REMINDERS_CLOCK_FILE: cannot read {self.path}: "
                               f"{exc.strerror}") from None
        return parse_instant(text, f"REMINDERS_CLOCK_FILE {self.path}")


class SharedClock(FixedClock):
    """A :class:`FixedClock` that writes every instant it is set to into ``path`` (replaced
    whole, so a reader never sees half of one), for the processes a :class:`FileClock` reads
    it in."""

    def __init__(self, instant: datetime, path: str) -> None:
        self.path = path
        super().__init__(instant)
        self._write()

    def set(self, instant: datetime) -> None:
        super().set(instant)
        self._write()

    def advance(self, delta: timedelta) -> datetime:
        moved = super().advance(delta)
        self._write()
        return moved

    def _write(self) -> None:
        partial = f"{self.path}.partial"
        with open(partial, "w") as out:
            out.write(iso(self.now()))
        os.replace(partial, self.path)


def clock_from_env(environ: dict[str, str] | None = None) -> Clock:
    env = os.environ if environ is None else environ
    shared = env.get("REMINDERS_CLOCK_FILE")
    if shared:
        return FileClock(shared)
    fixed = env.get("REMINDERS_NOW")
    if fixed:
        return FixedClock(parse_instant(fixed, "REMINDERS_NOW"))
    return SystemClock()


class TimeLeft:
    """What is left of an invocation's time, asked afresh each time: Lambda's context's
    ``get_remaining_time_in_millis``; unbounded (None) without one (the local loop, tests)."""

    def __init__(self, remaining_ms: Callable[[], int] | None = None) -> None:
        self._remaining_ms = remaining_ms

    @classmethod
    def of(cls, context: Any) -> TimeLeft:
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        return cls(remaining if callable(remaining) else None)

    def seconds(self) -> float | None:
        return None if self._remaining_ms is None else self._remaining_ms() / 1000.0

    def short_of(self, needed: float) -> bool:
        """Less than ``needed`` seconds left (never, when unbounded)."""
        left = self.seconds()
        return left is not None and left < needed
