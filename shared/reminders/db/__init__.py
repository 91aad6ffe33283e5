"""The one place that talks to psycopg: connections, named queries, error translation."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row

from reminders.config import check_schema
from reminders.db.queries import SERVICE, query
from reminders.errors import (
    AuthenticationFailed,
    ConfigError,
    Conflict,
    ConnectionLost,
    DatabaseUnavailable,
    InvalidInput,
    NotFound,
    QuotaExceeded,
)

Row = dict[str, Any]
Params = Mapping[str, Any] | Sequence[Any] | None
Connection = psycopg.Connection[Any]
T = TypeVar("T")

__all__ = ["Connection", "Row", "Step", "connect", "each_alone", "execute", "fetch_all",
           "fetch_one", "retrying", "transaction"]

class _SecondPipelineError(logging.Filter):
    """psycopg logs "error ignored terminating <psycopg.Pipeline [BAD]>" when a pipeline
    fails to close while an error already leaves it (a connection that died mid-batch): that
    first error is the one the service reports, in its own words, so this second line is
    dropped. Every other psycopg record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg == "error ignored terminating %r: %s" and record.args
                    and isinstance(record.args, tuple)
                    and isinstance(record.args[0], psycopg.Pipeline))


logging.getLogger("psycopg").addFilter(_SecondPipelineError())

# Called with a statement's name before it runs. Tests install one to pause an actor between
# two statements while another runs; it is None in production.
before_statement: Callable[[str], None] | None = None


def connect(url: str, *, prepare: bool = False, application_name: str = "reminders",
            readable_instants: bool = False, connect_timeout: int = 10) -> Connection:
    """Open an autocommit connection with dict rows; :func:`transaction` groups work.

    Nothing but the application name goes in the startup packet: RDS Proxy refuses libpq's
    ``options`` ("RDS Proxy currently doesn't support command-line options"), and so does the
    local stack's pooler. The session's defaults (``search_path``, lock and statement timeouts)
    are the login's role settings, which the migrator writes (:func:`configure_login`).
    ``prepare`` turns psycopg's automatic server-side prepared statements on: only for a
    connection that reaches Postgres directly (behind a pooler they pin the connection, or
    break, since the next transaction may run on another server connection).
    ``readable_instants``: an instant Python cannot hold (before year 1, after 9999,
    ``infinity``; written by hand or before the entry checks) loads as an
    :class:`~reminders.db.instants.UnreadableInstant` instead of failing the whole read: for
    the operator's reads, which show every row. ``connect_timeout``: seconds to wait for the
    server (a shell's completion waits one)."""
    try:
        conn: Connection = psycopg.connect(
            url,
            autocommit=True,
            row_factory=dict_row,
            prepare_threshold=5 if prepare else None,
            application_name=application_name,
            connect_timeout=connect_timeout,
        )
    except psycopg.OperationalError as exc:
        # Postgres says "password authentication failed"; a pooler may refuse the SCRAM
        # exchange itself ("SASL authentication failed", with no SQLSTATE).
        if exc.sqlstate in ("28P01", "28000") or any(
                words in str(exc) for words in ("password authentication failed",
                                                "SASL authentication failed")):
            raise AuthenticationFailed(f"Postgres refused the credentials: "
                                       f"{_first_line(exc)}") from exc
        raise DatabaseUnavailable(f"cannot connect to Postgres: {_first_line(exc)}") from exc
    except psycopg.ProgrammingError as exc:
        raise ConfigError(f"DATABASE_URL is not a valid connection string: "
                          f"{_first_line(exc)}") from exc
    if readable_instants:
        from reminders.db.instants import load_every_instant

        load_every_instant(conn)
    return conn


@dataclass(frozen=True)
class SessionDefaults:
    """What every session of a login starts with (its role settings in this database)."""

    schema: str
    lock_timeout_ms: int = 5000
    statement_timeout_ms: int = 30_000
    # A session idle inside a transaction this long is ended (a client that died between
    # statements would otherwise hold its row locks until TCP noticed).
    idle_in_transaction_timeout_ms: int = 60_000


def configure_login(conn: Connection, defaults: SessionDefaults, role: str | None = None) -> None:
    """Make ``defaults`` the role settings of ``role`` (the current user when None) in the
    connection's database: its ``search_path`` is the service's schema, and nothing waits on a
    lock or a statement without bound. They apply to the sessions the login opens from now on
    (a pooler's open server connections keep what they started with until they are renewed)."""
    from psycopg import sql

    who = sql.SQL("current_user") if role is None else sql.Identifier(role)
    database = conn.execute("select current_database() as name").fetchone()
    assert database is not None
    settings = {"search_path": check_schema(defaults.schema),
                "lock_timeout": f"{int(defaults.lock_timeout_ms)}ms",
                "statement_timeout": f"{int(defaults.statement_timeout_ms)}ms",
                "idle_in_transaction_session_timeout":
                    f"{int(defaults.idle_in_transaction_timeout_ms)}ms"}
    with translate_errors():
        for name, value in settings.items():
            conn.execute(sql.SQL("alter role {} in database {} set {} = {}").format(
                who, sql.Identifier(database["name"]), sql.Identifier(name),
                sql.Literal(value)))


def check_session(conn: Connection, expected: SessionDefaults) -> list[str]:
    """Raise :class:`ConfigError` when the session's ``search_path`` does not start with the
    service's schema (the login's role settings are missing in this database); return how its
    timeouts differ from ``expected`` (empty when they agree)."""
    row = fetch_one(conn, "session_defaults")
    assert row is not None
    first = str(row["search_path"]).split(",")[0].strip().strip('"')
    if first != expected.schema:
        raise ConfigError(
            f"this login's search_path is {row['search_path']!r}, not the service's schema "
            f"{expected.schema!r}: its role settings are missing in this database. The "
            f"migrations write them (reminders migrate, or the stack's migrations resource); by "
            f"hand: ALTER ROLE <login> IN DATABASE <database> SET search_path = "
            f"{expected.schema}")
    differ = []
    for name in ("lock_timeout_ms", "statement_timeout_ms"):
        if int(row[name]) != getattr(expected, name):
            differ.append(f"{name} is {row[name]}, configured {getattr(expected, name)}")
    return differ


@contextmanager
def transaction(conn: Connection) -> Iterator[Connection]:
    """A transaction (or a savepoint inside the caller's), with errors translated."""
    with translate_errors(), conn.transaction():
        yield conn


def retrying(work: Callable[[], T], *, attempts: int = 3) -> T:
    """Run one of the service's own transactions, again (at most ``attempts`` times in all)
    when Postgres aborted it for a deadlock or a serialization failure."""
    for left in range(attempts - 1, -1, -1):
        try:
            return work()
        except Conflict as exc:
            if not exc.retryable or left == 0:
                raise
    raise AssertionError("unreachable")


@contextmanager
def translate_errors() -> Iterator[None]:
    try:
        yield
    except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure) as exc:
        raise Conflict(f"Postgres aborted the transaction: {_first_line(exc)}",
                       retryable=True) from exc
    except psycopg.errors.LockNotAvailable as exc:
        raise Conflict(f"rows are held by another transaction: {_first_line(exc)}",
                       retryable=False) from exc
    except psycopg.errors.QueryCanceled as exc:
        raise Conflict(f"statement timed out: {_first_line(exc)}", retryable=False) from exc
    except psycopg.errors.ForeignKeyViolation as exc:
        raise NotFound(_constraint_message(exc)) from exc
    except (psycopg.errors.CheckViolation, psycopg.errors.UniqueViolation,
            psycopg.errors.InvalidDatetimeFormat, psycopg.errors.InvalidTextRepresentation,
            psycopg.errors.StringDataRightTruncation, psycopg.errors.NotNullViolation,
            psycopg.errors.IntervalFieldOverflow, psycopg.errors.DatetimeFieldOverflow,
            psycopg.errors.NumericValueOutOfRange) as exc:
        raise InvalidInput(_constraint_message(exc)) from exc
    except psycopg.OperationalError as exc:
        if is_disconnect(exc):
            raise ConnectionLost(f"Postgres connection lost: {_first_line(exc)}") from exc
        raise DatabaseUnavailable(f"Postgres: {_first_line(exc)}") from exc
    except psycopg.Error as exc:
        refused = SQL_API_ERRORS.get(exc.sqlstate or "")
        if refused is None:
            raise
        raise refused(exc.diag.message_primary or _first_line(exc)) from exc


# What a server or a proxy says as it ends a session: an administrator's or a crash's shutdown,
# and SQLSTATE class 08 (connection exception).
_DISCONNECT_STATES = ("57P01", "57P02", "57P03")


def is_disconnect(exc: BaseException) -> bool:
    """Whether a psycopg error means the connection itself is gone, rather than a statement
    failing on a live one: the session ended by the server (``pg_terminate_backend``, a
    restart, a failover), or no SQLSTATE at all (the socket closed, the connection already
    broken or closed)."""
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _DISCONNECT_STATES


def alive(conn: Connection, *, ping: bool = False) -> bool:
    """Whether an idle connection can take the next statement. Without ``ping`` this costs no
    round trip: a connection closed or broken is not; nor, after a ping, is one whose socket
    has something to read while it is idle (a server ending a session sends its reason and
    closes the socket, so a connection dropped a moment ago is found before any statement
    goes out on it). With ``ping`` (one idle for long, which a proxy may close without a
    word), a ping decides."""
    if conn.closed or conn.broken:
        return False
    if not ping and not _readable(conn):
        return True
    try:
        fetch_one(conn, "ping")
    except DatabaseUnavailable:
        return False
    return True


def _readable(conn: Connection) -> bool:
    import select

    try:
        ready, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError, psycopg.OperationalError):
        return True  # no socket to look at: let the ping say
    return bool(ready)


# The SQLSTATEs the SQL API (migration 0009) raises, as the domain errors they mean.
SQL_API_ERRORS: dict[str, type[InvalidInput] | type[NotFound]] = {
    "RM400": InvalidInput,  # bad input: the message names the argument
    "RM409": InvalidInput,  # refused by the current state (same key, another request; cancelled)
    "RM404": NotFound,      # no such schedule or delivery key for the tenant
    "RM403": InvalidInput,  # the login is not mapped to a tenant
    "RM429": QuotaExceeded,  # over a tenant's limit (the message names it and its value)
}


def fetch_all(conn: Connection, name: str, params: Params = None, *,
              source: str = SERVICE, every_instant: bool = False) -> list[Row]:
    """A named statement's rows. ``every_instant``: each row loads on its own terms, an
    instant Python cannot hold as an :class:`~reminders.db.instants.UnreadableInstant` (for
    the readers that park such a row and go on with the rest)."""
    _before(name)
    with translate_errors(), conn.cursor() as cur:
        if every_instant:
            _every_instant(cur)
        cur.execute(query(name, source), params)
        return list(cur.fetchall()) if cur.description else []


def fetch_one(conn: Connection, name: str, params: Params = None, *,
              source: str = SERVICE, every_instant: bool = False) -> Row | None:
    """A named statement's first row; ``every_instant`` as for :func:`fetch_all`."""
    _before(name)
    with translate_errors(), conn.cursor() as cur:
        if every_instant:
            _every_instant(cur)
        cur.execute(query(name, source), params)
        return cur.fetchone() if cur.description else None


def execute(conn: Connection, name: str, params: Params = None, *,
            source: str = SERVICE) -> int:
    """Run a named statement (of ``queries.sql``, or of ``source``); return the number of rows
    it touched."""
    _before(name)
    with translate_errors(), conn.cursor() as cur:
        cur.execute(query(name, source), params)
        return cur.rowcount


@contextmanager
def pipeline(conn: Connection) -> Iterator[psycopg.Pipeline]:
    """Statements submitted inside go out together: reading a result waits for all of them at
    once (one round trip where each would cost its own). On an autocommit connection they form
    one implicit transaction up to the next :func:`sync` or the end of the block, which commits
    them (a failure rolls all of them back); row locks are held across results read between."""
    with translate_errors(), conn.pipeline() as pipe:
        try:
            yield pipe
        except BaseException:
            # Leaving syncs, and a sync commits what was submitted: fail it instead, so
            # nothing half-done is kept.
            with contextlib.suppress(psycopg.Error):
                conn.execute(query("pipeline_abandon").encode())
            raise


@dataclass(frozen=True)
class Step:
    """A named statement for :func:`each_alone`: its parameters, its statement timeout
    (seconds, for its transaction alone) and whether each row loads on its own terms."""

    name: str
    params: Params = None
    timeout: float | None = None
    every_instant: bool = False


def each_alone(conn: Connection, steps: Sequence[Step]) -> list[list[Row]]:
    """Each step's rows, as if each ran in a transaction of its own, one after the other,
    each through :func:`retrying`: they go out together in a pipeline, each between its own
    BEGIN and COMMIT, for one round trip where each would cost one (three with a timeout).
    A step that fails ends the pipeline there (Postgres skips the rest up to the Sync), and
    the steps before it stay committed. A deadlock or a serialization failure runs the steps
    from the failed one on one at a time, as :func:`retrying` would have; any other error is
    raised, the steps after it not run, as they would not have been alone. On a connection
    already in a transaction, they run one at a time."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        return [retrying(lambda step=step: _alone(conn, step))  # type: ignore[misc]
                for step in steps]
    cursors: list[psycopg.Cursor[Any]] = []
    failure: Conflict | None = None
    try:
        with translate_errors(), conn.pipeline():
            for step in steps:
                _before(step.name)  # before its BEGIN: a hook that raises leaves none open
                conn.execute(query("transaction_begin").encode())
                if step.timeout is not None:
                    conn.execute(query("transaction_statement_timeout"),
                                 {"value": _milliseconds(step.timeout)})
                cursor = conn.cursor()
                if step.every_instant:
                    _every_instant(cursor)
                cursor.execute(query(step.name), step.params)
                conn.execute(query("transaction_commit").encode())
                cursors.append(cursor)
    except Conflict as exc:
        if not exc.retryable:
            _rollback_failed(conn)
            raise
        failure = exc
    except BaseException:
        _rollback_failed(conn)
        raise
    done: list[list[Row]] = []
    for cursor in cursors:
        if cursor.pgresult is None:  # no result: this step failed, or never ran
            break
        done.append(list(cursor.fetchall()) if cursor.description else [])
    if failure is not None:
        _rollback_failed(conn)
    for step in steps[len(done):]:
        done.append(retrying(lambda step=step: _alone(conn, step)))  # type: ignore[misc]
    return done


def _rollback_failed(conn: Connection) -> None:
    """End the transaction a failed step of :func:`each_alone` left open (Postgres skipped
    its COMMIT), so the connection is idle again; nothing to do on a lost connection."""
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
        with contextlib.suppress(psycopg.Error):
            conn.execute(query("transaction_rollback").encode())


def _milliseconds(seconds: float) -> str:
    return f"{max(1, int(seconds * 1000))}ms"


def _alone(conn: Connection, step: Step) -> list[Row]:
    if step.timeout is None:
        return fetch_all(conn, step.name, step.params, every_instant=step.every_instant)
    with transaction(conn):
        execute(conn, "transaction_statement_timeout", {"value": _milliseconds(step.timeout)})
        return fetch_all(conn, step.name, step.params, every_instant=step.every_instant)


def sync(pipe: psycopg.Pipeline) -> None:
    """Commit what the pipeline submitted so far and wait for it (one round trip)."""
    with translate_errors():
        pipe.sync()


class Pending:
    """A statement submitted in a pipeline, its result not read yet."""

    def __init__(self, cursor: psycopg.Cursor[Any]) -> None:
        self._cursor = cursor

    def rows(self) -> list[Row]:
        """The rows it returned (only for a query, or a write with RETURNING)."""
        with translate_errors():
            return list(self._cursor.fetchall())


def submit(conn: Connection, name: str, params: Params = None, *,
           every_instant: bool = False) -> Pending:
    """Send a named statement without waiting for it (inside :func:`pipeline`);
    ``every_instant`` as for :func:`fetch_all`."""
    _before(name)
    cursor = conn.cursor()
    if every_instant:
        _every_instant(cursor)
    with translate_errors():
        cursor.execute(query(name), params)
    return Pending(cursor)


def _every_instant(cursor: psycopg.Cursor[Any]) -> None:
    from reminders.db.instants import load_every_instant

    load_every_instant(cursor)


def _before(name: str) -> None:
    if before_statement is not None:
        before_statement(name)


def execute_script(conn: Connection, sql: str) -> None:
    with translate_errors(), conn.cursor() as cur:
        cur.execute(sql.encode())


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _constraint_message(exc: psycopg.Error) -> str:
    diag = exc.diag
    where = f" ({diag.constraint_name})" if diag.constraint_name else ""
    return f"{diag.message_primary or _first_line(exc)}{where}"


def with_database(url: str, name: str) -> str:
    """The same server, another database, in the form ``url`` has (a URL stays a URL)."""
    from psycopg.conninfo import make_conninfo

    other = make_conninfo(url, dbname=name)
    return as_url(other) if url.startswith(("postgresql://", "postgres://")) else other


def as_url(conninfo: str) -> str:
    """``conninfo`` (``key=value`` pairs or a URL) as a ``postgresql://`` URL, which psql,
    libpq, psycopg and Node's ``pg`` all read the same way (``pg`` reads ``key=value`` text as
    a host name). Parameters a URL has no place for go in its query, percent-encoded."""
    from urllib.parse import quote, urlencode

    from psycopg.conninfo import conninfo_to_dict

    params = {k: str(v) for k, v in conninfo_to_dict(conninfo).items() if v is not None}
    user, password = params.pop("user", ""), params.pop("password", "")
    host, port = params.pop("host", ""), params.pop("port", "")
    dbname = params.pop("dbname", "")
    auth = quote(user, safe="") + (":" + quote(password, safe="") if password else "")
    if host.startswith("/") or "," in host:  # a socket directory or several hosts
        params["host"], host = host, ""
    netloc = (auth + "@" if auth else "") + host + (":" + port if port else "")
    query = "?" + urlencode(params) if params else ""
    return f"postgresql://{netloc}/{quote(dbname, safe='')}{query}"


def create_database(url: str, name: str, template: str | None = None) -> str:
    """Create a database (optionally cloned from a template) if absent; return its URL."""
    from psycopg import sql

    with connect(url) as conn:
        exists = conn.execute("select 1 from pg_database where datname = %s", (name,)).fetchone()
        if not exists:
            stmt = sql.SQL("create database {}").format(sql.Identifier(name))
            if template:
                stmt = sql.SQL("create database {} template {}").format(
                    sql.Identifier(name), sql.Identifier(template))
            conn.execute(stmt)
    return with_database(url, name)


def drop_database(url: str, name: str) -> None:
    """Drop a database if present, ending the sessions still connected to it."""
    from psycopg import sql

    with connect(url) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(
            sql.Identifier(name)))
