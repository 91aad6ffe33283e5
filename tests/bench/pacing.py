"""What pacing does and costs (``pacing``): sends a second at the rate limit from 1 and from 8
consumers, and what the token bucket costs each send in Postgres, against a send without it.

``rate_1`` / ``rate_8``: a webhook endpoint paced at ``RATE`` a second (burst ``BURST``), a
backlog of three times what ``SECONDS`` can send, the service's own ``scanner.tick`` in a
loop and 1 or 8 consumer threads (each its own connection through the pooler) running
``consumer.process_batch`` on batches of 10 from an in-memory queue, all on the wall clock. The
channel records each send's time (a port the project owns: it answers at once).

Measured at the instants the bucket gave the tokens (each sent attempt's ``started_at``: the
batch's instant, which its ``pace_take`` used, in the transaction that started the attempt),
not at the receiver: the send follows its token by a moment that varies with the machine's
load, and that moment is no part of the bucket. Reported, from the bucket's first grant to its
last: what it made beyond the initial burst a second, all but what overflowed,
``(sent + held - BURST) / span`` (``held``: the tokens in its shards at its last grant, made but
not yet asked for, the deliveries booked for them still on their way back through the scanner),
as a ratio to ``RATE`` (goal: 0.95 to 1.0; tokens that overflowed a full shard, no send there
to take them, lower it); what it granted alone, ``(sent - BURST) / span`` (a correct bucket
cannot exceed ``RATE``, since it holds at most ``BURST`` at its first grant and refills at
``RATE``); the rate over the run (at most ``RATE`` + ``BURST`` / its
length); and the most sends in any one-second window (at most ``RATE`` + ``BURST``). The same
two figures at the receiver are reported beside them.
``RATE`` is one a single consumer reaches on a loaded two-core machine; above what the
consumers can take, the rate they reach is theirs, not the bucket's.

``cost``: batches of 10 leased deliveries settled by one consumer, with the endpoint unpaced
and then paced at a rate that never runs out (so both send every delivery); statements the
consumer ran (named, through ``db.before_statement``), round trips, and the WAL written, each
per send, and their ratios paced / unpaced.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from reminders import consumer, db, pacing, scanner
from tests.bench.support import (
    NOW,
    URL,
    Cluster,
    MemoryQueue,
    RecordingChannel,
    WallClock,
    add_schedule,
    fresh_db,
    postgres_cpu_seconds,
    runtime,
    sqs_event,
)
from tests.round_trips import count_round_trips

Figures = dict[str, Any]
RATE = 20.0
BURST = 20.0
SECONDS = 8.0
BATCH = 10
COST_BATCHES = 30


def _rate_run(server: Cluster, consumers: int) -> Figures:
    conn, url = fresh_db(server, f"bench_pacing_{consumers}")
    backlog = int(RATE * SECONDS * 3)
    add_schedule(conn, tenant="acme", key="paced", due=NOW - timedelta(minutes=1),
                 recipients=[f"p{i}" for i in range(backlog)])
    clock = WallClock(NOW)
    pacing.set_rate(conn, pacing.endpoint_key(URL), RATE, BURST, clock.now())
    queue = MemoryQueue()
    channel = RecordingChannel()
    scan = runtime(url, clock, queue, {}, scan_batch=100, inflight_budget=400,
                   refill_patience_seconds=0, scan_seconds=1)
    fleet = [runtime(url, clock, queue, {"webhook": channel}, send_concurrency=BATCH)
             for _ in range(consumers)]
    stop = threading.Event()
    failed: list[int] = []

    def scan_loop() -> None:
        while not stop.is_set():
            scanner.tick(scan)
            stop.wait(0.05)

    def consume(rt: Any) -> None:
        while not stop.is_set():
            bodies = queue.take(BATCH)
            if not bodies:
                stop.wait(0.005)
                continue
            answer = consumer.process_batch(sqs_event(bodies), rt)
            failed.append(len(answer["batchItemFailures"]))
            queue.done(len(bodies))

    threads = [threading.Thread(target=scan_loop)] + [
        threading.Thread(target=consume, args=(rt,)) for rt in fleet]
    for t in threads:
        t.start()
    time.sleep(SECONDS)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    for rt in [scan, *fleet]:
        rt.close()
    # The instants the bucket gave the sends: an attempt is started at its batch's instant, in
    # the transaction whose pace_take took its token.
    taken = sorted((r["started_at"] - NOW).total_seconds() for r in conn.execute(
        "select a.started_at from attempts a where a.outcome = 'sent'").fetchall())
    held = _held_at(conn, NOW + timedelta(seconds=taken[-1])) if taken else 0.0
    conn.close()
    received = sorted(t for _, t in channel.sends)
    bucket_span = taken[-1] - taken[0] if len(taken) > 1 else 0.0
    # The bucket's promise, from its first grant to its last: at most what it held then (never
    # more than BURST) plus RATE a second since. The sends beyond the burst, a second.
    steady = (len(taken) - BURST) / bucket_span if bucket_span else 0.0
    # What the bucket made over the span (BURST at its first grant, RATE a second since) went
    # to a send, was still in it at its last grant (made, not yet asked for: the deliveries
    # booked for those tokens were on their way back through the scanner), or overflowed a
    # full shard with no send there to take it (lost). The bucket's own figure: all but the lost.
    released = (len(taken) + held - BURST) / bucket_span if bucket_span else 0.0
    received_span = received[-1] - received[0] if len(received) > 1 else 0.0
    return {"consumers": consumers, "rate_set_per_s": RATE, "burst": BURST,
            "sent": len(received), "sent_per_the_ledger": len(taken),
            "failed_messages": sum(failed),
            "bucket_seconds": bucket_span,
            "rate_beyond_the_burst_per_s": steady,
            "ratio_to_rate": steady / RATE,
            "held_at_last_grant": round(held, 2),
            "held_as_seconds_of_rate": round(held / RATE, 3),
            "rate_made_beyond_the_burst_per_s": released,
            "bucket_ratio_to_rate": released / RATE,
            "lost_to_overflow": round(BURST + RATE * bucket_span - len(taken) - held, 2),
            # Within 5% at the bucket; never above in what it granted.
            "within_5_percent_never_above": released / RATE >= 0.95 and steady / RATE <= 1.0,
            "rate_over_the_run_per_s": len(taken) / bucket_span if bucket_span else 0.0,
            "bound_over_the_run_per_s": RATE + BURST / bucket_span if bucket_span else 0.0,
            "most_in_one_second": _most_in_a_second(taken),
            "bound_in_one_second": RATE + BURST,
            "per_second": [sum(1 for t in taken if i <= t - taken[0] < i + 1)
                           for i in range(int(bucket_span) + 1)],
            # What the receiver saw: the same sends, each a moment after its token, that
            # moment varying with the machine's load (not the bucket's to bound).
            "at_the_receiver": {
                "rate_over_the_run_per_s": len(received) / received_span
                if received_span else 0.0,
                "most_in_one_second": _most_in_a_second(received)}}


def _held_at(conn: db.Connection, at: Any) -> float:
    """The tokens the bucket held at ``at`` (its last grant): each shard's tokens at its last
    take, refilled at its share of the rate since, up to its share of the burst."""
    row = conn.execute(
        "select coalesce(sum(least(c.burst / c.shards, s.tokens + greatest(0, extract(epoch"
        " from (%s - s.refilled_at))::float8) * c.rate / c.shards)), 0) as held"
        " from rate_shards s join channel_rates c on c.key = s.key", (at,)).fetchone()
    return float((row or {})["held"])


def _most_in_a_second(ts: list[float]) -> int:
    """The most of ``ts`` (sorted, in seconds) in any closed one-second window."""
    best, j = 0, 0
    for i, t in enumerate(ts):
        while ts[j] < t - 1.0:
            j += 1
        best = max(best, i - j + 1)
    return best


@contextmanager
def _statements() -> Iterator[list[str]]:
    names: list[str] = []
    before = db.before_statement
    db.before_statement = names.append
    try:
        yield names
    finally:
        db.before_statement = before


def _cost_run(server: Cluster, paced: bool) -> Figures:
    conn, url = fresh_db(server, f"bench_pacing_cost_{int(paced)}")
    total = BATCH * COST_BATCHES
    add_schedule(conn, tenant="acme", key="cost", due=NOW - timedelta(minutes=1),
                 recipients=[f"c{i}" for i in range(total)])
    if paced:  # never runs out: every send takes a token, none waits
        pacing.set_rate(conn, pacing.endpoint_key(URL), 100_000.0, 100_000.0, NOW)
    queue = MemoryQueue()
    scan = runtime(url, _Fixed(), queue, {}, scan_batch=1000, inflight_budget=100_000,
                   scan_seconds=600)
    assert scanner.tick(scan).leased == total
    scan.close()
    rt = runtime(url, _Fixed(), queue, {"webhook": RecordingChannel()}, send_concurrency=BATCH)
    rt_conn = rt.connection()
    statements, trips, wal = [], [], []
    cpu_before = postgres_cpu_seconds(server.direct)
    for _ in range(COST_BATCHES):
        bodies = queue.take(BATCH)
        lsn = conn.execute("select pg_current_wal_lsn() as lsn").fetchone()
        def one_batch(b: list[str] = bodies) -> Any:
            return consumer.process_batch(sqs_event(b), rt)

        with _statements() as names:
            trips.append(count_round_trips(rt_conn, one_batch))
        statements.append(len(names))
        row = conn.execute("select pg_wal_lsn_diff(pg_current_wal_lsn(), %s) as n",
                           ((lsn or {})["lsn"],)).fetchone()
        wal.append(float((row or {})["n"]))
        queue.done(len(bodies))
    cpu = postgres_cpu_seconds(server.direct) - cpu_before
    sent = conn.execute("select count(*) as n from deliveries where state = 'sent'").fetchone()
    assert sent is not None and sent["n"] == total, sent
    rt.close()
    conn.close()
    return {"statements_per_send": statistics.median(statements) / BATCH,
            "round_trips_per_batch": statistics.median(trips),
            "wal_bytes_per_send": statistics.median(wal) / BATCH,
            # The server's CPU over all the batches (the bench's own WAL reads included, the
            # same in both runs), a send's share: to the clock tick over total sends.
            "db_cpu_us_per_send": cpu / total * 1e6}


class _Fixed:
    def now(self) -> Any:
        return NOW


def bench_pacing(server: Cluster) -> Figures:
    unpaced = _cost_run(server, paced=False)
    paced = _cost_run(server, paced=True)
    return {
        "goal": "sends at the rate (within 5%, never above) from 1 and 8 consumers; the bucket's "
                "Postgres cost per send as a ratio to a send without pacing",
        "rate_1": _rate_run(server, 1), "rate_8": _rate_run(server, 8),
        "cost": {"unpaced": unpaced, "paced": paced,
                 "statements_ratio": paced["statements_per_send"]
                 / unpaced["statements_per_send"],
                 "wal_bytes_ratio": paced["wal_bytes_per_send"] / unpaced["wal_bytes_per_send"],
                 "round_trips_ratio": paced["round_trips_per_batch"]
                 / unpaced["round_trips_per_batch"],
                 "db_cpu_ratio": paced["db_cpu_us_per_send"]
                 / max(unpaced["db_cpu_us_per_send"], 1e-9)},
    }
