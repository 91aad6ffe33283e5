"""What the counters of ``delivery_counts`` (migration 0011) cost the hot path: the scanner's
lease statement (a pass of 100) and a consumer batch's three writes (mark received, start the
attempts, settle; 10 rows), timed with the counting triggers enabled and disabled in
alternation on one database, so the machine's noise falls on both sides alike; and what the
trigger functions' fixed search path (migration 0018) costs the same writes, timed alike."""

from __future__ import annotations

import statistics
import time
from datetime import timedelta
from typing import Any

from reminders import db
from tests.bench.support import NOW, Cluster, backlog, fresh_db

ROUNDS = 60  # alternating: 30 with the triggers, 30 without
LEASE_BATCH = 100
CONSUMER_BATCH = 10

COUNTS_TRIGGERS = ("delivery_counts_inserted", "delivery_counts_updated",
                   "delivery_counts_deleted", "delivery_counts_truncated")
TRIGGER_FUNCTIONS = (*COUNTS_TRIGGERS, "due_queue_inserted", "due_queue_changed",
                     "due_queue_deleted", "due_queue_truncated")


def _counts_on(conn: db.Connection, on: bool) -> None:
    for trigger in COUNTS_TRIGGERS:  # the due set's own triggers stay on
        conn.execute(f"alter table deliveries {'enable' if on else 'disable'} "
                     f"trigger {trigger}")


def _search_path_on(conn: db.Connection, on: bool) -> None:
    for function in TRIGGER_FUNCTIONS:
        conn.execute(f"alter function {function}() "
                     + ("set search_path from current" if on else "reset search_path"))


def bench_counts_trigger(server: Cluster) -> dict[str, Any]:
    return _alternating(server, _counts_on, "with_counts")


def bench_trigger_search_path(server: Cluster) -> dict[str, Any]:
    """The same writes with the trigger functions' fixed search path (migration 0018) and
    without it (names resolved on the writer's search path, as before)."""
    return _alternating(server, _search_path_on, "with_search_path")


def _alternating(server: Cluster, toggle: Any, label: str) -> dict[str, Any]:
    conn, _ = fresh_db(server, "bench_counts")
    backlog(conn, due_rows=ROUNDS * LEASE_BATCH + 1_000, done_rows=100_000)
    spent: dict[str, list[float]] = {f"{what}_{side}": [] for what in ("lease", "consumer")
                                     for side in ("on", "off")}
    now = NOW
    for n in range(ROUNDS + 2):
        side = "on" if n % 2 == 0 else "off"
        toggle(conn, side == "on")
        start = time.perf_counter()
        leased = db.fetch_all(conn, "lease_due", {"now": now, "share": LEASE_BATCH,
                                                  "batch": LEASE_BATCH, "lease_seconds": 300})
        lease_s = time.perf_counter() - start
        consumer_s = 0.0
        for i in range(0, len(leased), CONSUMER_BATCH):
            part = leased[i:i + CONSUMER_BATCH]
            ids = [r["id"] for r in part]
            tokens = [r["lease_token"] for r in part]
            start = time.perf_counter()
            db.execute(conn, "deliveries_take_leases",
                       {"ids": ids, "tokens": tokens, "now": now})
            with db.transaction(conn):
                db.fetch_all(conn, "attempts_start", {
                    "now": now, "ids": ids, "tokens": tokens,
                    "deadlines": [now + timedelta(seconds=30)] * len(ids)})
            db.fetch_all(conn, "deliveries_settle", {
                "now": now, "ids": ids, "tokens": tokens, "states": ["sent"] * len(ids),
                "reasons": [None] * len(ids), "due_ats": [None] * len(ids),
                "attempt_nos": [1] * len(ids)})
            consumer_s += time.perf_counter() - start
        if n >= 2:  # the first of each side warms up
            spent[f"lease_{side}"].append(lease_s * 1000)
            spent[f"consumer_{side}"].append(consumer_s * 1000 / (len(leased) / CONSUMER_BATCH))
    toggle(conn, True)
    conn.close()
    med = {k: statistics.median(v) for k, v in spent.items()}
    return {
        f"lease_100_ms_{label}": med["lease_on"],
        "lease_100_ms_without": med["lease_off"],
        "lease_with_over_without": med["lease_on"] / med["lease_off"],
        f"consumer_writes_10_ms_{label}": med["consumer_on"],
        "consumer_writes_10_ms_without": med["consumer_off"],
        "consumer_with_over_without": med["consumer_on"] / med["consumer_off"],
    }
