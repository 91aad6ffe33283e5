"""How many times a piece of work waits for Postgres, counted from libpq's protocol trace: the
tests assert it, the benchmark reports it."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from typing import Any

from reminders import db


def count_round_trips(conn: db.Connection, work: Callable[[], Any]) -> int:
    """Client messages that wait for the server: a Sync, a simple Query, or a Flush that asks
    for results (one sent right after a Sync waits for nothing more)."""
    sent = [kind for kind, _ in traced_messages(conn, work)]
    return sum(1 for i, kind in enumerate(sent)
               if kind in ("Sync", "Query") or (kind == "Flush" and sent[i - 1] != "Sync"))


# What makes RDS Proxy pin a client to one server connection (RDS user guide, "Avoiding
# pinning an RDS Proxy"), and what a transaction pooler breaks instead: state that outlives a
# transaction. SET LOCAL, set_config(..., true) and pg_advisory_xact_lock end with theirs.
_PINS = [
    ("SET", re.compile(r"^\s*set\s+(?!local\b)(session\s+)?\w", re.I)),
    ("RESET", re.compile(r"^\s*reset\b", re.I)),
    ("PREPARE/EXECUTE/DEALLOCATE", re.compile(r"^\s*(prepare|execute|deallocate)\b", re.I)),
    ("DISCARD", re.compile(r"^\s*discard\b", re.I)),
    ("LISTEN", re.compile(r"^\s*(listen|unlisten)\b", re.I)),
    ("temporary object", re.compile(r"\bcreate\s+(global\s+|local\s+)?(temp|temporary)\b", re.I)),
    ("cursor WITH HOLD", re.compile(r"\bwith\s+hold\b", re.I)),
    ("session advisory lock",
     re.compile(r"\bpg_(try_)?advisory_(un)?lock(_shared|_all)?\s*\(", re.I)),
    ("set_config for the session", re.compile(r"\bset_config\s*\([^;]*,\s*false\s*\)", re.I)),
]


def traced_messages(conn: db.Connection, work: Callable[[], Any]) -> list[tuple[str, str]]:
    """(message type, the rest of its trace line) for every message the client sent."""
    with tempfile.TemporaryFile("w+") as trace:
        conn.pgconn.trace(trace.fileno())
        try:
            work()
        finally:
            conn.pgconn.untrace()
        trace.seek(0)
        lines = trace.read().splitlines()
    sent = []
    for line in lines:
        fields = line.split("\t")
        if "F" not in fields[:2]:
            continue
        at = fields.index("F")
        if len(fields) > at + 2:
            kind, _, rest = fields[at + 2].partition(" ")
            sent.append((kind, "\t".join([rest, *fields[at + 3:]]).strip()))
    return sent


def pins(messages: list[tuple[str, str]]) -> list[str]:
    """What in ``messages`` lives past its transaction: each as "what: the statement"."""
    found = []
    for kind, rest in messages:
        if kind == "Parse":
            name, _, text = rest.partition(" ")
            if name != '""':
                found.append(f"named prepared statement {name}: {text[:120]}")
        elif kind == "Query":
            text = rest
        else:
            continue
        sql = text.strip().strip('"').replace("\\x0a", "\n")
        for what, pattern in _PINS:
            if pattern.search(sql):
                found.append(f"{what}: {sql[:120]}")
    return found


def count_pins(conn: db.Connection, work: Callable[[], Any]) -> list[str]:
    """The statements of ``work`` on ``conn`` that would pin an RDS Proxy connection."""
    return pins(traced_messages(conn, work))
