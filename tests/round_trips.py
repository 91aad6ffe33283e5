"""How many times a piece of work waits for Postgres, counted from libpq's protocol trace: the
tests assert it, the benchmark reports it."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

from reminders import db


def count_round_trips(conn: db.Connection, work: Callable[[], Any]) -> int:
    """Client messages that wait for the server: a Sync, a simple Query, or a Flush that asks
    for results (one sent right after a Sync waits for nothing more)."""
    with tempfile.TemporaryFile("w+") as trace:
        conn.pgconn.trace(trace.fileno())
        try:
            work()
        finally:
            conn.pgconn.untrace()
        trace.seek(0)
        sent = [f[3].split(" ")[0] for f in (line.split("\t") for line in
                                               trace.read().splitlines())
                if len(f) > 3 and f[1] == "F"]
    return sum(1 for i, kind in enumerate(sent)
               if kind in ("Sync", "Query") or (kind == "Flush" and sent[i - 1] != "Sync"))
