"""The console's pages on a 1,000,000-delivery database: each page's HTTP GET (the real app
under uvicorn, its queries on the embedded Postgres) and the queries behind the overview, and
the plan of the lateness histogram (an index range over the window, never the whole table).

The table: 10,000 one-off schedules of 100 recipients over 50 tenants and 3 kinds, due from 31
days ago to 30 hours ahead (retention's 30 days and a little); what is due is sent 0-89 s late,
except 4 % parked (dead, unknown, failed, stale) and 1 % overdue and still pending; every
delivery settled in the last day has its attempt in the ledger.

Each list page's query is O(page), not O(table): the same queries' plans (EXPLAIN (ANALYZE,
BUFFERS)) on a 10,000-row build of the same shape, and the ratio of the buffers each read at
1,000,000 rows to those at 10,000 (about 1 when a page's cost is the page's; about 100 when it
grows with the table, or with a window's rows, which grow with it here)."""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
import urllib.request
from datetime import timedelta
from typing import Any

from reminders import db, operator
from reminders.clock import iso
from tests.bench.support import NOW, URL, Cluster, fresh_db, timed, untimed

# BENCH_CONSOLE_ROWS: a smaller build, to try the benchmark out (the figures are at 1,000,000).
ROWS = int(os.environ.get("BENCH_CONSOLE_ROWS", "1000000"))
SMALL = 10_000
DEEP = ROWS * 9 // 10  # the Deliveries page's cursor near the table's end
BROWSE_NONE: dict[str, Any] = {
    "state": None, "tenant": None, "kind": None, "channel": None, "recipient": None,
    "due_from": None, "due_to": None, "schedule": None, "after_due": None, "after_id": None}
PER_SCHEDULE = 100

FILL = """
insert into tenants (id) select 't' || g from generate_series(1, 50) g
    where %(schedules)s > 0;
insert into kinds (name) select unnest(array['trip', 'digest']) where %(schedules)s > 0;
insert into schedules (tenant, schedule_key, kind, channel, destination, at, request_hash,
                       created_at, updated_at)
select 't' || (g %% 50 + 1), 'bench-' || g, (array['default', 'trip', 'digest'])[g %% 3 + 1],
       'webhook', %(url)s, %(now)s + interval '30 hours' - (g %% 744) * interval '1 hour'
           - (g %% 60) * interval '1 minute', 'bench', %(now)s - interval '32 days',
       %(now)s - interval '32 days'
from generate_series(1, %(schedules)s) g;
insert into deliveries (tenant, schedule_id, generation, recipient, channel, destination,
                        delivery_key, occurrence_at, revision, due_at, state, reason,
                        attempts_made, created_at, updated_at)
select s.tenant, s.id, 0, 'r' || r, 'webhook', %(url)s, 'bench:' || s.id || ':' || r, s.at,
       '1', s.at, st.state,
       case st.state when 'dead' then 'attempt budget spent (8 attempts made)'
                     when 'unknown' then 'send timed out after the request was written'
                     when 'failed' then 'permanent: HTTP 410'
                     when 'stale' then 'missed its staleness window' end,
       case when st.state in ('sent', 'dead', 'unknown', 'failed') then 1 else 0 end,
       s.at - interval '1 day',
       case when st.state = 'sent' then s.at + (r %% 90) * interval '1 second'
            when st.state = 'scheduled' then s.at - interval '1 day'
            else s.at + interval '5 minutes' end
from schedules s cross join generate_series(1, %(per)s) r
cross join lateral (select case
    when s.at > %(now)s then 'scheduled'
    when r %% 100 = 0 then 'dead' when r %% 100 = 1 then 'unknown'
    when r %% 100 = 2 then 'failed' when r %% 100 = 3 then 'stale'
    when r %% 100 = 4 then 'scheduled'
    else 'sent' end as state) st;
insert into attempts (tenant, delivery_id, attempt_no, lease_token, started_at, finished_at,
                      outcome, status_code)
select d.tenant, d.id, 1, gen_random_uuid(), d.updated_at - interval '1 second', d.updated_at,
       case d.state when 'sent' then 'sent' when 'unknown' then 'unknown'
                    when 'failed' then 'permanent' else 'transient' end,
       case d.state when 'sent' then 200 when 'failed' then 410 when 'dead' then 500 end
from deliveries d
where d.state in ('sent', 'dead', 'unknown', 'failed')
  and d.updated_at > %(now)s - interval '1 day' and d.updated_at <= %(now)s;
"""


def build(server: Cluster, rows: int = ROWS, name: str = "bench_console") -> str:
    conn, url = fresh_db(server, name)
    with conn:
        params = {"url": URL, "now": NOW, "schedules": rows // PER_SCHEDULE,
                  "per": PER_SCHEDULE}
        with untimed(conn):
            for statement in FILL.split(";\n"):
                if statement.strip():
                    conn.execute(statement, params)
        conn.execute("vacuum analyze")
        count = conn.execute("select count(*) as n from deliveries").fetchone()
        assert count is not None and count["n"] == rows, count
    return url


class Server:
    """The console app under uvicorn in a thread, on a free port."""

    def __init__(self, url: str) -> None:
        import uvicorn

        from reminders.console.app import create_app
        from reminders.console.serve import ConsoleContext
        from reminders.local import stack

        ctx = ConsoleContext(
            connect=lambda: db.connect(url, application_name="reminders-console"),
            now=lambda: NOW, queues=lambda: {}, actor="bench", read_timeout_ms=60_000)
        self.port = stack.free_port()
        config = uvicorn.Config(create_app(ctx), host="127.0.0.1", port=self.port,
                                log_level="warning", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        stack.wait_http(f"http://127.0.0.1:{self.port}/static/console.css")

    def get_ms(self, path: str, rounds: int = 5) -> float:
        """The median wall time of a GET, after one to warm up; every answer must be 200."""

        def get() -> None:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}",
                                        timeout=120) as answer:
                assert answer.status == 200, (path, answer.status)
                answer.read()

        get()
        return 1000 * statistics.median(timed(get) for _ in range(rounds))

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def plan(conn: db.Connection, name: str, params: dict[str, Any]) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, BUFFERS) of a named query: the indexes it used, whether it scanned a
    table whole, and the buffers it touched."""
    from reminders.db.queries import query

    rows = conn.execute("explain (analyze, buffers, format json) " + query(name),
                        params).fetchone()
    assert rows is not None
    root = next(iter(rows.values()))[0]
    indexes: set[str] = set()
    seq: set[str] = set()

    def walk(node: dict[str, Any]) -> None:
        if "Index Name" in node:
            indexes.add(node["Index Name"])
        if node.get("Node Type") == "Seq Scan":
            seq.add(node["Relation Name"])
        for child in node.get("Plans", []):
            walk(child)

    walk(root["Plan"])
    top = root["Plan"]
    return {"indexes": sorted(indexes), "seq_scans": sorted(seq),
            "buffers": int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks",
                                                                           0)),
            "rows": int(top.get("Actual Rows", 0)),
            "ms": round(float(root["Execution Time"]), 1)}


def page_plans(conn: db.Connection) -> dict[str, dict[str, Any]]:
    """The plan of each page's query (its first page, its window), as the pages run them."""
    from reminders import throughput

    window = {"now": NOW, "tenant": None, "bounds": list(operator.LATENESS_BOUNDS)}
    parked = {"state": None, "tenant": None, "kind": None, "channel": None, "recipient": None,
              "due_from": None, "due_to": None, "after_due": None, "after_id": None}
    since, _ = throughput.window(NOW, throughput.DEFAULT_MINUTES)
    return {
        "lateness_last_hour": plan(conn, "lateness_histogram",
                                   {**window, "since": NOW - timedelta(hours=1)}),
        "lateness_last_day": plan(conn, "lateness_histogram",
                                  {**window, "since": NOW - timedelta(days=1)}),
        "throughput_last_hour": plan(conn, "throughput_by_minute",
                                     {"now": NOW, "since": since, "tenant": None}),
        "attention_first_page": plan(conn, "deliveries_parked_page", {**parked, "limit": 51}),
        # each as the page runs it (operator.attention_query picks the statement)
        "attention_tenant_dead": plan(conn, operator.attention_query(tenant="t7", state="dead"),
                                      {**parked, "state": "dead", "tenant": "t7", "limit": 51}),
        "attention_tenant": plan(conn, operator.attention_query(tenant="t7", state=None),
                                 {**parked, "tenant": "t7", "limit": 51}),
        "attention_state_dead": plan(conn, operator.attention_query(tenant=None, state="dead"),
                                     {**parked, "state": "dead", "limit": 51}),
        "attention_kind": plan(conn, operator.attention_query(tenant=None, state=None,
                                                              kind="trip"),
                               {**parked, "kind": "trip", "limit": 51}),
        "attention_tenant_kind": plan(conn, operator.attention_query(tenant="t7", state=None,
                                                                     kind="trip"),
                                      {**parked, "tenant": "t7", "kind": "trip", "limit": 51}),
        "attention_state_kind": plan(conn, operator.attention_query(tenant=None, state="dead",
                                                                    kind="trip"),
                                     {**parked, "state": "dead", "kind": "trip", "limit": 51}),
        "attention_recipient_no_match": plan(
            conn, operator.attention_query(tenant=None, state=None, recipient="nobody"),
            {**parked, "recipient": "nobody", "limit": 51}),
        "attention_channel_no_match": plan(conn, "deliveries_parked_page",
                                           {**parked, "channel": "sms", "limit": 51}),
        "deliveries_recipient_no_match": plan(conn, "deliveries_filtered", {
            **BROWSE_NONE, "recipient": "nobody", "limit": 51}),
        "deliveries_tenant_recipient_no_match": plan(conn, "deliveries_filtered", {
            **BROWSE_NONE, "tenant": "t7", "recipient": "nobody", "limit": 51}),
        "deliveries_kind": plan(conn, "deliveries_filtered", {
            **BROWSE_NONE, "kind": "trip", "limit": 51}),
        "deliveries_channel_no_match": plan(conn, "deliveries_filtered", {
            **BROWSE_NONE, "channel": "sms", "limit": 51}),
        "deliveries_first_page": plan(conn, "deliveries_filtered", {**BROWSE_NONE, "limit": 51}),
        "deliveries_first_page_201": plan(conn, "deliveries_filtered",
                                          {**BROWSE_NONE, "limit": 201}),
        "deliveries_by_updated_first_page": plan(conn, "deliveries_filtered_by_updated", {
            **BROWSE_NONE, "limit": 51}),
        "deliveries_tenant_first_page": plan(conn, "deliveries_filtered", {
            **BROWSE_NONE, "tenant": "t7", "limit": 51}),
        "status_breakdown": plan(conn, "status_breakdown", {"tenant": None}),
        "oldest_overdue_delivery": plan(conn, "oldest_overdue_delivery",
                                        {"now": NOW, "tenant": None}),
        "status_paused_schedules": plan(conn, "status_paused_schedules", {
            "now": NOW, "tenant": None, "cap": operator.HELD_COUNT_CAP}),
        "recent_actions": plan(conn, "operator_actions_recent", {"limit": 15}),
    }


def scaling(server: Cluster, large: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The same plans on a 10,000-row build, and per query the ratio of the buffers it read
    at ROWS to those at SMALL rows."""
    url = build(server, SMALL, "bench_console_small")
    with db.connect(url) as conn:
        small = page_plans(conn)
    ratio = {name: round(large[name]["buffers"] / max(small[name]["buffers"], 1), 2)
             for name in large}
    for name in large:
        print(f"console {name}: {small[name]['buffers']} buffers at {SMALL:,} rows, "
              f"{large[name]['buffers']} at {ROWS:,}: x{ratio[name]} "
              f"({small[name]['rows']} and {large[name]['rows']} rows out)",
              file=sys.stderr, flush=True)
    return {"rows_small": SMALL, "plans_small": small, "buffer_ratio": ratio}


def bench_console(server: Cluster) -> dict[str, Any]:
    build_s = timed(lambda: build(server))
    url = server.url("bench_console")
    figures: dict[str, Any] = {"deliveries": ROWS, "build_s": build_s}
    with db.connect(url) as conn:
        dead = db.fetch_one(conn, "deliveries_parked_page", {
            "state": "dead", "tenant": "t7", "kind": None, "channel": None, "recipient": None,
            "due_from": None, "due_to": None, "after_due": None, "after_id": None, "limit": 1})
        assert dead is not None
        deep, _ = operator.attention(conn, limit=2000)
        cursor = f"{deep[-1]['due_at']}/{deep[-1]['id']}"
        # The Deliveries page's cursors: 2,000 rows in, and 900,000 rows in (near the end).
        browse_cursors = {}
        for sort, column in (("due", "due_at"), ("updated", "updated_at")):
            order = "asc" if sort == "due" else "desc"
            for n in (2_000, DEEP):
                row = conn.execute(
                    f"select {column} as at, id from deliveries order by {column} {order}, "
                    f"id {order} offset %s limit 1", (n,)).fetchone()
                assert row is not None
                browse_cursors[(sort, n)] = operator.cursor_of(
                    {"due_at" if sort == "due" else "updated_at": iso(row["at"]),
                     "id": row["id"]}, sort)
        figures["parked"] = conn.execute(
            "select count(*) as n from deliveries"
            " where state in ('unknown', 'dead', 'failed', 'stale')").fetchone()
        figures["sent_last_day"] = operator.lateness(conn, now=NOW, window_seconds=86400)["sent"]
        figures["plans"] = page_plans(conn)
        queries = {
            "status": lambda: operator.status(conn, now=NOW),
            "lateness_last_hour": lambda: operator.lateness(conn, now=NOW,
                                                            window_seconds=3600),
            "lateness_last_day": lambda: operator.lateness(conn, now=NOW,
                                                           window_seconds=86400),
        }
        figures["query_ms"] = {name: 1000 * statistics.median(timed(work) for _ in range(3))
                               for name, work in queries.items()}
    figures["scaling"] = scaling(server, figures["plans"])
    from urllib.parse import urlencode

    app = Server(url)
    try:
        pages = {
            "overview": "/",
            "overview_one_tenant": "/?tenant=t7",
            "overview_live_region": "/live",
            "attention_first_page": "/attention",
            "attention_tenant_dead": "/attention?tenant=t7&state=dead",
            "attention_tenant": "/attention?tenant=t7",
            "attention_state_dead": "/attention?state=dead",
            "attention_after_2000": "/attention?" + urlencode({"after": cursor}),
            "attention_no_match": "/attention?recipient=nobody",
            "attention_kind": "/attention?kind=trip",
            "attention_tenant_kind": "/attention?tenant=t7&kind=trip",
            "delivery": "/delivery?" + urlencode({"tenant": dead["tenant"],
                                                  "key": dead["delivery_key"]}),
            "bulk_confirm_count": "/actions/bulk?tenant=t7&state=dead&as=retry&limit=100",
            # The Deliveries page (every state): a page costs the same at row 2,000 as at row
            # 900,000, and grows with the page's size, not with the table.
            "deliveries_first_page_25": "/deliveries?limit=25",
            "deliveries_first_page_200": "/deliveries?limit=200",
            "deliveries_after_2000": "/deliveries?" + urlencode(
                {"after": browse_cursors[("due", 2_000)]}),
            "deliveries_after_900000": "/deliveries?" + urlencode(
                {"after": browse_cursors[("due", DEEP)]}),
            "deliveries_by_updated_first_page": "/deliveries?sort=updated",
            "deliveries_by_updated_after_900000": "/deliveries?" + urlencode(
                {"sort": "updated", "after": browse_cursors[("updated", DEEP)]}),
            "deliveries_state_sent": "/deliveries?state=sent",
            "deliveries_tenant": "/deliveries?tenant=t7",
            "deliveries_tenant_by_updated": "/deliveries?tenant=t7&sort=updated",
            "deliveries_one_schedule": "/deliveries?tenant=t8&schedule=bench-7",
            "deliveries_recipient_no_match": "/deliveries?recipient=nobody",
            "go_to_a_delivery_key": "/go?" + urlencode({"q": dead["delivery_key"]}),
        }
        started = time.perf_counter()
        figures["page_get_ms"] = {name: app.get_ms(path) for name, path in pages.items()}
        figures["pages_s"] = time.perf_counter() - started
    finally:
        app.close()
    return figures
