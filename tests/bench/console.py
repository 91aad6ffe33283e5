"""The console's pages on a 1,000,000-delivery database: each page's HTTP GET (the real app
under uvicorn, its queries on the embedded Postgres) and the queries behind the overview, and
the plan of the lateness histogram (an index range over the window, never the whole table).

The table: 10,000 one-off schedules of 100 recipients over 50 tenants and 3 kinds, due from 31
days ago to 30 hours ahead (retention's 30 days and a little); what is due is sent 0-89 s late,
except 4 % parked (dead, unknown, failed, stale) and 1 % overdue and still pending."""

from __future__ import annotations

import statistics
import threading
import time
import urllib.request
from datetime import timedelta
from typing import Any

from reminders import db, operator
from reminders.clock import iso
from tests.bench.support import NOW, URL, Cluster, fresh_db, timed, untimed

ROWS = 1_000_000
BROWSE_NONE: dict[str, Any] = {
    "state": None, "tenant": None, "kind": None, "channel": None, "recipient": None,
    "due_from": None, "due_to": None, "schedule": None, "after_due": None, "after_id": None}
SCHEDULES = 10_000

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
"""


def build(server: Cluster) -> str:
    conn, url = fresh_db(server, "bench_console")
    with conn:
        params = {"url": URL, "now": NOW, "schedules": SCHEDULES, "per": ROWS // SCHEDULES}
        with untimed(conn):
            for statement in FILL.split(";\n"):
                if statement.strip():
                    conn.execute(statement, params)
        conn.execute("vacuum analyze")
        count = conn.execute("select count(*) as n from deliveries").fetchone()
        assert count is not None and count["n"] == ROWS, count
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
            "ms": round(float(root["Execution Time"]), 1)}


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
            for n in (2_000, 900_000):
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
        window = {"now": NOW, "tenant": None, "bounds": list(operator.LATENESS_BOUNDS)}
        figures["plans"] = {
            "lateness_last_hour": plan(conn, "lateness_histogram",
                                       {**window, "since": NOW - timedelta(hours=1)}),
            "lateness_last_day": plan(conn, "lateness_histogram",
                                      {**window, "since": NOW - timedelta(days=1)}),
            "attention_first_page": plan(conn, "deliveries_parked_page", {
                "state": None, "tenant": None, "kind": None, "channel": None,
                "recipient": None, "due_from": None, "due_to": None, "after_due": None,
                "after_id": None, "limit": 51}),
            "deliveries_first_page": plan(conn, "deliveries_filtered", {
                **BROWSE_NONE, "limit": 51}),
            "deliveries_by_updated_first_page": plan(conn, "deliveries_filtered_by_updated", {
                **BROWSE_NONE, "limit": 51}),
            "deliveries_tenant_first_page": plan(conn, "deliveries_filtered", {
                **BROWSE_NONE, "tenant": "t7", "limit": 51}),
            "status_breakdown": plan(conn, "status_breakdown", {"tenant": None}),
            "oldest_overdue_delivery": plan(conn, "oldest_overdue_delivery",
                                            {"now": NOW, "tenant": None}),
        }
        queries = {
            "status": lambda: operator.status(conn, now=NOW),
            "lateness_last_hour": lambda: operator.lateness(conn, now=NOW,
                                                            window_seconds=3600),
            "lateness_last_day": lambda: operator.lateness(conn, now=NOW,
                                                           window_seconds=86400),
        }
        figures["query_ms"] = {name: 1000 * statistics.median(timed(work) for _ in range(3))
                               for name, work in queries.items()}
    from urllib.parse import urlencode

    app = Server(url)
    try:
        pages = {
            "overview": "/",
            "overview_one_tenant": "/?tenant=t7",
            "attention_first_page": "/attention",
            "attention_tenant_dead": "/attention?tenant=t7&state=dead",
            "attention_after_2000": "/attention?" + urlencode({"after": cursor}),
            "attention_no_match": "/attention?recipient=nobody",
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
                {"after": browse_cursors[("due", 900_000)]}),
            "deliveries_by_updated_first_page": "/deliveries?sort=updated",
            "deliveries_by_updated_after_900000": "/deliveries?" + urlencode(
                {"sort": "updated", "after": browse_cursors[("updated", 900_000)]}),
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
