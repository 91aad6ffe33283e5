"""Faults the tests inject into a connection from outside the code under test."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable

from reminders import db


def drop(conn: db.Connection) -> None:
    """Drop ``conn``'s TCP connection as a proxy does when it closes a client (an idle timeout,
    its maintenance, a failover): the client's next read finds the connection gone. Through a
    pooler, ending the server's backend would not do: the pooler hides it from an idle client
    and hands the client another server connection."""
    sock = socket.socket(fileno=os.dup(conn.pgconn.socket))
    try:
        sock.shutdown(socket.SHUT_RDWR)
    finally:
        sock.close()


def labelled(url: str) -> tuple[db.Connection, str]:
    """A connection with an application name of its own: how another session finds its server
    backend in pg_stat_activity (through a pooler, the client's backend pid is the pooler's)."""
    label = f"t-{uuid.uuid4().hex[:12]}"
    return db.connect(url, application_name=label), label


def waits_on_a_lock(observer: db.Connection, label: str,
                    still: Callable[[], bool] = lambda: True, seconds: float = 10) -> bool:
    """True once the session named ``label`` waits on a lock (bounded); False when ``still``
    says the waiter is gone, or the time is up."""
    deadline = time.monotonic() + seconds
    while still() and time.monotonic() < deadline:
        row = observer.execute("select wait_event_type from pg_stat_activity"
                               " where application_name = %s", (label,)).fetchone()
        if row and row["wait_event_type"] == "Lock":
            return True
        time.sleep(0.01)
    return False
