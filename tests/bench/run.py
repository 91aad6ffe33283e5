"""``make bench``: the throughput figures of issue 12, printed as JSON, each a ratio measured in
one run against a reference on the same embedded Postgres (shared machines are noisy; absolute
times are printed for context). docs/BENCHMARKS.md explains each figure and its goal.

Real: Postgres (the service's own statements, on its own schema, through a PgBouncer in
transaction mode in front of it, the local RDS Proxy: support.Cluster), the webhook channel and the
local receiver in ``consumer_webhooks``. In-process stand-ins: the queue (a deque; never moto,
whose SQS slows with depth) and, in the burst, the channel (records each send and answers at
once). The scanner and consumer are the service's own ``scanner.tick`` and
``consumer.process_batch``.

``BENCH_BURST`` sets the burst's size (default 100,000), ``BENCH_DRAIN`` the simulated drain's
fan-out (tests/bench/drain.py, default 100,000); ``BENCH_ONLY=a,b`` runs some figures.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

from reminders import consumer, db, scanner, schedules
from reminders.channels.signing import new_secret
from reminders.clock import FixedClock
from reminders.db.queries import query
from reminders.local import pooler, stack
from reminders.local.receiver import WebhookReceiver
from reminders.observability import logger
from reminders.recurrence import Recurrence
from reminders.runtime import build_channels
from tests.bench import pgq
from tests.bench.aws_calls import bench_aws_calls
from tests.bench.batch_size import bench_consumer_batch_size, bench_consumer_database
from tests.bench.bounds import bench_bounds
from tests.bench.cold_start import bench_cold_start, bench_cold_start_runtime_python
from tests.bench.console import bench_console
from tests.bench.cost import bench_cost
from tests.bench.counts import bench_counts_trigger, bench_trigger_search_path
from tests.bench.drain import bench_drains
from tests.bench.index_writes import bench_console_indexes
from tests.bench.pacing import bench_pacing
from tests.bench.publishing import bench_publisher_fan_out
from tests.bench.schedule_call import bench_schedule_call
from tests.bench.support import (
    NOW,
    URL,
    Cluster,
    MemoryQueue,
    RecordingChannel,
    WallClock,
    add_rows,
    add_schedule,
    backlog,
    fresh_db,
    index_reads,
    make_base,
    percentile,
    runtime,
    settle_leased,
    sqs_event,
    timed,
    untimed,
)
from tests.bench.twin_cold_start import bench_cold_start_twin
from tests.round_trips import count_round_trips

Figures = dict[str, Any]
BATCH = 100  # the deployed scanBatch
LEASE_PARAMS = {"now": NOW, "batch": BATCH, "share": BATCH, "lease_seconds": 300}

# The reference claim: the textbook SKIP LOCKED queue pop on the same table, writing the same
# columns as lease_due, oldest due first, no fairness.
BARE_CLAIM = """
update deliveries d set state = 'leased', lease_token = gen_random_uuid(),
    lease_expires_at = %(now)s + make_interval(secs => %(lease_seconds)s),
    received = false, leases = d.leases + 1, updated_at = %(now)s
where d.id in (select id from deliveries
               where state in ('scheduled', 'retrying') and due_at <= %(now)s
               order by due_at, id limit %(batch)s for update skip locked)
returning d.id, d.lease_token, d.due_at"""

# The same textbook claim on the narrow table ``lease_due`` leases from since migration 0013
# (due entries and pending leases, one row per due delivery): the floor for that table. Its
# copy gets the claim's own index (oldest first across tenants), which the service does not
# keep: every read of the due set goes tenant by tenant.
BARE_CLAIM_DUE_QUEUE = """
update due_queue q set token = gen_random_uuid(),
    expires_at = %(now)s + make_interval(secs => %(lease_seconds)s)
where q.id in (select id from due_queue
               where token is null and due_at <= %(now)s
               order by due_at, id limit %(batch)s for update skip locked)
returning q.id, q.token, q.due_at"""
DUE_QUEUE_CLAIM_INDEX = ("create index due_queue_claim on due_queue (due_at, id) "
                         "where token is null")


# ---------------------------------------------------------------- 1. the lease statement


def claim_template(server: Cluster) -> str:
    """One tenant's 100,000 due deliveries (one due instant), copied for each contender."""
    name = "bench_claim_tpl"
    conn, _ = fresh_db(server, name)
    backlog(conn, due_rows=100_000)
    conn.close()
    return name


def bench_lease_statement(server: Cluster, template: str) -> Figures:
    """``lease_due`` (batch 100, one tenant) vs the bare claim on the deliveries and the bare
    claim on ``due_queue``, on three copies of one table, statement after statement in
    alternation (autocommit: one statement, one transaction)."""
    lease, _ = fresh_db(server, "bench_claim_lease", template)
    bare, _ = fresh_db(server, "bench_claim_bare", template)
    narrow, _ = fresh_db(server, "bench_claim_narrow", template)
    narrow.execute(DUE_QUEUE_CLAIM_INDEX)
    lease_sql, rounds, warmup = query("lease_due"), 200, 10
    spent: dict[str, list[float]] = {"lease": [], "bare": [], "narrow": []}

    def run(conn: db.Connection, sql: str) -> float:
        start = time.perf_counter()
        rows = conn.execute(sql, LEASE_PARAMS).fetchall()
        took = time.perf_counter() - start
        assert len(rows) == BATCH, len(rows)
        return took

    contenders = [("lease", lease, lease_sql), ("bare", bare, BARE_CLAIM),
                  ("narrow", narrow, BARE_CLAIM_DUE_QUEUE)]
    for i in range(rounds + warmup):
        turn = i % len(contenders)  # each goes first in turn
        for name, conn, sql in contenders[turn:] + contenders[:turn]:
            took = run(conn, sql)
            if i >= warmup:
                spent[name].append(took)
    # WAL a leased row: one more statement each, after the rounds (a checkpoint's full-page
    # images fall where they fall, so this moves between runs).
    wal: dict[str, float] = {}
    for name, conn, sql in contenders:
        start_lsn = conn.execute("select pg_current_wal_insert_lsn()::text as l").fetchone()
        run(conn, sql)
        spent_wal = conn.execute("select pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)"
                                 " as d", ((start_lsn or {})["l"],)).fetchone()
        wal[name] = float((spent_wal or {})["d"]) / BATCH
    for conn in (lease, bare, narrow):
        conn.close()
    # Medians: a statement that a neighbour on the machine slowed counts once.
    median = {name: statistics.median(times) for name, times in spent.items()}
    return {"goal": "lease_over_bare >= 0.8", "statements_each": rounds,
            "lease_due_ms_per_batch": 1000 * median["lease"],
            "bare_claim_ms_per_batch": 1000 * median["bare"],
            "lease_due_rows_per_s": BATCH / median["lease"],
            "bare_claim_rows_per_s": BATCH / median["bare"],
            "bare_claim_due_queue_rows_per_s": BATCH / median["narrow"],
            "lease_over_bare": median["bare"] / median["lease"],
            "lease_over_bare_due_queue": median["narrow"] / median["lease"],
            "wal_bytes_per_leased_row": wal["lease"],
            "bare_claim_wal_bytes_per_leased_row": wal["bare"],
            "bare_claim_due_queue_wal_bytes_per_leased_row": wal["narrow"]}


# ---------------------------------------------------------------- 2. the whole scanner tick


def tick_once(url: str, budget: int, queue: MemoryQueue | None = None) -> tuple[int, float]:
    """One ``scanner.tick`` with the in-memory queue; returns (leased, seconds). The runtime's
    connection is made before the clock starts (a warm Lambda keeps its connection)."""
    queue = queue or MemoryQueue()
    rt = runtime(url, FixedClock(NOW), queue, {"webhook": RecordingChannel()},
                 scan_batch=BATCH, inflight_budget=budget)
    rt.connection()
    start = time.perf_counter()
    summary = scanner.tick(rt, refill=False)
    took = time.perf_counter() - start
    rt.close()
    return summary.leased, took


class WarmScanner:
    """A scanner as a warm Lambda runs it, on one database: one runtime and connection kept
    from tick to tick, the in-memory queue emptied and the leases settled between ticks (as
    consumers would; not timed), and the backlog topped up to its size."""

    def __init__(self, server: Cluster, name: str, due_rows: int, per_tick: int,
                 spread: timedelta | None = None) -> None:
        self.conn, self.url = fresh_db(server, name)
        self.spread = spread
        backlog(self.conn, due_rows=due_rows, spread=spread)
        row = self.conn.execute("select id from schedules where schedule_key = 'fan-big'"
                                ).fetchone()
        assert row is not None
        self.schedule_id, self.next_recipient = int(row["id"]), due_rows
        self.queue = MemoryQueue()
        self.rt = runtime(self.url, FixedClock(NOW), self.queue,
                          {"webhook": RecordingChannel()}, scan_batch=BATCH,
                          inflight_budget=per_tick)
        self.rt.connection()

    def tick(self) -> tuple[int, float]:
        """One tick to its in-flight budget (``refill=False``: no consumer here makes room, so
        the refill wait would only add its patience, REMINDERS_REFILL_PATIENCE_SECONDS)."""
        start = time.perf_counter()
        leased = scanner.tick(self.rt, refill=False).leased
        took = time.perf_counter() - start
        self.queue.clear()
        self.refill(leased)
        return leased, took

    def lease_statements(self, batch: int, passes: int,
                         sql: str | None = None) -> tuple[int, float]:
        """Only the tick's lease statements: ``passes`` of ``lease_due`` (or ``sql``, with its
        parameters) of ``batch``, one after the other as a tick sends them, and nothing else of
        a tick (no reclaim, counts, publish or closing steps). What the tick would take if
        every other step were free."""
        sql = sql or query("lease_due")
        params = {"now": NOW, "batch": batch, "share": batch,
                  "lease_seconds": self.rt.settings.limits.lease_seconds}
        start = time.perf_counter()
        leased = sum(len(self.conn.execute(sql, params).fetchall()) for _ in range(passes))
        took = time.perf_counter() - start
        self.refill(leased)
        return leased, took

    def refill(self, leased: int) -> None:
        """Untimed: every lease ends ``sent`` and the backlog is topped up by as many."""
        settle_leased(self.conn)
        add_rows(self.conn, tenant="big", schedule_id=self.schedule_id, count=leased,
                 due=NOW - timedelta(minutes=1), first=self.next_recipient,
                 spread=self.spread)
        self.next_recipient += leased

    def close(self) -> None:
        self.rt.close()
        self.conn.close()


def bench_tick(server: Cluster, pgqueuer: pgq.PgQueuer | None, claim_tpl: str) -> Figures:
    """Whole ticks (reclaim, series, budget, fair lease passes, publish, overdue) of 2,000 rows
    (20 passes of 100) with a 10,000 and a 100,000 due backlog, in alternation after one
    warm-up round. With PgQueuer installed, its dequeue runs in the same alternation (batches
    of 100, 2,000 rows a round) on 100,000 queued jobs, and so does the bare claim."""
    per_tick, rounds = 2000, 7
    scanners = {rows: WarmScanner(server, f"bench_tick_{rows}", rows, per_tick)
                for rows in (10_000, 100_000)}
    bare, _ = fresh_db(server, "bench_tick_bare", claim_tpl)
    spent: dict[int | str, list[float]] = {10_000: [], 100_000: [], "pgqueuer": [], "bare": []}

    def claims() -> float:
        return timed(lambda: [bare.execute(BARE_CLAIM, LEASE_PARAMS).fetchall()
                              for _ in range(per_tick // BATCH)])

    def dequeues(queue: pgq.PgQueuer) -> float:
        return timed(lambda: [queue.dequeue(BATCH) for _ in range(per_tick // BATCH)])

    for i in range(rounds + 1):
        took: dict[int | str, float] = {}
        for rows in (10_000, 100_000) if i % 2 else (100_000, 10_000):
            leased, took[rows] = scanners[rows].tick()
            assert leased == per_tick, leased
        took["bare"] = claims()
        if pgqueuer is not None:
            took["pgqueuer"] = dequeues(pgqueuer)
        if i:  # round 0 warms up
            for key, seconds in took.items():
                spent[key].append(seconds)
    bare.close()
    # Medians of the rounds: a round that a neighbour on the machine slowed counts once.
    median = {key: statistics.median(times) for key, times in spent.items() if times}
    rate = per_tick / median[100_000]
    figures: Figures = {
        "goal": "tick_100k_over_10k <= 1.2; leased_rows_per_minute >= 1,000,000",
        "rows_per_tick": per_tick, "passes_per_tick": per_tick // BATCH, "rounds": rounds,
        "tick_ms_10k_backlog": 1000 * median[10_000],
        "tick_ms_100k_backlog": 1000 * median[100_000],
        "tick_100k_over_10k": median[100_000] / median[10_000],
        "leased_rows_per_s": rate, "leased_rows_per_minute": 60 * rate,
        "bare_claim_rows_per_s": per_tick / median["bare"],
        "tick_over_bare_claim": median["bare"] / median[100_000],
    }
    if pgqueuer is not None:
        figures["pgqueuer_dequeue_rows_per_s"] = per_tick / median["pgqueuer"]
        figures["tick_over_pgqueuer"] = median["pgqueuer"] / median[100_000]
        figures["pgqueuer_over_bare_claim"] = median["bare"] / median["pgqueuer"]
    if pgqueuer is not None:
        figures.update(at_deployed_batch(scanners[100_000], pgqueuer))
    figures.update(live_leases_cost(scanners[100_000]))
    for warm in scanners.values():
        warm.close()
    figures["tick_with_50k_live_over_none"] = (figures["tick_ms_with_50k_live_leases"]
                                               / figures["tick_ms_100k_backlog"])
    return figures


# A day of one-offs: due times spread at random over the day before now.
RANDOM_SPREAD = timedelta(days=1)


def against_pgqueuer(warm: WarmScanner, queue: pgq.PgQueuer, batch: int, passes: int,
                     rounds: int = 7) -> dict[str, float]:
    """Ticks of ``passes`` passes of ``batch`` against as many PgQueuer dequeues of ``batch``,
    and the tick's lease statements alone against the same, in alternation after one warm-up
    round (the order turning each round): the median seconds of each (``tick``, ``leases``,
    ``pgqueuer``)."""
    per_tick = passes * batch
    warm.rt.settings = replace(warm.rt.settings, limits=replace(
        warm.rt.settings.limits, scan_batch=batch, inflight_budget=per_tick))
    return alternate({"tick": warm.tick,
                      "leases": partial(warm.lease_statements, batch, passes),
                      "pgqueuer": partial(pgqueuer_dequeues, queue, batch, passes)},
                     per_tick, rounds)


def pgqueuer_dequeues(queue: pgq.PgQueuer, batch: int, passes: int) -> tuple[int, float]:
    """``passes`` PgQueuer dequeues of ``batch``: the jobs taken and the seconds."""
    start = time.perf_counter()
    taken = sum(queue.dequeue(batch) for _ in range(passes))
    return taken, time.perf_counter() - start


def alternate(work: dict[str, Callable[[], tuple[int, float]]], each: int,
              rounds: int = 7) -> dict[str, float]:
    """Each contender of ``work`` (returning what it took and the seconds) once a round, in an
    order that turns each round, after one warm-up round; each must take ``each``. The median
    seconds of each."""
    spent: dict[str, list[float]] = {name: [] for name in work}
    names = list(work)
    for i in range(rounds + 1):
        for name in names[i % len(names):] + names[:i % len(names)]:
            done, took = work[name]()
            assert done == each, (name, done)
            if i:  # round 0 warms up
                spent[name].append(took)
    return {name: statistics.median(times) for name, times in spent.items()}


def bench_lease_vs_pgqueuer(server: Cluster) -> Figures:
    """The scanner's whole tick against PgQueuer's dequeue, in four cells measured in this one
    run: due times all tied (a fan-out) and spread at random over a day (one-offs), at
    batches of 100 (20 passes a tick) and 1,000 (10 passes), each on a 100,000 due backlog
    against 200,000 queued jobs whose ``execute_after`` is spread the same way. PgQueuer takes
    its jobs by priority and id whatever their times; the scanner takes the oldest due first,
    fairly across tenants. Each cell also says what the tick's lease statements alone do
    against the same dequeues (``*_lease_statements_alone_over_pgqueuer``, the ceiling of
    the tick's ratio were every other step of it free) and the three medians in milliseconds
    (``*_tick_ms``, ``*_leases_ms``, ``*_pgqueuer_ms``: 20 or 10 statements each)."""
    reason = pgq.missing()
    if reason is not None:
        return {"skipped": reason}
    figures: Figures = {"goal": "every *_tick_over_pgqueuer >= 1.5", "due_backlog": 100_000,
                        "jobs_queued": 200_000, "random_spread": "1 day"}
    for shape, spread in (("tied", None), ("random", RANDOM_SPREAD)):
        name = f"bench_vs_pgq_{shape}"
        db.create_database(server.direct, name)
        queue = pgq.PgQueuer(server.url(name))
        queue.fill(200_000, spread=spread)
        warm = WarmScanner(server, f"bench_vs_tick_{shape}", 100_000, 2000, spread=spread)
        try:
            for batch, passes in ((100, 20), (1000, 10)):
                median = against_pgqueuer(warm, queue, batch, passes)
                cell = f"{shape}_batch_{batch}"
                figures[f"{cell}_tick_over_pgqueuer"] = median["pgqueuer"] / median["tick"]
                figures[f"{cell}_lease_statements_alone_over_pgqueuer"] = (
                    median["pgqueuer"] / median["leases"])
                for name, seconds in median.items():
                    figures[f"{cell}_{name}_ms"] = 1000 * seconds
        finally:
            warm.close()
            queue.close()
    figures["lowest"] = min(v for k, v in figures.items() if k.endswith("_tick_over_pgqueuer"))
    return figures


# A sketch (in ``lease_variants``), not the service's lease: the same pick as ``lease_due``
# (its fairness and bounds), but the due entries are deleted and the pass's leases recorded in
# one row (its token, expiry and ids), instead of a token and an expiry written on each entry.
# About two WAL records a leased row (a lock and a delete) where the lease writes about five (a
# lock, a new version, its entries in the primary key and the expiry index). Only a measure of
# what such a lease would gain: the consumer's take, the reclaim, the release, the in-flight
# count and the triggers know nothing of it (docs/BENCHMARKS.md, "What missed its goal").
PASS_LEASES = """
create table pass_leases (token uuid primary key, expires_at timestamptz not null,
                          ids bigint[] not null);
create index pass_leases_expiry on pass_leases (expires_at)"""
PASS_LEASE_TAIL = """
, taken as (
    delete from due_queue q where q.id = any(array(select id from due))
    returning q.id, q.due_at
), pass as (
    insert into pass_leases (token, expires_at, ids)
    select gen_random_uuid(), %(now)s + make_interval(secs => %(lease_seconds)s), array_agg(id)
    from taken
    returning token
)
select t.id, p.token as lease_token, t.due_at, (select n from left_over) as tenants_left
from taken t cross join pass p"""


def pass_lease_sketch() -> str:
    """``lease_due`` up to its final update, then :data:`PASS_LEASE_TAIL`."""
    pick, _ = query("lease_due").split("\nupdate due_queue q set token")
    return pick + PASS_LEASE_TAIL


# The due set of a copy rewritten in due order (the order a pass takes it in), as CLUSTER
# would leave it; its indexes are rebuilt with it. The service never does this: CLUSTER holds
# the table's exclusive lock while it rewrites.
DUE_ORDER_REWRITE = (
    "create index bench_due_order on due_queue (tenant, priority, due_at, id)",
    "cluster due_queue using bench_due_order",
    "drop index bench_due_order")


def _variants_cell(copies: dict[str, WarmScanner], queue: pgq.PgQueuer, batch: int,
                   passes: int) -> dict[str, float]:
    """One cell of :func:`bench_lease_variants`: the median seconds of each contender."""
    sketch = copies["sketch"]
    sketch_sql = pass_lease_sketch()

    def the_sketch() -> tuple[int, float]:
        leased, took = sketch.lease_statements(batch, passes, sketch_sql)
        with untimed(sketch.conn):  # what consumers would do: every pass's leases end sent
            sketch.conn.execute("update deliveries set state = 'sent', reason = 'bench'"
                                " where id = any(array(select unnest(ids) from pass_leases))")
            sketch.conn.execute("delete from pass_leases")
        return leased, took

    return alternate({
        "lease_due": partial(copies["lease_due"].lease_statements, batch, passes),
        "due_order": partial(copies["due_order"].lease_statements, batch, passes),
        "sketch": the_sketch,
        "pgqueuer": partial(pgqueuer_dequeues, queue, batch, passes)}, batch * passes)


def bench_lease_variants(server: Cluster) -> Figures:
    """What the random cells of :func:`bench_lease_vs_pgqueuer` pay for. The lease statements
    of a tick (20 of 100, and 10 of 1,000) on that random backlog: ``lease_due`` on one copy as
    the service keeps it (``lease_due``), ``lease_due`` on a copy whose due set was rewritten in
    due order once before the rounds (``due_order``; the top-ups land where they land), the
    pass-lease sketch on a third (``sketch``), and as many PgQueuer dequeues, in an order that
    turns each round, eight rounds, the first a warm-up. Between rounds (untimed) each copy's
    leases end ``sent`` and its backlog is topped up. Ratios of medians, and the
    milliseconds."""
    reason = pgq.missing()
    if reason is not None:
        return {"skipped": reason}
    name = "bench_variants_pgq"
    db.create_database(server.direct, name)
    queue = pgq.PgQueuer(server.url(name))
    queue.fill(200_000, spread=RANDOM_SPREAD)
    copies = {variant: WarmScanner(server, f"bench_variants_{variant}", 100_000, 2000,
                                   spread=RANDOM_SPREAD)
              for variant in ("lease_due", "due_order", "sketch")}
    figures: Figures = {"shape": "random", "due_backlog": 100_000, "jobs_queued": 200_000}
    try:
        with untimed(copies["due_order"].conn) as conn:
            for statement in DUE_ORDER_REWRITE:
                conn.execute(statement)
        copies["due_order"].conn.execute("vacuum analyze due_queue")
        db.execute_script(copies["sketch"].conn, PASS_LEASES)
        for batch, passes in ((100, 20), (1000, 10)):
            median = _variants_cell(copies, queue, batch, passes)
            cell = f"batch_{batch}"
            for variant in ("lease_due", "due_order", "sketch"):
                figures[f"{cell}_{variant}_over_pgqueuer"] = median["pgqueuer"] / median[variant]
            figures[f"{cell}_due_order_over_lease_due"] = median["lease_due"] / median["due_order"]
            for variant, seconds in median.items():
                figures[f"{cell}_{variant}_ms"] = 1000 * seconds
    finally:
        for warm in copies.values():
            warm.close()
        queue.close()
    return figures


def at_deployed_batch(warm: WarmScanner, pgqueuer: pgq.PgQueuer, batch: int = 1000,
                      rounds: int = 7) -> Figures:
    """The same comparison at the deployed ``scanBatch`` (1,000): ticks of 10 passes of 1,000
    on the 100,000 backlog, against 10 PgQueuer dequeues of 1,000, in alternation."""
    per_tick = 10 * batch
    warm.rt.settings = replace(warm.rt.settings, limits=replace(
        warm.rt.settings.limits, scan_batch=batch, inflight_budget=per_tick))
    ticks: list[float] = []
    dequeues: list[float] = []
    for i in range(rounds + 1):
        leased, took = warm.tick()
        assert leased == per_tick, leased
        spent = timed(lambda: [pgqueuer.dequeue(batch) for _ in range(10)])
        if i:  # round 0 warms up
            ticks.append(took)
            dequeues.append(spent)
    tick, dequeue = statistics.median(ticks), statistics.median(dequeues)
    return {"batch_1000_tick_rows_per_s": per_tick / tick,
            "batch_1000_pgqueuer_rows_per_s": per_tick / dequeue,
            "batch_1000_tick_over_pgqueuer": dequeue / tick}


def live_leases_cost(warm: WarmScanner) -> Figures:
    """The same tick of 2,000 rows while 50,000 other leases are live (messages in flight
    under a large in-flight budget): what counting and walking live leases costs a tick."""
    live, per_tick = 50_000, 2000
    warm.conn.execute("""
        update deliveries set state = 'leased', lease_token = gen_random_uuid(),
                              lease_expires_at = %(until)s
        where id in (select id from deliveries where state = 'scheduled'
                     order by due_at desc, id desc limit %(n)s)""",
                      {"until": NOW + timedelta(minutes=5), "n": live})
    counted = timed(lambda: db.fetch_one(warm.conn, "live_leases"))
    warm.rt.settings = replace(warm.rt.settings, limits=replace(
        warm.rt.settings.limits, scan_batch=BATCH, inflight_budget=live + per_tick))
    start = time.perf_counter()
    leased = scanner.tick(warm.rt, refill=False).leased
    took = time.perf_counter() - start
    assert leased == per_tick, leased
    return {"tick_ms_with_50k_live_leases": 1000 * took,
            "live_leases_statement_ms_at_50k": 1000 * counted}


# ---------------------------------------------------------------- 3. index entries read


def bench_index_reads(server: Cluster) -> Figures:
    """On a 1,000,000-row table (900,000 sent, 100,000 due), after a tick of 2,000 rows (so
    2,000 live leases and the index entries earlier passes left behind): index entries the
    statements return (pg_stat_user_indexes.idx_tup_read) per leased row."""
    conn, url = fresh_db(server, "bench_large")
    backlog(conn, due_rows=100_000, done_rows=900_000)
    tick_once(url, 2000)
    figures: Figures = {"goal": "lease_due_per_leased_row <= 3", "table_rows": 1_000_000,
                        "due_rows": 100_000, "live_leases_before": 2000}

    def lease(sql: str) -> Callable[[], None]:
        def work() -> None:
            with db.transaction(conn):
                assert len(conn.execute(sql, LEASE_PARAMS).fetchall()) == BATCH

        return work

    for name, sql in (("lease_due", query("lease_due")), ("bare_claim", BARE_CLAIM),
                      ("bare_claim_due_queue", BARE_CLAIM_DUE_QUEUE)):
        if name == "bare_claim_due_queue":  # its own index, there only while it runs
            conn.execute(DUE_QUEUE_CLAIM_INDEX)
        each = [index_reads(server, conn, lease(sql)) for _ in range(3)]
        figures[f"{name}_per_leased_row"] = statistics.median(
            sum(r.values()) for r in each) / BATCH
        figures[f"{name}_by_index"] = each[-1]
    conn.execute("drop index due_queue_claim")
    # Each statement of a tick alone, with the tick's parameters (one pass of 100).
    statements: dict[str, tuple[str, dict[str, Any]]] = {
        "lease_reclaim_expired": ("lease_reclaim_expired", {
            "now": NOW, "idempotent_channels": ["webhook"], "max_empty_leases": 5,
            "lease_seconds": 300, "limit": 1000}),
        "pending_leases_reclaim": ("pending_leases_reclaim", {
            "now": NOW, "lease_seconds": 300, "limit": 1000}),
        "series_to_advance": ("series_to_advance", {"limit": BATCH}),
        "live_leases": ("live_leases", {}),
        "tenants_with_due_work": ("tenants_with_due_work", {"now": NOW}),
        "oldest_overdue": ("oldest_overdue", {"now": NOW, "cap": scanner.OVERDUE_COUNT_CAP}),
    }
    figures["live_leases_during_tick_statements"] = int(
        (db.fetch_one(conn, "live_leases") or {})["n"])
    by_statement = {}
    for label, (name, params) in statements.items():
        by_statement[label] = sum(index_reads(
            server, conn, partial(db.fetch_all, conn, name, params)).values())
    figures["tick_statements"] = by_statement
    live = int((db.fetch_one(conn, "live_leases") or {})["n"])
    rt = runtime(url, FixedClock(NOW), MemoryQueue(), {"webhook": RecordingChannel()},
                 scan_batch=BATCH, inflight_budget=live + BATCH)
    summaries: list[scanner.TickSummary] = []
    reads = index_reads(server, rt.connection(),
                        lambda: summaries.append(scanner.tick(rt)))
    rt.close()
    figures["whole_tick_leased"] = summaries[0].leased
    figures["whole_tick_per_leased_row"] = sum(reads.values()) / max(1, summaries[0].leased)
    conn.close()
    return figures


# ---------------------------------------------------------------- 4. consumer round trips


def bench_consumer(server: Cluster) -> Figures:
    """Round trips of ``process_batch`` (libpq trace, as tests/integration/test_promises.py),
    and a batch's time and index reads with 1,000 vs 20,000 live leases."""
    conn, url = fresh_db(server, "bench_consumer")
    add_schedule(conn, tenant="acme", key="fan", due=NOW,
                 recipients=[f"p{i}" for i in range(25_000)])
    conn.execute("vacuum analyze")
    queue = MemoryQueue()
    channel = RecordingChannel()
    tick_once(url, 1000, queue)
    rt = runtime(url, FixedClock(NOW + timedelta(seconds=1)), queue, {"webhook": channel})
    service = rt.connection()
    figures: Figures = {"goal": "round_trips_batch_of_10 == 4"}
    for size in (1, 10):
        event = sqs_event(queue.take(size))
        figures[f"round_trips_batch_of_{size}"] = count_round_trips(
            service, partial(consumer.process_batch, event, rt))

    def batches(n: int) -> tuple[float, float]:
        times: list[float] = []
        reads: list[int] = []
        # Timed alone, or counted (the counting adds statements); the counted ones last: the
        # counting closes the pooler's server connections, and a batch right after one would
        # pay a new backend's start.
        for i in range(n):
            work = partial(consumer.process_batch, sqs_event(queue.take(10)), rt)
            if i >= n - n // 3:
                reads.append(sum(index_reads(server, service, work).values()))
            else:
                times.append(timed(work))
        return statistics.median(times), statistics.median(reads)

    few, few_reads = batches(9)
    tick_once(url, 20_000, queue)
    live = int((db.fetch_one(conn, "live_leases") or {})["n"])
    many, many_reads = batches(9)
    rt.close()
    conn.close()
    assert len(channel.sends) == 1 + 10 + 90 + 90, len(channel.sends)
    figures.update({
        "batch_of_10_ms_with_1k_live_leases": 1000 * few,
        "batch_of_10_ms_with_20k_live_leases": 1000 * many,
        "live_leases_then": live,
        "index_entries_per_batch_1k_live": few_reads,
        "index_entries_per_batch_20k_live": many_reads,
        "batch_ms_20k_over_1k_live": many / few,
    })
    return figures


# ---------------------------------------------------------------- 5. webhooks at 200 ms


def bench_consumer_webhooks(server: Cluster) -> Figures:
    """A batch of 10 webhooks to the local receiver answering in 200 ms, through the real
    webhook channel: sends run together vs one after another (REMINDERS_SEND_CONCURRENCY=1),
    and vs a batch of one message (one send's time, database work included)."""
    secret = new_secret()
    receiver = WebhookReceiver(secret).start()
    try:
        conn, url = fresh_db(server, "bench_webhooks")
        hook = receiver.hook_url("slow", delay=0.2)
        # A plaintext row (no KMS in the benchmark); sealed rows cost one Decrypt per process.
        conn.execute("insert into endpoints (url, secret) values (%s, %s)", (hook, secret))
        add_schedule(conn, tenant="acme", key="slow", due=NOW, url=hook,
                     recipients=[f"p{i}" for i in range(60)])
        queue = MemoryQueue()
        tick_once(url, 1000, queue)

        def batch(size: int, concurrency: int) -> float:
            rt = runtime(url, FixedClock(NOW + timedelta(seconds=1)), queue, {},
                         send_concurrency=concurrency)
            rt.channels = build_channels(rt.settings, client=None)
            rt.connection()
            event = sqs_event(queue.take(size))
            took = timed(lambda: consumer.process_batch(event, rt))
            rt.close()
            return took

        one = statistics.median(batch(1, 10) for _ in range(3))
        together = statistics.median(batch(10, 10) for _ in range(3))
        sequential = statistics.median(batch(10, 1) for _ in range(2))
        effects = receiver.stats()["effects"]
        conn.close()
    finally:
        receiver.stop()
    assert len(effects) == 3 + 30 + 20, effects
    return {"goal": "batch_of_10_over_one_send ~ 1", "receiver_delay_ms": 200,
            "batch_of_1_ms": 1000 * one, "batch_of_10_ms": 1000 * together,
            "batch_of_10_sequential_ms": 1000 * sequential,
            "batch_of_10_over_one_send": together / one,
            "sequential_over_together": sequential / together}


# ---------------------------------------------------------------- 6. fairness


def bench_fairness(server: Cluster) -> Figures:
    """A large tenant's fan-out of 20,000 due at T, a small tenant's 10 one-offs due at T+60 s.
    Tick at T (in-flight budget 1,000; the consumers then take everything: leases settled, not
    timed), tick at T+60 s: which pass leases the small tenant's reminders. Reference: the bare
    oldest-first claim on a copy, pass after pass of 100 from T+60 s."""
    name = "bench_fair_tpl"
    conn, _ = fresh_db(server, name)
    backlog(conn, due_rows=20_000, due=NOW)
    add_schedule(conn, tenant="small", key="one-offs", due=NOW + timedelta(seconds=60),
                 recipients=[f"s{i}" for i in range(10)])
    conn.execute("analyze")
    conn.close()
    conn, url = fresh_db(server, "bench_fair", name)
    small = {int(r["id"]) for r in conn.execute(
        "select id from deliveries where tenant = 'small'").fetchall()}
    budget = 1000
    queue = MemoryQueue()
    tick_once(url, budget, queue)
    settle_leased(conn)
    queue.clear()
    rt = runtime(url, FixedClock(NOW + timedelta(seconds=60)), queue,
                 {"webhook": RecordingChannel()}, scan_batch=BATCH, inflight_budget=budget)
    reads = index_reads(server, rt.connection(), lambda: scanner.tick(rt))
    rt.close()
    leased_passes = [i + 1 for i, (_, ids) in enumerate(queue.passes) if small & set(ids)]
    first_pass_rows = len(queue.passes[0][1]) if queue.passes else 0
    conn.close()

    ref, _ = fresh_db(server, "bench_fair_oldest_first", name)
    claim = {**LEASE_PARAMS, "now": NOW}
    for _ in range(budget // BATCH):  # the first tick, as above
        ref.execute(BARE_CLAIM, claim).fetchall()
    settle_leased(ref)
    claim["now"] = NOW + timedelta(seconds=60)
    waiting, passes = set(small), 0
    while waiting and passes < 1000:
        passes += 1
        waiting -= {int(r["id"]) for r in ref.execute(BARE_CLAIM, claim).fetchall()}
    ref.close()
    return {"goal": "small tenant leased in the first pass after it falls due",
            "large_tenant_due": 20_000, "small_tenant_due": 10, "scan_batch": BATCH,
            "inflight_budget": budget,
            "small_tenant_leased_in_pass": leased_passes,  # of the first tick after due
            "small_tenant_rows_in_first_pass": len(small & set(queue.passes[0][1]))
            if queue.passes else 0,
            "first_pass_rows": first_pass_rows,
            "tick_index_entries_per_leased_row": sum(reads.values()) / max(
                1, sum(len(ids) for _, ids in queue.passes)),
            "oldest_first_passes_after_due": passes,
            "oldest_first_ticks_after_due_at_this_budget": math.ceil(
                passes / (budget // BATCH))}


# ---------------------------------------------------------------- 7. the burst


def bench_burst(server: Cluster, size: int) -> Figures:
    """``size`` deliveries due within one minute: 90 % one fan-out due at T0 (the API takes
    50,000 recipients per call, so calls of 45,000 at most), 10 % one-offs of 100 other tenants
    due at random instants in [T0, T0+60 s). One scanner thread runs ``scanner.tick`` again as
    soon as a tick ends (0.2 s pause after a tick that leased nothing) into the in-memory queue;
    four consumer threads run ``consumer.process_batch`` on batches of 10 with the recording
    channel. All on the real Postgres; the clock is the wall clock from T0."""
    conn, url = fresh_db(server, "bench_burst")
    fan, one_offs = size * 9 // 10, size - size * 9 // 10
    setup = time.perf_counter()
    chunk = 45_000
    for start in range(0, fan, chunk):
        schedules.schedule(conn, tenant="digest", channel="webhook", to=URL, at=NOW,
                           recipients=[f"p{i}" for i in range(start, min(fan, start + chunk))],
                           now=NOW - timedelta(hours=1), key=f"digest-{start}")
    rng = random.Random(12)
    for i in range(one_offs):
        schedules.schedule(conn, tenant=f"shop{i % 100}", recipients=[f"c{i}"],
                           channel="webhook", to=URL, now=NOW - timedelta(hours=1),
                           at=NOW + timedelta(seconds=rng.uniform(0, 60)), key=f"order-{i}")
    conn.execute("vacuum analyze")
    conn.close()
    setup = time.perf_counter() - setup
    alone = scanner_alone(server, "bench_burst", size)
    conn = db.connect(url)
    budget, consumers, limit_s = 1000, 4, 240.0
    fan_ids = {int(r["id"]) for r in conn.execute(
        "select id from deliveries where tenant = 'digest'").fetchall()}
    queue, channel = MemoryQueue(), RecordingChannel()
    stop = threading.Event()
    ticks: list[scanner.TickSummary] = []
    errors: list[BaseException] = []
    clock = WallClock(NOW)

    def scan() -> None:
        rt = runtime(url, clock, queue, {"webhook": channel}, scan_batch=BATCH,
                     inflight_budget=budget)
        while not stop.is_set():
            ticks.append(scanner.tick(rt))
            if ticks[-1].leased == 0:
                stop.wait(0.2)
        rt.close()

    def consume() -> None:
        rt = runtime(url, clock, queue, {"webhook": channel})
        while not stop.is_set():
            bodies = queue.take(10)
            if not bodies:
                stop.wait(0.01)
                continue
            consumer.process_batch(sqs_event(bodies), rt)
            queue.done(len(bodies))
        rt.close()

    def guarded(work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                work()
            except BaseException as exc:  # noqa: BLE001 (raised again in the main thread)
                errors.append(exc)
                stop.set()

        return run

    threads = [threading.Thread(target=guarded(scan))]
    threads += [threading.Thread(target=guarded(consume)) for _ in range(consumers)]
    clock.origin = time.monotonic()  # T0 is now
    for thread in threads:
        thread.start()
    while len(channel.sends) < size and not stop.is_set() and \
            time.monotonic() - clock.origin < limit_s:
        time.sleep(0.05)
    stop.set()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    due = {r["delivery_key"]: (r["due_at"], r["tenant"]) for r in conn.execute(
        "select delivery_key, due_at, tenant from deliveries").fetchall()}
    conn.close()
    late: dict[str, list[float]] = {"all": [], "fan_out": [], "one_offs": []}
    for key, sent_at in channel.sends:
        due_at, tenant = due[key]
        seconds = (clock.at(sent_at) - due_at).total_seconds()
        late["all"].append(seconds)
        late["fan_out" if tenant == "digest" else "one_offs"].append(seconds)
    fan_published = max((t for t, ids in queue.passes if fan_ids.intersection(ids)),
                        default=clock.origin) - clock.origin
    last_publish = max((t for t, _ in queue.passes), default=clock.origin) - clock.origin
    fan_done = max(late["fan_out"], default=float("nan"))
    figures: Figures = {
        "goal": "lateness bounded by the drain arithmetic, not by the burst's size",
        **alone,
        "deliveries": size, "fan_out": fan, "one_offs": one_offs, "one_off_tenants": 100,
        "scan_batch": BATCH, "inflight_budget": budget, "consumer_threads": consumers,
        "setup_s": setup, "sent": len(channel.sends),
        "sent_twice": len(channel.sends) - len({k for k, _ in channel.sends}),
        "ticks": len(ticks), "passes": sum(t.passes for t in ticks),
        "last_handed_to_queue_s": last_publish,
        "fan_out_last_handed_to_queue_s": fan_published,
        "fan_out_all_sent_s": fan_done,
        "fan_out_sends_per_s": fan / fan_done if fan_done > 0 else float("nan"),
    }
    for group, values in late.items():
        figures[f"lateness_{group}_p50_s"] = percentile(values, 50)
        figures[f"lateness_{group}_p99_s"] = percentile(values, 99)
        figures[f"lateness_{group}_max_s"] = max(values, default=float("nan"))
    return figures


def scanner_alone(server: Cluster, template: str, size: int) -> Figures:
    """The same burst on a copy, every delivery due, no consumer, an in-flight budget as large
    as the burst: how fast back-to-back ticks hand it all to the queue."""
    conn, url = fresh_db(server, f"{template}_scanner", template)
    conn.close()
    queue = MemoryQueue()
    rt = runtime(url, FixedClock(NOW + timedelta(seconds=60)), queue,
                 {"webhook": RecordingChannel()}, scan_batch=BATCH, inflight_budget=size)
    rt.connection()
    start, leased, ticks = time.perf_counter(), 0, 0
    while leased < size and ticks < 100:
        leased += scanner.tick(rt, refill=False).leased
        ticks += 1
    took = time.perf_counter() - start
    rt.close()
    return {"scanner_alone_inflight_budget": size, "scanner_alone_ticks": ticks,
            "scanner_alone_all_handed_to_queue_s": took,
            "scanner_alone_rows_per_s": leased / took}


# ---------------------------------------------------------------- PgQueuer


def start_pgqueuer(server: Cluster) -> tuple[pgq.PgQueuer | None, Figures]:
    reason = pgq.missing()
    if reason is not None:
        return None, {"skipped": reason}
    db.create_database(server.direct, "bench_pgqueuer")
    queue = pgq.PgQueuer(server.url("bench_pgqueuer"))
    queue.fill(200_000)  # batches of 100, then of 1,000 (at_deployed_batch)
    for _ in range(5):
        queue.dequeue(BATCH)
    return queue, {**pgq.versions(), "jobs_queued": 200_000, "batch": BATCH,
                   "through": "the same PgBouncer (asyncpg's statement cache off)",
                   "measured_in": "scanner_tick (alternating with the ticks)"}


# ---------------------------------------------------------------- 8. the earlier figures


def bench_fan_out(server: Cluster) -> Figures:
    conn, _ = fresh_db(server, "bench_fanout")
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


def bench_lease(server: Cluster) -> Figures:
    """Leasing 1,000 due rows (one statement) with 10,000 vs 100,000 rows in the table."""
    figures: Figures = {}
    for rows in (10_000, 100_000):
        conn, _ = fresh_db(server, f"bench_lease_{rows}")
        sid = add_schedule(conn, tenant="t", key="future", due=NOW + timedelta(days=1))
        add_rows(conn, tenant="t", schedule_id=sid, count=rows - 1, due=NOW + timedelta(days=1))
        add_schedule(conn, tenant="t", key="due", due=NOW,
                     recipients=[f"d{i}" for i in range(1000)])
        conn.execute("vacuum analyze")
        params = {**LEASE_PARAMS, "batch": 1000, "share": 1000}

        def lease(c: db.Connection = conn, p: dict[str, Any] = params) -> None:
            with db.transaction(c):
                leased = db.fetch_all(c, "lease_due", p)
                assert len(leased) == 1000, len(leased)

        figures[f"lease_1000_of_{rows}_ms"] = 1000 * timed(lease)
        conn.close()
    figures["lease_cost_ratio_100k_over_10k"] = (figures["lease_1000_of_100000_ms"]
                                                 / figures["lease_1000_of_10000_ms"])
    return figures


def bench_recheck(server: Cluster) -> Figures:
    conn, _ = fresh_db(server, "bench_recheck")
    add_schedule(conn, tenant="t", key="k", due=NOW, recipients=[f"r{i}" for i in range(1000)])
    ids = [r["id"] for r in conn.execute("select id from deliveries limit 10").fetchall()]
    rounds = 200
    batched = timed(lambda: [db.fetch_all(conn, "recheck_load", {"ids": ids})
                             for _ in range(rounds)])
    single = timed(lambda: [db.fetch_all(conn, "recheck_load", {"ids": [i]})
                            for _ in range(rounds) for i in ids])
    conn.close()
    return {"batch_of_10_ms": 1000 * batched / rounds, "ten_singles_ms": 1000 * single / rounds,
            "singles_over_batch": single / batched}


def bench_recurrence() -> Figures:
    rec = Recurrence.parse("FREQ=WEEKLY;BYDAY=MO,WE,FR;BYHOUR=9;BYMINUTE=0", "Europe/Berlin",
                           "2027-01-04T09:00")
    n = 1000
    seconds = timed(lambda: rec.occurrences_after(NOW, n))
    step = timed(lambda: [rec.next_after(NOW + timedelta(days=i)) for i in range(200)])
    return {"occurrences_per_second_in_one_call": n / seconds,
            "next_after_calls_per_second": 200 / step}


# ---------------------------------------------------------------- the run


def machine(server: Cluster) -> Figures:
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    memory = next((int(line.split()[1]) for line in
                   Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal")), 0)
    with db.connect(server.direct) as conn:
        settings = {r["name"]: r["setting"] for r in conn.execute("""
            select name, setting from pg_settings
            where name in ('server_version', 'shared_buffers', 'synchronous_commit',
                           'fsync', 'max_connections')""").fetchall()}
    version = subprocess.run([pooler.binary(), "--version"], capture_output=True, text=True,
                             check=False).stdout.splitlines()
    return {"nproc": os.cpu_count(), "cpu": cpu, "memory_gib": round(memory / 2**20, 1),
            "python": platform.python_version(), "postgres": settings,
            "pooler": {"version": version[0] if version else "?",
                       "pool_mode": "transaction", "server_reset_query": "DISCARD ALL",
                       "server_round_robin": 1, "default_pool_size": 20,
                       "server_idle_timeout_s": 5},
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}


def rounded(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isnan(value) else round(value, 3)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def main() -> int:
    logger.setLevel(logging.WARNING)  # a line per tick and per batch would drown the figures
    burst = int(os.environ.get("BENCH_BURST", "100000"))
    drain = int(os.environ.get("BENCH_DRAIN", "100000"))
    only = {s for s in os.environ.get("BENCH_ONLY", "").split(",") if s}
    started = time.perf_counter()
    results: Figures = {}

    def figure(name: str, work: Callable[[], Figures]) -> None:
        if only and name not in only:
            return
        took = time.perf_counter()
        results[name] = work()
        results[name]["bench_s"] = time.perf_counter() - took
        print(f"{name}: {results[name]['bench_s']:.1f} s", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="reminders-bench-") as tmp:
        direct = stack.start_postgres(Path(tmp) / "pg", keep_running=False)
        bouncer = pooler.start(direct, Path(tmp) / "pooler", stack.free_port())
        server = Cluster(direct=direct, pooler=bouncer)
        try:
            results["machine"] = machine(server)
            make_base(server)
            # 100,000 rows to copy: built only when a figure that uses it runs.
            claim_tpl = (claim_template(server)
                         if not only or only & {"lease_statement", "scanner_tick"}
                         else "")
            pgqueuer, pgq_figures = (start_pgqueuer(server)
                                     if not only or only & {"scanner_tick"}
                                     else (None, {}))
            results["pgqueuer"] = pgq_figures
            figure("lease_statement", lambda: bench_lease_statement(server, claim_tpl))
            figure("scanner_tick", lambda: bench_tick(server, pgqueuer, claim_tpl))
            if pgqueuer is not None:
                pgqueuer.close()
            figure("lease_vs_pgqueuer", lambda: bench_lease_vs_pgqueuer(server))
            figure("lease_variants", lambda: bench_lease_variants(server))
            figure("index_reads", lambda: bench_index_reads(server))
            figure("consumer", lambda: bench_consumer(server))
            figure("consumer_webhooks", lambda: bench_consumer_webhooks(server))
            figure("consumer_batch_size", lambda: bench_consumer_batch_size(server))
            figure("consumer_database", lambda: bench_consumer_database(server))
            figure("fairness", lambda: bench_fairness(server))
            figure("burst", lambda: bench_burst(server, burst))
            figure("drain", lambda: bench_drains(server, drain))
            figure("fan_out", lambda: bench_fan_out(server))
            figure("schedule_call", lambda: bench_schedule_call(server))
            figure("publisher_fan_out", lambda: bench_publisher_fan_out(server))
            figure("lease", lambda: bench_lease(server))
            figure("recheck", lambda: bench_recheck(server))
            figure("recurrence", bench_recurrence)
            figure("cold_start", bench_cold_start)
            figure("aws_calls", bench_aws_calls)
            figure("cold_start_lambda_python", bench_cold_start_runtime_python)
            figure("cold_start_twin", lambda: bench_cold_start_twin(server))
            figure("cost", lambda: bench_cost(server))
            figure("console", lambda: bench_console(server))
            figure("counts_trigger", lambda: bench_counts_trigger(server))
            figure("console_indexes", lambda: bench_console_indexes(server))
            figure("trigger_search_path", lambda: bench_trigger_search_path(server))
            figure("bounds", lambda: bench_bounds(server))
            figure("pacing", lambda: bench_pacing(server))
        finally:
            bouncer.stop()
        # Stopped before its directory goes: a server still writing WAL there (a checkpoint
        # after the write-heavy figures) makes the removal fail.
        stack.stop_postgres(Path(tmp) / "pg")
    results["total_s"] = time.perf_counter() - started
    results["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(rounded(results), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
