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
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from reminders import db, schedules
from reminders.db.queries import query
from tests.bench.support import NOW, URL, Cluster, fresh_db

Figures = dict[str, Any]
SIZES = (1, 1000, 45_000)
REPEATS = {1: 5, 1000: 5, 45_000: 2}  # calls a size and state; the median is kept
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


@dataclass
class Caller:
    """One API's schedule call: ``call(n)`` answers its rows; ``explained(n)`` makes the same
    call under ``EXPLAIN (ANALYZE, BUFFERS)`` (the statement the API sends, executed and
    committed) and answers the buffers it touched."""

    run: Callable[[str, dict[str, Any] | tuple[Any, ...]], list[dict[str, Any]]]
    statement: str
    params: Callable[[int], dict[str, Any] | tuple[Any, ...]]
    call: Callable[[int], int]
    close: Callable[[], None]

    def explained(self, n: int) -> dict[str, int]:
        rows = self.run("explain (analyze, buffers, format json) " + self.statement,
                        self.params(n))
        plan = rows[0]["QUERY PLAN"][0]["Plan"]
        return {"shared": int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"]),
                "temp_written": int(plan["Temp Written Blocks"])}


def _recipients(n: int) -> list[str]:
    return [f"r{i}" for i in range(n)]


def _caller(server: Cluster, name: str, api: str) -> Caller:
    """``api``'s call of n recipients, each with a new key, through the pooler."""
    if api == "python":
        conn = db.connect(server.url(name))

        def python_call(n: int) -> int:
            result = schedules.schedule(
                conn, tenant="app", recipients=_recipients(n), channel="webhook", to=URL,
                at=NOW + timedelta(days=1), now=NOW, key=f"call-{next(_keys)}")
            return len(result.deliveries)

        def python_params(n: int) -> dict[str, Any]:  # what schedules.schedule sends
            return {"tenant": "app", "key": f"call-{next(_keys)}",
                    "recipients": _recipients(n), "channel": "webhook",
                    "at": NOW + timedelta(days=1), "rrule": None, "tz": None,
                    "local_start": None, "gap": None, "overlap": None, "destination": URL,
                    "kind": "default", "payload": "{}", "revision": "1", "first_at": None,
                    "expanded": False, "now": NOW}

        def python_run(statement: str, params: Any) -> list[dict[str, Any]]:
            with db.transaction(conn):
                return conn.execute(statement, params).fetchall()

        return Caller(python_run, query("api_schedule"), python_params, python_call,
                      conn.close)
    login = f"bench_app_{uuid.uuid4().hex[:8]}"
    with db.connect(server.direct_url(name)) as admin:
        admin.execute(sql.SQL("create role {} login password 'pw'").format(
            sql.Identifier(login)))
        admin.execute(sql.SQL("grant reminders_client to {}").format(sql.Identifier(login)))
        admin.execute("select reminders.grant_tenant(%s, %s)", (login, "app"))
    app = psycopg.connect(make_conninfo(server.url(name), user=login, password="pw"),
                          row_factory=dict_row, prepare_threshold=None)

    def sql_params(n: int) -> tuple[Any, ...]:
        return (f"call-{next(_keys)}", _recipients(n), NOW + timedelta(days=1), URL)

    def sql_run(statement: str, params: Any) -> list[dict[str, Any]]:
        with app.transaction():  # the application's own transaction
            return app.execute(statement, params).fetchall()

    def sql_call(n: int) -> int:
        return len(sql_run(SQL_SCHEDULE, sql_params(n)))

    return Caller(sql_run, SQL_SCHEDULE, sql_params, sql_call, app.close)


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
        blocks: dict[str, dict[int, dict[str, int]]] = {}
        for state, name in (("none", f"bench_schedule_{api}"),
                            ("empty", f"bench_schedule_{api}_empty")):
            _database(server, name, analyse=state == "empty")
            caller = _caller(server, name, api)
            try:
                analysed[state] = _analysed(server, name)
                per[state] = _calls(caller.call, f"{api} {state}")
                blocks[state] = {n: caller.explained(n) for n in SIZES[1:]}
                if state == "none":  # statistics of what those calls wrote
                    with db.connect(server.direct_url(name)) as admin:
                        admin.execute("analyze")
                    analysed["full"] = _analysed(server, name)
                    figures.setdefault("deliveries_when_analysed", _count(server, name))
                    per["full"] = _calls(caller.call, f"{api} full")
                    blocks["full"] = {n: caller.explained(n) for n in SIZES[1:]}
            finally:
                caller.close()
        figures[api] = {
            "ms_per_recipient": {state: {str(n): 1000 * s for n, s in by.items()}
                                 for state, by in per.items()},
            "call_s_45000": {state: by[45_000] * 45_000 for state, by in per.items()},
            "per_recipient_45000_over_1000": {state: by[45_000] / by[1000]
                                              for state, by in per.items()},
            "per_recipient_over_none": {state: {str(n): by[n] / per["none"][n] for n in SIZES}
                                        for state, by in per.items() if state != "none"},
            "buffers_per_recipient": {state: {str(n): b["shared"] / n for n, b in by.items()}
                                      for state, by in blocks.items()},
            "buffers_per_recipient_45000_over_1000": {
                state: (by[45_000]["shared"] / 45_000) / (by[1000]["shared"] / 1000)
                for state, by in blocks.items()},
            "temp_blocks_written": {state: {str(n): b["temp_written"] for n, b in by.items()}
                                    for state, by in blocks.items()},
            "tables_without_statistics": {state: sorted(t for t, done in c.items()
                                                        if not done)
                                          for state, c in analysed.items()},
        }
    return figures


def _count(server: Cluster, name: str) -> int:
    with db.connect(server.direct_url(name)) as direct:
        row = direct.execute("select count(*) as n from deliveries").fetchone()
    return int((row or {"n": 0})["n"])
