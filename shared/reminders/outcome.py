"""What a command printed and how it exited, and the exit statuses every command shares.

No dependencies beyond the standard library and :mod:`reminders.errors` (and, when an error
is reported, :mod:`reminders.kms`'s error type, itself light): the command line
imports it at start-up and the operations function sends an :class:`Outcome` back as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reminders.errors import NotFound, RemindersError

EXIT_OK = 0
# `work`: the queues did not empty in time; `endpoints encrypt-secrets`: rows remain;
# `drill`: a violation found; `demo`: an outcome not as expected; an unexpected error
EXIT_NOT_DONE = 1
EXIT_USAGE = 2  # a bad argument, bad input, a missing or malformed setting
EXIT_NOT_FOUND = 3  # the key, schedule, tenant or endpoint named does not exist
# `work`: some records failed; a bulk `reconcile`: some refused; `status`: no queue answer
EXIT_PARTIAL_FAILURE = 4
EXIT_UNAVAILABLE = 5  # Postgres, KMS or another AWS service could not be reached
EXIT_CONFLICT = 6  # another transaction held the rows; trying again can succeed


@dataclass
class Outcome:
    """What a command printed and how it exited: ``data`` (``--json``) or ``text``, plus
    ``notes`` for stderr, and ``json_notes`` for stderr only with ``--json`` (the text form
    carries them inline)."""

    data: Any
    text: str | None
    code: int = EXIT_OK
    notes: list[str] = field(default_factory=list)
    json_notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"data": self.data, "text": self.text, "code": self.code, "notes": self.notes,
                "json_notes": self.json_notes}


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def error_line(exc: BaseException) -> tuple[int, str]:
    """The exit status and the one line an error is reported as; nothing else escapes."""
    from reminders.errors import CommandFailed, Conflict, DatabaseUnavailable
    from reminders.kms import KeyUnavailable

    if isinstance(exc, CommandFailed):
        return exc.code, str(exc)
    if isinstance(exc, NotFound):
        return EXIT_NOT_FOUND, str(exc)
    if isinstance(exc, DatabaseUnavailable | KeyUnavailable):
        return EXIT_UNAVAILABLE, str(exc)
    if isinstance(exc, Conflict):
        return EXIT_CONFLICT, f"{exc} (nothing was written; try again)"
    if isinstance(exc, RemindersError):
        return EXIT_USAGE, str(exc)
    module = type(exc).__module__
    if module.startswith(("botocore", "urllib3", "reminders.aws_http")):
        return EXIT_UNAVAILABLE, f"AWS: {first_line(exc)}"
    if module.startswith("psycopg"):
        import psycopg

        if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
            return EXIT_UNAVAILABLE, f"Postgres: {first_line(exc)}"
        return EXIT_USAGE, f"Postgres refused the input: {first_line(exc)}"
    if isinstance(exc, OverflowError):
        return EXIT_USAGE, "a date or number is out of range"
    if isinstance(exc, RecursionError):
        return EXIT_USAGE, "the input is nested too deeply"
    if isinstance(exc, OSError):
        return EXIT_UNAVAILABLE, f"{type(exc).__name__}: {first_line(exc)}"
    return EXIT_NOT_DONE, (f"unexpected {type(exc).__name__}: {first_line(exc)} "
                           "(set REMINDERS_DEBUG=1 for the traceback)")


