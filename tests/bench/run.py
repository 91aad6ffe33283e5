"""``make bench``: figures for the paths that must stay cheap, as ratios measured in one run
(shared machines are noisy; absolute times are printed for context only).

- scheduling a fan-out: one call for N recipients vs N one-recipient calls, per recipient;
- the scanner's lease statement: cost per leased row with 10x more rows in the table;
- the consumer's re-check: one query for a batch of 10 vs 10 single-row queries;
- recurrence: occurrences per second for a zoned weekly rule;
- cold start: importing each Lambda handler, against importing boto3 alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from reminders import db, schedules
from reminders.db import migrate
from reminders.local import stack
from reminders.recurrence import Recurrence

NOW = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
URL = "https://hooks.example.com/bench"


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def fresh_db(server: str, name: str) -> db.Connection:
    url = db.create_database(server, name)
    conn = db.connect(url)
    migrate.apply(conn)
    db.execute(conn, "endpoint_add", {"tenant": None, "url": URL,
                                      "secret": "whsec_" + "A" * 32})
    return conn


def bench_fan_out(server: str) -> dict[str, float]:
    conn = fresh_db(server, "bench_fanout")
    n = 2000
    bulk = timed(lambda: schedules.schedule(
        conn, tenant="t", recipients=[f"r{i}" for i in range(n)], channel="webhook", to=URL,
        at=NOW, now=NOW, key="bulk"))

    def singles() -> None:
        for i in range(n // 10):
            schedules.schedule(conn, tenant="t", recipients=[f"s{i}"], channel="webhook",
                               to=URL, at=NOW, now=NOW, key=f"single-{i}")

    single = timed(singles) * 10
    conn.close()
    return {"recipients": n, "bulk_ms_per_recipient": 1000 * bulk / n,
            "single_ms_per_recipient": 1000 * single / n,
            "single_over_bulk": single / bulk}


def bench_lease(server: str) -> dict[str, float]:
    figures: dict[str, float] = {}
    for rows in (10_000, 100_000):
        conn = fresh_db(server, f"bench_lease_{rows}")
        for part in range(0, rows, 10_000):  # calls of 10,000 (the limit is 50,000)
            schedules.schedule(conn, tenant="t",
                               recipients=[f"r{i}" for i in range(part, part + 10_000)],
                               channel="webhook", to=URL, at=NOW + timedelta(days=1), now=NOW,
                               key=f"future-{part}")
        schedules.schedule(conn, tenant="t", recipients=[f"d{i}" for i in range(1000)],
                           channel="webhook", to=URL, at=NOW, now=NOW, key="due")
        conn.execute("analyze")
        params = {"now": NOW, "batch": 1000, "budget": 100_000, "queued": 0,
                  "lease_seconds": 300, "max_empty_leases": 5}

        def lease(c: db.Connection = conn, p: dict[str, Any] = params) -> None:
            with db.transaction(c):
                leased = db.fetch_all(c, "lease_due", p)
                assert len(leased) == 1000, len(leased)

        figures[f"lease_1000_of_{rows}_ms"] = 1000 * timed(lease)
        conn.close()
    figures["lease_cost_ratio_100k_over_10k"] = (figures["lease_1000_of_100000_ms"]
                                                 / figures["lease_1000_of_10000_ms"])
    return figures


def bench_recheck(server: str) -> dict[str, float]:
    conn = fresh_db(server, "bench_recheck")
    schedules.schedule(conn, tenant="t", recipients=[f"r{i}" for i in range(1000)],
                       channel="webhook", to=URL, at=NOW, now=NOW, key="k")
    ids = [r["id"] for r in conn.execute("select id from deliveries limit 10").fetchall()]
    rounds = 200
    batched = timed(lambda: [db.fetch_all(conn, "recheck_load", {"ids": ids})
                             for _ in range(rounds)])
    single = timed(lambda: [db.fetch_all(conn, "recheck_load", {"ids": [i]})
                            for _ in range(rounds) for i in ids])
    conn.close()
    return {"batch_of_10_ms": 1000 * batched / rounds, "ten_singles_ms": 1000 * single / rounds,
            "singles_over_batch": single / batched}


def bench_recurrence() -> dict[str, float]:
    rec = Recurrence.parse("FREQ=WEEKLY;BYDAY=MO,WE,FR;BYHOUR=9;BYMINUTE=0", "Europe/Berlin",
                           "2027-01-04T09:00")
    n = 1000
    seconds = timed(lambda: rec.occurrences_after(NOW, n))
    step = timed(lambda: [rec.next_after(NOW + timedelta(days=i)) for i in range(200)])
    return {"occurrences_per_second_in_one_call": n / seconds,
            "next_after_calls_per_second": 200 / step}


def bench_cold_start() -> dict[str, float]:
    def import_ms(module: str) -> float:
        code = (f"import time; t = time.perf_counter(); import {module}; "
                "print((time.perf_counter() - t) * 1000)")
        runs = [float(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                     text=True, check=True).stdout) for _ in range(3)]
        return min(runs)

    figures = {"boto3_ms": import_ms("boto3")}
    for name in ("scanner", "consumer", "redrive"):
        figures[f"{name}_handler_ms"] = import_ms(f"functions.{name}.handler")
        figures[f"{name}_over_boto3"] = figures[f"{name}_handler_ms"] / figures["boto3_ms"]
    return figures


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="reminders-bench-") as tmp:
        server = stack.start_postgres(Path(tmp) / "pg", keep_running=False)
        results = {
            "fan_out": bench_fan_out(server),
            "lease": bench_lease(server),
            "recheck": bench_recheck(server),
            "recurrence": bench_recurrence(),
            "cold_start": bench_cold_start(),
        }
    rounded = {k: {n: round(v, 3) for n, v in fig.items()} for k, fig in results.items()}
    print(json.dumps(rounded, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
