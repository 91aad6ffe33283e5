"""One ``schedule`` call of 1, 1,000 and 45,000 recipients, through the SQL API (a login granted
``reminders_client`` and mapped to a tenant, as an application in any language calls it) and
through the Python API (``schedules.schedule`` on the service's connection), each through the
pooler, under three states of the planner's statistics: none (the tables never analysed, and
autovacuum kept off them so they stay so), empty (analysed before any row was written), full
(analysed after the calls of the first state). The figure is the time a recipient, and its
ratios: 45,000 against 1,000 recipients a call, and each state against none. Before migration
0017 a call of 45,000 took 395-613 s once statistics existed (its answer joined by nested loop
over the recipients)."""

from __future__ import annotations

import itertools
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from reminders import db, schedules
from tests.bench.support import NOW, URL, Cluster, fresh_db

Figures = dict[str, Any]
SIZES = (1, 1000, 45_000)
REPEATS = {1: 5, 1000: 3, 45_000: 1}  # calls a size and state; the median is kept
TABLES = ("tenants", "schedules", "schedule_recipients", "deliveries", "due_queue",
          "delivery_events")
SQL_SCHEDULE = ("select * from reminders.schedule(key => %s, recipients => %s,"
                " channel => 'webhook', at => %s, destination => %s)")
_keys = itertools.count()


def _analysed(server: Cluster, name: str) -> dict[str, bool]:
    """Whether each table has statistics (analysed by hand or by autovacuum)."""
    with db.connect(server.direct_url(name)) as direct:
        rows = direct.execute("""
            select relname, last_analyze is not null or last_autoanalyze is not null as done
            from pg_stat_user_tables where relname = any(%s)""", (list(TABLES),)).fetchall()
    return {r["relname"]: bool(r["done"]) for r in rows}


def _caller(server: Cluster, name: str, api: str) -> tuple[Callable[[int], int], Callable[[],
                                                                                    None]]:
    """A call of ``api`` scheduling n recipients (returns the rows answered), and a close."""
    if api == "python":
        conn = db.connect(server.url(name))

        def python_call(n: int) -> int:
            result = schedules.schedule(
                conn, tenant="app", recipients=[f"r{i}" for i in range(n)], channel="webhook",
                to=URL, at=NOW + timedelta(days=1), now=NOW, key=f"call-{next(_keys)}")
            return len(result.deliveries)

        return python_call, conn.close
    login = f"bench_app_{uuid.uuid4().hex[:8]}"
    with db.connect(server.direct_url(name)) as admin:
        admin.execute(sql.SQL("create role {} login password 'pw'").format(
            sql.Identifier(login)))
        admin.execute(sql.SQL("grant reminders_client to {}").format(sql.Identifier(login)))
        admin.execute("select reminders.grant_tenant(%s, %s)", (login, "app"))
    app = psycopg.connect(make_conninfo(server.url(name), user=login, password="pw"),
                          row_factory=dict_row, prepare_threshold=None)

    def sql_call(n: int) -> int:
        with app.transaction():  # the application's own transaction
            rows = app.execute(SQL_SCHEDULE, (f"call-{next(_keys)}",
                                              [f"r{i}" for i in range(n)],
                                              NOW + timedelta(days=1), URL)).fetchall()
        return len(rows)

    return sql_call, app.close


def _database(server: Cluster, name: str, *, analyse: bool) -> None:
    """A fresh copy whose tables autovacuum leaves alone; ``analyse``: analysed at once."""
    conn, _ = fresh_db(server, name)
    conn.close()
    with db.connect(server.direct_url(name)) as admin:
        for table in TABLES:
            admin.execute(sql.SQL("alter table {} set (autovacuum_enabled = off)").format(
                sql.Identifier(table)))
        if analyse:
            admin.execute("analyze")


def _calls(call: Callable[[int], int], label: str) -> dict[int, float]:
    """Seconds a recipient of each size's calls (the median of its calls)."""
    per = {}
    for n in SIZES:
        times = []
        for _ in range(REPEATS[n]):
            start = time.perf_counter()
            answered = call(n)
            times.append(time.perf_counter() - start)
            assert answered == n, (label, n, answered)
        per[n] = statistics.median(times) / n
    return per


def bench_schedule_call(server: Cluster) -> Figures:
    figures: Figures = {"goal": "per_recipient_45000_over_1000 <= 1.2 in every state",
                        "sizes": list(SIZES), "calls_each": REPEATS}
    for api in ("sql", "python"):
        per: dict[str, dict[int, float]] = {}
        analysed: dict[str, dict[str, bool]] = {}
        for state, name in (("none", f"bench_schedule_{api}"),
                            ("empty", f"bench_schedule_{api}_empty")):
            _database(server, name, analyse=state == "empty")
            call, close = _caller(server, name, api)
            try:
                analysed[state] = _analysed(server, name)
                per[state] = _calls(call, f"{api} {state}")
                if state == "none":  # statistics of what those calls wrote
                    with db.connect(server.direct_url(name)) as admin:
                        admin.execute("analyze")
                    analysed["full"] = _analysed(server, name)
                    per["full"] = _calls(call, f"{api} full")
                    figures.setdefault("deliveries_when_analysed", _count(server, name)
                                       - sum(n * REPEATS[n] for n in SIZES))
            finally:
                close()
        figures[api] = {
            "ms_per_recipient": {state: {str(n): 1000 * s for n, s in by.items()}
                                 for state, by in per.items()},
            "call_s_45000": {state: by[45_000] * 45_000 for state, by in per.items()},
            "per_recipient_45000_over_1000": {state: by[45_000] / by[1000]
                                              for state, by in per.items()},
            "per_recipient_over_none": {state: {str(n): by[n] / per["none"][n] for n in SIZES}
                                        for state, by in per.items() if state != "none"},
            "tables_without_statistics": {state: sorted(t for t, done in c.items()
                                                        if not done)
                                          for state, c in analysed.items()},
        }
    return figures


def _count(server: Cluster, name: str) -> int:
    with db.connect(server.direct_url(name)) as direct:
        row = direct.execute("select count(*) as n from deliveries").fetchone()
    return int((row or {"n": 0})["n"])
