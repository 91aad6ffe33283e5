"""Progress of long work on stderr, in a terminal only: one line rewritten in place saying what
is being done, the counts so far and, where it is known, the time left; erased before the
result is printed. Nothing is written when stdout or stderr is not a terminal (piped, a file,
CI) or with ``--quiet``, as ``gh`` shows its progress only to a person at a terminal."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

# At most this many redraws a second: a fast loop costs the terminal nothing.
REDRAWS_PER_SECOND = 10


def wanted(quiet: bool, stdout: TextIO | None = None, stderr: TextIO | None = None) -> bool:
    """Whether to show progress: both streams a terminal and no ``--quiet``."""
    if quiet:
        return False
    try:
        return (stdout or sys.stdout).isatty() and (stderr or sys.stderr).isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """``with Progress("work", enabled=...) as p: p.show("12 records", left=40.0)``."""

    def __init__(self, what: str, *, enabled: bool, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.clock = clock
        self.began = clock()
        self._last = 0.0
        self._drawn = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.clear()

    def show(self, doing: str, *, done: int | None = None, total: int | None = None,
             left: float | None = None, force: bool = False) -> None:
        """Redraw the line: ``what: doing``, then ``done of total`` and the time left (given,
        or estimated from the pace so far when ``done`` of ``total`` is known)."""
        if not self.enabled:
            return
        now = self.clock()
        if not force and self._drawn and now - self._last < 1 / REDRAWS_PER_SECOND:
            return
        self._last = now
        parts = [f"{self.what}: {doing}"]
        if done is not None and total is not None:
            parts.append(f"{done} of {total}")
            if left is None and 0 < done < total:
                left = (now - self.began) / done * (total - done)
        if left is not None:
            parts.append(f"about {_short(left)} left")
        self._draw("; ".join(parts))

    def clear(self) -> None:
        """Erase the line (before anything else is printed to the terminal)."""
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False

    def _draw(self, line: str) -> None:
        from reminders.cli_format import terminal_safe

        try:
            width = os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError, AttributeError):
            width = 80
        text = terminal_safe(line)
        if len(text) >= width:
            text = text[:max(width - 2, 1)] + "…"
        self.stream.write("\r\x1b[K" + text)
        self.stream.flush()
        self._drawn = True


def _short(seconds: float) -> str:
    from reminders.cli_format import duration

    return duration(max(1.0, seconds))
