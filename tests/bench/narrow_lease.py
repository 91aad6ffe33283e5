"""A sketch of a schema the project does not have, measured to decide whether to build it
(``narrow_lease``): leases kept apart from the delivery row.

Today a lease is an update of the delivery row. ``state`` is in the predicates of the partial
indexes, so the update is never HOT: every lease writes the row anew and an entry in 8 of
``deliveries``' 12 indexes, about 950 bytes of WAL, where a job PgQueuer picks gets 4. That is
why the tick stays under PgQueuer's dequeue (docs/BENCHMARKS.md, "What missed its goal").

The sketch, on a copy of the same 100,000 due deliveries: the due set in a table of its own
(``due_queue``: id, tenant, due time; the key and one index on ``(due_at, id)``) and the live
leases in another (``leases``: id, token, expiry; the key and an index on the expiry). A lease
deletes the oldest due entries (a delete writes no index entry) and inserts their leases, in
one statement; the delivery row is not touched. The three contenders run in alternation,
batches of 100, 2,000 rows a round: the bare claim and ``lease_due`` on ``deliveries`` as they
are, and the sketch. PgQueuer's dequeue joins them when it is installed.

A second copy runs the sketch with ``lease_due``'s fairness (``NARROW_FAIR_CLAIM``: per-tenant
shares taken round by round, paused tenants skipped; an index on ``(tenant, due_at, id)``).
What the sketch leaves out, and a real change would need: every reader of ``state = 'leased'``
and of the lease columns (the consumer's fenced start, reclaim, release, the opt-outs, the
counts, the console). It measures the lease step alone.
"""

from __future__ import annotations

import statistics
from functools import partial
from typing import Any

from reminders import db
from reminders.db.queries import query
from tests.bench import pgq
from tests.bench.support import fresh_db, timed

Figures = dict[str, Any]

SETUP = (
    "create table due_queue (delivery_id bigint primary key, tenant text not null,"
    " due_at timestamptz not null)",
    "create index due_queue_due on due_queue (due_at, delivery_id)",
    "create index due_queue_tenant_due on due_queue (tenant, due_at, delivery_id)",
    "insert into due_queue select id, tenant, due_at from deliveries"
    " where state in ('scheduled', 'retrying')",
    "create table leases (delivery_id bigint primary key, token uuid not null,"
    " expires_at timestamptz not null)",
    "create index leases_expiry on leases (expires_at)",
    "vacuum analyze",
)

NARROW_CLAIM = """
with picked as (
    delete from due_queue where delivery_id in (
        select delivery_id from due_queue where due_at <= %(now)s
        order by due_at, delivery_id limit %(batch)s for update skip locked)
    returning delivery_id)
insert into leases (delivery_id, token, expires_at)
select delivery_id, gen_random_uuid(), %(now)s + make_interval(secs => %(lease_seconds)s)
from picked
returning delivery_id, token"""


# The same with ``lease_due``'s fairness: every tenant with due work offers its oldest ``share``
# entries, taken round by round up to ``batch``; paused tenants are not walked.
NARROW_FAIR_CLAIM = """
with offered as (
    select t.id as tenant, o.delivery_id, o.due_at,
           row_number() over (partition by t.id order by o.due_at, o.delivery_id) as round
    from tenants t
    cross join lateral (
        select q.delivery_id, q.due_at from due_queue q
        where q.tenant = t.id and q.due_at <= %(now)s
        order by q.due_at, q.delivery_id
        limit %(share)s
        for update skip locked
    ) o
    where not t.paused
), due as (
    select delivery_id from offered order by round, due_at, delivery_id limit %(batch)s
), taken as (
    delete from due_queue q using due where q.delivery_id = due.delivery_id
    returning q.delivery_id
)
insert into leases (delivery_id, token, expires_at)
select delivery_id, gen_random_uuid(), %(now)s + make_interval(secs => %(lease_seconds)s)
from taken
returning delivery_id, token"""


def wal_per_row(conn: db.Connection, sql: str, params: dict[str, Any], batch: int) -> float:
    """WAL bytes one statement writes, a row (nothing else writes to this server meanwhile)."""
    before = conn.execute("select pg_current_wal_lsn() as lsn").fetchone()
    assert before is not None
    rows = conn.execute(sql, params).fetchall()
    assert len(rows) == batch, len(rows)
    after = conn.execute("select pg_wal_lsn_diff(pg_current_wal_lsn(), %s) as bytes",
                         (before["lsn"],)).fetchone()
    assert after is not None
    return float(after["bytes"]) / batch


def bench_narrow_lease(server: str, template: str, pgqueuer: pgq.PgQueuer | None,
                       bare_claim: str, params: dict[str, Any], batch: int) -> Figures:
    per_round, rounds = 2000, 9
    bare, _ = fresh_db(server, "bench_narrow_bare", template)
    lease, _ = fresh_db(server, "bench_narrow_lease_due", template)
    narrow, _ = fresh_db(server, "bench_narrow_sketch", template)
    fair, _ = fresh_db(server, "bench_narrow_fair", template)
    for statement in SETUP:
        narrow.execute(statement)
        fair.execute(statement)
    contenders: dict[str, tuple[db.Connection, str]] = {
        "bare": (bare, bare_claim), "lease_due": (lease, query("lease_due")),
        "narrow": (narrow, NARROW_CLAIM), "narrow_fair": (fair, NARROW_FAIR_CLAIM)}

    def claims(conn: db.Connection, sql: str) -> None:
        for _ in range(per_round // batch):
            rows = conn.execute(sql, params).fetchall()
            assert len(rows) == batch, len(rows)

    def dequeues(queue: pgq.PgQueuer) -> None:
        for _ in range(per_round // batch):
            assert queue.dequeue(batch) == batch

    spent: dict[str, list[float]] = {name: [] for name in [*contenders, "pgqueuer"]}
    for i in range(rounds + 1):
        took = {name: timed(partial(claims, conn, sql))
                for name, (conn, sql) in contenders.items()}
        if pgqueuer is not None:
            took["pgqueuer"] = timed(partial(dequeues, pgqueuer))
        if i:  # round 0 warms up
            for name, seconds in took.items():
                spent[name].append(seconds)
    median = {name: statistics.median(times) for name, times in spent.items() if times}
    figures: Figures = {
        "what": "the lease step of a schema not built (leases apart from the delivery row)",
        "rows_per_round": per_round, "rounds": rounds, "batch": batch,
        **{f"{name}_rows_per_s": per_round / seconds for name, seconds in median.items()},
        "narrow_over_bare": median["bare"] / median["narrow"],
        "narrow_over_lease_due": median["lease_due"] / median["narrow"],
        "narrow_fair_over_lease_due": median["lease_due"] / median["narrow_fair"],
        **{f"{name}_wal_bytes_per_row": wal_per_row(conn, sql, params, batch)
           for name, (conn, sql) in contenders.items()},
    }
    if "pgqueuer" in median:
        figures["narrow_over_pgqueuer"] = median["pgqueuer"] / median["narrow"]
        figures["narrow_fair_over_pgqueuer"] = median["pgqueuer"] / median["narrow_fair"]
        figures["lease_due_over_pgqueuer"] = median["pgqueuer"] / median["lease_due"]
    for conn in (bare, lease, narrow, fair):
        conn.close()
    return figures
