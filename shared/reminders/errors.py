"""Domain errors. Nothing above the data layer sees a psycopg or botocore exception type."""

from __future__ import annotations


class RemindersError(Exception):
    """Base of every error this package raises on purpose."""


class InvalidInput(RemindersError, ValueError):
    """Input was rejected; the message names what was wrong. Nothing was written."""


class QuotaExceeded(InvalidInput):
    """A tenant's limit refused the request (pending deliveries, schedules a minute); the
    message names the limit and its value. Nothing was written."""


class NotFound(RemindersError, LookupError):
    """A named thing (delivery key, schedule, kind, endpoint) does not exist."""


class ConfigError(RemindersError):
    """A setting is missing or malformed; raised once, at start-up."""


class DatabaseUnavailable(RemindersError):
    """Postgres could not be reached or dropped the connection."""


class ConnectionLost(DatabaseUnavailable):
    """An open connection was found dropped (the server ended the session, a proxy closed it,
    the network went). A statement it failed on may or may not have run: only work that has
    written nothing yet may go again on a new connection."""


class AuthenticationFailed(DatabaseUnavailable):
    """Postgres refused the credentials (a rotated password, for one)."""


class Conflict(RemindersError):
    """Another transaction held or changed the rows (a deadlock, a serialization failure, a
    lock or statement timeout). Nothing was written; ``retryable`` says trying again at once
    can succeed. Never reported as the database being down."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class CommandFailed(RemindersError):
    """A command run elsewhere (the operations function) failed there; ``code`` is the exit
    status it reported, and the message its one line."""

    def __init__(self, message: str, *, code: int) -> None:
        super().__init__(message)
        self.code = code
