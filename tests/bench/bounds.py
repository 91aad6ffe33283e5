"""The bounds of invariant 6 as figures: the buffers each statement touches (EXPLAIN (ANALYZE,
BUFFERS), planning apart, rolled back), at a small case and at a large one that differs only in
what the statement has no work for. Each ratio large / small should stay within 1.2.

- ``lease``: a lease pass (batch 100), the tenant count, the lateness and the next due time,
  with 20 tenants holding due work, then with 20,000 idle tenants more.
- ``paused``: the tick's lateness, every statement ``status`` runs and the tenants list,
  without and with a paused tenant's due backlog of ``BENCH_BOUNDS_ROWS`` rows (default
  1,000,000).
- ``pacing``: ``status``'s pacing read (status_pacing) with both channels and 30 paced
  endpoints (25 throttled in the last hour, an hour of throttle counts each, sends waiting on
  every one), then with ``BENCH_BOUNDS_ENDPOINTS`` (default 10,000) endpoints more, each
  throttled in the last hour, a day of older throttle counts on every shown key, and a day's
  sends booked on every shard (many waiting).
- ``purge``: the retention purge with two kinds (kept an hour and 30 days) and ten rows of the
  short kind past their hour, without and with ``BENCH_BOUNDS_ROWS`` terminal rows of the long
  kind it keeps.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

from reminders import db, operator, schedules
from tests.bench.support import (
    NOW,
    URL,
    Cluster,
    add_rows,
    add_schedule,
    fresh_db,
    statement_reads,
    untimed,
)

LEASE = {"batch": 100, "share": 5, "lease_seconds": 300}
STATUS = ("status_breakdown", "oldest_overdue_delivery", "status_oldest_overdue",
          "status_expired_leases", "status_overdue_by")


def _rows() -> int:
    return int(os.environ.get("BENCH_BOUNDS_ROWS", "1000000"))


Reads = dict[str, dict[str, int]]


def _reads(conn: db.Connection, names: tuple[str, ...], params: dict[str, Any]) -> Reads:
    conn.execute("vacuum analyze")
    return {name: statement_reads(conn, name, params) for name in names}


def _compare(small: Reads, large: Reads) -> dict[str, Any]:
    """Per statement: the rows and index entries it read and its buffers at each size, and
    large / small of each (buffers also grow by a level of a B-tree that grew deeper, on every
    probe of it)."""
    return {name: {f"{what}_{size}": reads[name][what]
                   for what in ("rows_read", "buffers")
                   for size, reads in (("small", small), ("large", large))}
            | {"rows_read_ratio": large[name]["rows_read"]
               / max(1, small[name]["rows_read"]),
               "buffers_ratio": large[name]["buffers"] / max(1, small[name]["buffers"])}
            for name in small}


def _lease(server: Cluster) -> dict[str, Any]:
    conn, _ = fresh_db(server, "bench_bounds_lease")
    due = NOW - timedelta(minutes=5)
    for t in range(20):
        sid = add_schedule(conn, tenant=f"busy{t:02}", key=f"due-{t}", due=due)
        add_rows(conn, tenant=f"busy{t:02}", schedule_id=sid, count=99, due=due, first=2)
    names = ("lease_due", "tenants_with_due_work", "oldest_overdue", "next_due_work")
    params = {"now": NOW, "cap": 1000, **LEASE}
    small = _reads(conn, names, params)
    with untimed(conn):
        conn.execute("insert into tenants (id) select 'idle' || g from generate_series(1, 20000) g")
    large = _reads(conn, names, params)
    conn.close()
    return {"tenants_small": 20, "tenants_large": 20_020, **_compare(small, large)}


def _paused(server: Cluster) -> dict[str, Any]:
    conn, _ = fresh_db(server, "bench_bounds_paused")
    due = NOW - timedelta(minutes=5)
    for t in range(5):
        sid = add_schedule(conn, tenant=f"busy{t}", key=f"due-{t}", due=due)
        add_rows(conn, tenant=f"busy{t}", schedule_id=sid, count=19, due=due, first=2)
    held = add_schedule(conn, tenant="held", key="held", due=NOW - timedelta(hours=2))
    conn.execute("update tenants set paused = true where id = 'held'")
    names = ("oldest_overdue", "due_unreadable", *STATUS, "tenants_list")
    params = {"now": NOW, "cap": 1000, "tenant": None, "limit": 1000,
              "counted": operator.COUNTED_SCHEDULES}
    small = _reads(conn, names, params)
    started = time.perf_counter()
    add_rows(conn, tenant="held", schedule_id=held, count=_rows(), due=NOW - timedelta(hours=1),
             first=2)
    build_s = time.perf_counter() - started
    large = _reads(conn, names, params)
    conn.close()
    return {"paused_backlog": _rows(), "build_s": build_s, **_compare(small, large)}


def _endpoints() -> int:
    return int(os.environ.get("BENCH_BOUNDS_ENDPOINTS", "10000"))


def _paced(conn: db.Connection, first: int, count: int, *, throttled_ago: str) -> None:
    """``count`` paced endpoints from number ``first`` (burst 40: 4 shards each), the last
    halving ``throttled_ago`` before NOW (and up to 10 minutes more)."""
    with untimed(conn):
        conn.execute(
            "insert into channel_rates (key, rate, burst, shards, source, updated_at,"
            " factor, throttled_at, throttles) select 'webhook https://e' || g || '.example.com/',"
            " 40, 40, 4, 'set', %(now)s, 0.5, %(now)s - %(ago)s::interval"
            " - make_interval(secs => g %% 600), 3"
            " from generate_series(%(first)s::integer, %(last)s::integer) g",
            {"now": NOW, "ago": throttled_ago, "first": first, "last": first + count - 1})
        conn.execute(
            "insert into rate_shards (key, shard, tokens, refilled_at, reserved_until, minute)"
            " select c.key, s, 0, %(now)s, %(now)s, %(now)s from channel_rates c"
            " cross join generate_series(0, 3) s where c.key like 'webhook %%'"
            " on conflict (key, shard) do nothing", {"now": NOW})


def _book(conn: db.Connection, ahead: str) -> None:
    """Every endpoint's shards booked ``ahead`` of NOW: sends waiting on every one (an update
    of each shard, as a take writes it)."""
    with untimed(conn):
        conn.execute("update rate_shards set reserved_until = %(now)s + %(ahead)s::interval"
                     " where key like 'webhook %%'", {"now": NOW, "ahead": ahead})


def _throttle_counts(conn: db.Connection, keys: str, since: str, until: str) -> None:
    """Every slot of every minute from ``since`` to ``until`` before NOW counted, for the keys
    ``keys`` (a LIKE pattern) selects."""
    with untimed(conn):
        conn.execute(
            "insert into rate_throttles (key, minute, slot, throttles, last_at)"
            " select c.key, m, s, 5, m from channel_rates c"
            " cross join generate_series(date_trunc('minute', %(now)s - %(since)s::interval),"
            "   date_trunc('minute', %(now)s - %(until)s::interval), interval '1 minute') m"
            " cross join generate_series(0, 7) s where c.key like %(keys)s"
            " on conflict do nothing",
            {"now": NOW, "since": since, "until": until, "keys": keys})


def _pacing(server: Cluster) -> dict[str, Any]:
    conn, _ = fresh_db(server, "bench_bounds_pacing")
    from reminders import pacing

    for channel in ("email", "sms"):
        pacing.set_rate(conn, channel, 40.0, 40.0, NOW)
    _paced(conn, 0, 25, throttled_ago="1 minute")
    _paced(conn, 25, 5, throttled_ago="3 hours")
    _book(conn, "30 seconds")
    _throttle_counts(conn, "%", "59 minutes", "0 minutes")
    names = ("status_pacing",)
    params = {"now": NOW, "recover": 0.01, "limit": operator.PACING_ENDPOINTS_SHOWN}
    small = _reads(conn, names, params)
    started = time.perf_counter()
    _paced(conn, 30, _endpoints(), throttled_ago="12 minutes")
    _book(conn, "1 day")
    _throttle_counts(conn, "webhook https://e_.example.com/", "1 day", "61 minutes")
    _throttle_counts(conn, "webhook https://e__.example.com/", "1 day", "61 minutes")
    build_s = time.perf_counter() - started
    large = _reads(conn, names, params)
    shown = len(operator.pacing_status(conn, now=NOW))
    conn.close()
    return {"endpoints_small": 30, "endpoints_large": 30 + _endpoints(), "keys_shown": shown,
            "build_s": build_s, **_compare(small, large)}


def _purge(server: Cluster) -> dict[str, Any]:
    conn, _ = fresh_db(server, "bench_bounds_purge")
    conn.execute("insert into kinds (name, retention) values ('brief', '1 hour'),"
                 " ('kept', '30 days')")

    def terminal(kind: str, count: int, age: timedelta) -> None:
        sid = schedules.schedule(conn, tenant="acme", recipients=["seed"], channel="webhook",
                                 to=URL, at=NOW - age, now=NOW - age - timedelta(minutes=1),
                                 key=f"{kind}-{count}", kind=kind).schedule_id
        add_rows(conn, tenant="acme", schedule_id=sid, count=count, due=NOW - age, first=2,
                 state="sent")
        with untimed(conn):
            conn.execute("update deliveries set state = 'sent', updated_at = %s"
                         " where schedule_id = %s", (NOW - age, sid))

    params = {"now": NOW, "limit": 1000}
    terminal("brief", 10, timedelta(hours=2))
    small = _reads(conn, ("retention_purge",), params)
    started = time.perf_counter()
    terminal("kept", _rows(), timedelta(days=3))
    build_s = time.perf_counter() - started
    large = _reads(conn, ("retention_purge",), params)
    conn.close()
    return {"kept_terminal_rows": _rows(), "build_s": build_s, **_compare(small, large)}


def _worst(case: dict[str, Any]) -> float:
    """The largest ratio, buffers or rows read, of any statement of a case."""
    return max((float(stmt[what]) for stmt in case.values() if isinstance(stmt, dict)
                for what in ("buffers_ratio", "rows_read_ratio")), default=0.0)


def bench_bounds(server: Cluster) -> dict[str, Any]:
    """The four cases; ``worst_ratio``: the largest large / small of any statement's buffers
    or rows read, which the goal holds within 1.2."""
    cases = {"lease": _lease(server), "paused": _paused(server), "pacing": _pacing(server),
             "purge": _purge(server)}
    worst = {name: _worst(case) for name, case in cases.items()}
    return {"goal": "every buffers_ratio and rows_read_ratio <= 1.2", **cases,
            "worst_ratio": worst, "within_goal": all(w <= 1.2 for w in worst.values())}
