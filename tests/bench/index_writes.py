"""What the console's indexes on ``deliveries`` cost the writes that make and deliver reminders:
the seven full indexes that let its Deliveries page read a page in every filter and order
(migration 0025's four by due and by last change, alone and per tenant; 0030's by recipient;
0033's by kind and by channel)
and the partial ones of parked rows (0029, 0030, 0032: written only when a row is parked).

Two databases built alike, one with those indexes and one without, written in alternation
(the order swapped each round, so the machine's noise falls on both sides alike): a
``schedule`` call of 1,000 recipients through the Python API (the insert path), and a lease
pass of 100 followed by the consumer's three writes in batches of 10 (mark received, start
the attempts, settle). Two measures: milliseconds, and WAL bytes (the server's insert
position before and after, the only writer then being the benchmark), which the machine's
load does not move."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

from reminders import db, schedules
from tests.bench.support import NOW, URL, Cluster, backlog, fresh_db

ROUNDS = 20  # a side each round; the first round warms up
RECIPIENTS = 1000
LEASE_BATCH = 100
CONSUMER_BATCH = 10
CONSOLE_INDEXES = (
    "deliveries_browse_due", "deliveries_browse_updated", "deliveries_browse_tenant_due",
    "deliveries_browse_tenant_updated", "deliveries_browse_recipient_due",
    "deliveries_browse_kind_due", "deliveries_browse_channel_due",  # full
    "deliveries_parked_tenant_state", "deliveries_parked_state",  # parked rows only
    "deliveries_parked_kind_state", "deliveries_parked_tenant_kind_state",
    "deliveries_parked_recipient_state", "deliveries_parked_channel_state",
)


def _wal_and_ms(conn: db.Connection, work: Callable[[], Any]) -> tuple[float, float]:
    """WAL bytes and milliseconds ``work`` took."""
    before = conn.execute("select pg_current_wal_insert_lsn() as at").fetchone()
    start = time.perf_counter()
    work()
    ms = 1000 * (time.perf_counter() - start)
    after = conn.execute("select pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s) as n",
                         (before["at"] if before else None,)).fetchone()
    return float(after["n"] if after else 0), ms


def _schedule(conn: db.Connection, key: str) -> None:
    with db.transaction(conn):
        result = schedules.schedule(conn, tenant="fan", key=key, channel="webhook", to=URL,
                                    recipients=[f"r{i}" for i in range(RECIPIENTS)],
                                    at=NOW + timedelta(days=1), now=NOW)
    assert result.created


def _deliver(conn: db.Connection) -> None:
    leased = db.fetch_all(conn, "lease_due", {"now": NOW, "share": LEASE_BATCH,
                                              "batch": LEASE_BATCH, "lease_seconds": 300})
    assert len(leased) == LEASE_BATCH, len(leased)
    for i in range(0, len(leased), CONSUMER_BATCH):
        ids = [r["id"] for r in leased[i:i + CONSUMER_BATCH]]
        tokens = [r["lease_token"] for r in leased[i:i + CONSUMER_BATCH]]
        db.execute(conn, "deliveries_take_leases", {"ids": ids, "tokens": tokens, "now": NOW})
        with db.transaction(conn):
            db.fetch_all(conn, "attempts_start", {
                "now": NOW, "ids": ids, "tokens": tokens,
                "deadlines": [NOW + timedelta(seconds=30)] * len(ids)})
        db.fetch_all(conn, "deliveries_settle", {
            "now": NOW, "ids": ids, "tokens": tokens, "states": ["sent"] * len(ids),
            "reasons": [None] * len(ids), "due_ats": [None] * len(ids),
            "attempt_nos": [1] * len(ids)})


def bench_console_indexes(server: Cluster) -> dict[str, Any]:
    sides: dict[str, db.Connection] = {}
    for side in ("with", "without"):
        conn, _ = fresh_db(server, f"bench_ix_{side}")
        backlog(conn, due_rows=ROUNDS * LEASE_BATCH + 1_000, done_rows=100_000)
        if side == "without":
            for name in CONSOLE_INDEXES:
                conn.execute(f"drop index {name}")
        conn.execute("vacuum analyze deliveries")
        sides[side] = conn
    got: dict[str, list[float]] = {f"{what}_{unit}_{side}": [] for what in ("schedule", "deliver")
                                   for unit in ("wal", "ms") for side in sides}
    for n in range(ROUNDS + 1):
        for side in ("with", "without") if n % 2 else ("without", "with"):
            conn = sides[side]
            wal, ms = _wal_and_ms(conn, partial(_schedule, conn, f"fan-{n}"))
            if n:
                got[f"schedule_wal_{side}"].append(wal / RECIPIENTS)
                got[f"schedule_ms_{side}"].append(ms / RECIPIENTS)
            wal, ms = _wal_and_ms(conn, partial(_deliver, conn))
            if n:
                got[f"deliver_wal_{side}"].append(wal / LEASE_BATCH)
                got[f"deliver_ms_{side}"].append(ms / LEASE_BATCH)
    for conn in sides.values():
        conn.close()
    med = {k: statistics.median(v) for k, v in got.items()}
    figures: dict[str, Any] = {"indexes": list(CONSOLE_INDEXES), "rounds": ROUNDS,
                               "table_rows": ROUNDS * LEASE_BATCH + 101_000}
    for what, per in (("schedule", "recipient"), ("deliver", "delivery")):
        for unit, label in (("wal", "wal_bytes"), ("ms", "ms")):
            with_, without = med[f"{what}_{unit}_with"], med[f"{what}_{unit}_without"]
            figures[f"{what}_{label}_per_{per}_with"] = with_
            figures[f"{what}_{label}_per_{per}_without"] = without
            figures[f"{what}_{label}_with_over_without"] = with_ / without
    return figures
