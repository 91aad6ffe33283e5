"""What one consumer batch costs as it grows, and how many deliveries a second the database side
takes with several consumers at once (``consumer_batch_size``, ``consumer_database``).

``consumer_batch_size``: batches of 100, 200, 300 and 500 through the deployed consumer handler
(``functions.consumer.handler.handler`` with a Lambda context, as ``cost`` runs it) and the real
webhook channel, to receivers answering after 200 ms, over plain HTTP and over HTTPS (a new
connection and TLS handshake per send, as the channel makes them). The receivers run in a
process of their own on the other CPU, and the consumer (its main thread and every send thread)
on one CPU, as a 1769 MB function has one vCPU; so this process's CPU time is the consumer's
alone. A batch's wall time is split into its phases: the start (mark received, lock, load,
decide, start the attempts; one transaction), the sends, and the finish (record the attempts and
settle the deliveries; one transaction). A phase's database part is its wall time less the CPU
time the process spent in it (one thread waits on Postgres, nothing else runs).

``consumer_database``: 1, 4, 8 and 16 consumer processes, each with its own connection, run
``consumer.process_batch`` on batches of the deployed size with a channel that answers at once (a
port the project owns), taking batches from one shared queue until it is empty; every delivery
was leased by the scanner beforehand (not timed). The figure is deliveries settled per second,
with Postgres's CPU time (every process of the server, from /proc), the consumers' CPU time,
PgBouncer's CPU time (the consumers reach Postgres through it, as the deployed ones go through
RDS Proxy; on AWS that CPU is the proxy's, not the instance's) and the WAL written, each per
delivery. The consumers and Postgres share this machine's two cores,
so the rate says what this machine takes; what carries over to another server is the work per
delivery.

Both run the consumer's sessions without prepared statements, as deployed
(``REMINDERS_DB_PREPARE=off``: RDS Proxy pins sessions that prepare). With them, Postgres
switches to generic plans after a few batches, and those join ``unnest(ids, tokens)`` to the
deliveries by nested loop: a batch of 300 then takes about 1.8 times as long.

``BENCH_KEEP_ALIVE=1`` makes the receivers of ``consumer_batch_size`` answer in HTTP/1.1 and keep
their connections, so the channel reuses them from one batch to the next (by default they answer
in HTTP/1.0 and close each one, so every send connects anew).
"""

from __future__ import annotations

import multiprocessing
import os
import ssl
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

from reminders import consumer, db, scanner
from reminders.channels.signing import new_secret
from reminders.clock import FixedClock
from reminders.runtime import Runtime
from tests.bench.cost import (
    CONSUMER_BATCH,
    CONSUMER_INSTANCES,
    CONSUMER_MEMORY_MIB,
    DEPLOYED_PREPARE,
    invoke,
)
from tests.bench.support import (
    HOOK_HOST,
    NOW,
    Cluster,
    MemoryQueue,
    RecordingChannel,
    add_schedule,
    fresh_db,
    keep_alive_requested,
    one_cpu,
    receivers,
    runtime,
    sqs_event,
    tls_webhook_channel,
)
from tests.certs import self_signed

Figures = dict[str, Any]

SIZES = (100, 200, 300, 500)
ROUNDS = 3                  # batches of each size and scheme; the figures are their medians
WARM_UP = 10                # one batch of this size per scheme first (the TLS context, imports)
RECEIVER_DELAY_S = 0.2
CONNECTIONS = (1, 4, 8, 16)
DATABASE_ROUNDS = 2         # each connection count, in turn; medians
DELIVERIES_PER_RUN = 12_000
CONSUMER_CLOCK = FixedClock(NOW + timedelta(seconds=1))


# ---------------------------------------------------------------- consumer_batch_size


@contextmanager
def phases() -> Iterator[dict[str, list[float]]]:
    """Wall and process CPU seconds of the consumer's start, send and finish phases, as
    ``{phase: [wall, cpu]}`` summed over the batch (a retried start counts twice); and, as
    ``handshake``, the CPU seconds the send threads spent inside TLS handshakes (OpenSSL's
    ``SSL_do_handshake``, which runs without Python's lock: a second vCPU takes that part)."""
    spent: dict[str, list[float]] = {"handshake": [0.0, 0.0]}
    names = {"start": "_start", "send": "_send_all", "finish": "_finish"}
    originals = {phase: getattr(consumer, name) for phase, name in names.items()}
    handshake = ssl.SSLSocket.do_handshake
    lock = threading.Lock()

    def shake(sock: ssl.SSLSocket, *args: Any, **kwargs: Any) -> None:
        cpu = time.thread_time()
        try:
            handshake(sock, *args, **kwargs)
        finally:
            took = time.thread_time() - cpu
            with lock:
                spent["handshake"][1] += took

    def timed(phase: str, work: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return work(*args, **kwargs)
            finally:
                total = spent.setdefault(phase, [0.0, 0.0])
                total[0] += time.perf_counter() - wall
                total[1] += time.process_time() - cpu
        return run

    for phase, name in names.items():
        setattr(consumer, name, timed(phase, originals[phase]))
    ssl.SSLSocket.do_handshake = shake  # type: ignore[method-assign,assignment]
    try:
        yield spent
    finally:
        ssl.SSLSocket.do_handshake = handshake  # type: ignore[method-assign]
        for phase, name in names.items():
            setattr(consumer, name, originals[phase])


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def _reset_peak_rss() -> bool:
    """Linux sets VmHWM back to the current RSS when 5 is written to clear_refs."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def bench_consumer_batch_size(server: Cluster) -> Figures:
    secret = new_secret()
    per_scheme = WARM_UP + ROUNDS * sum(SIZES)
    keep_alive = keep_alive_requested()
    with tempfile.TemporaryDirectory(prefix="reminders-tls-") as tmp:
        cert, key = self_signed(Path(tmp), HOOK_HOST)
        with receivers(secret, cert, key, keep_alive) as (plain_port, tls_port, finish):
            hooks = {"http": f"http://127.0.0.1:{plain_port}/hooks/b?delay={RECEIVER_DELAY_S}",
                     "https": f"https://{HOOK_HOST}:{tls_port}/hooks/b?delay={RECEIVER_DELAY_S}"}
            conn, url = fresh_db(server, "bench_batch_size")
            queues: dict[str, MemoryQueue] = {}
            for scheme, hook in hooks.items():
                # Plaintext rows (no KMS in the benchmark); sealed ones cost a Decrypt a process.
                conn.execute("insert into endpoints (url, secret) values (%s, %s)",
                             (hook, secret))
                add_schedule(conn, tenant="acme", key=scheme, due=NOW, url=hook,
                             recipients=[f"{scheme}{i}" for i in range(per_scheme)])
                queues[scheme] = MemoryQueue()
                scan = runtime(url, FixedClock(NOW), queues[scheme], {}, scan_batch=1000,
                               inflight_budget=100_000)
                leased = scanner.tick(scan).leased
                scan.close()
                assert leased == per_scheme, (scheme, leased)
            conn.execute("vacuum analyze")
            conn.close()
            rt = runtime(url, CONSUMER_CLOCK, MemoryQueue(), {}, send_concurrency=max(SIZES),
                         db_prepare=DEPLOYED_PREPARE)
            rt.channels = {"webhook": tls_webhook_channel(rt.settings, cert)}
            rt.connection()
            figures: Figures = {
                "goal": "where a batch's time and CPU go as it grows (capacity.md: throughput)",
                "receiver_delay_ms": 1000 * RECEIVER_DELAY_S, "batches_each": ROUNDS,
                "consumer_cpus": 1,
                "tls": "ECDSA P-256 certificate, verified by the channel's client context",
                "receivers_keep_alive": keep_alive,
                "connections": "kept and reused from batch to batch" if keep_alive else
                               "a new connection (and handshake) per send"}
            with one_cpu():
                for scheme, queue in queues.items():
                    _batch(rt, queue, WARM_UP)
                    figures[scheme] = {str(size): _size(rt, queue, size) for size in SIZES}
            rt.close()
            effects = finish()
    assert effects == 2 * per_scheme, effects
    return figures


def _batch(rt: Runtime, queue: MemoryQueue, size: int) -> dict[str, float]:
    event = sqs_event(queue.take(size))
    with phases() as spent:
        cpu = time.process_time()
        answer, _, wall = invoke("consumer", event, rt, CONSUMER_MEMORY_MIB, 60)
        cpu = time.process_time() - cpu
    assert answer == {"batchItemFailures": []}, answer
    one = {"batch_ms": 1000 * wall, "cpu_ms": 1000 * cpu}
    for phase, (phase_wall, phase_cpu) in spent.items():
        one[f"{phase}_ms"] = 1000 * phase_wall
        one[f"{phase}_cpu_ms"] = 1000 * phase_cpu
    one["database_ms"] = sum(one[f"{p}_ms"] - one[f"{p}_cpu_ms"] for p in ("start", "finish"))
    del one["handshake_ms"]  # only its CPU time is kept (summed over threads running at once)
    return one


def _size(rt: Runtime, queue: MemoryQueue, size: int) -> Figures:
    rss = _status_kib("VmRSS")
    peak_reset = _reset_peak_rss()
    runs = [_batch(rt, queue, size) for _ in range(ROUNDS)]
    median = {name: statistics.median(r[name] for r in runs) for name in runs[0]}
    batch_s = median["batch_ms"] / 1000
    return {
        **median,
        "cpu_us_per_message": 1000 * median["cpu_ms"] / size,
        "handshake_cpu_us_per_message": 1000 * median["handshake_cpu_ms"] / size,
        "messages_per_s_per_instance": size / batch_s,
        f"per_minute_at_{CONSUMER_INSTANCES}_instances": CONSUMER_INSTANCES * size / batch_s * 60,
        "peak_rss_growth_mib": (_status_kib("VmHWM") - rss) / 1024 if peak_reset else None,
    }


# ---------------------------------------------------------------- consumer_database


def _db_worker(url: str, batches: Queue[Any], results: Queue[Any], ready: Queue[Any],
               go: Event, finished: Event) -> None:
    """One consumer with its own connection: batches from the shared queue until ``None``."""
    rt = runtime(url, CONSUMER_CLOCK, MemoryQueue(), {"webhook": RecordingChannel()},
                 send_concurrency=CONSUMER_BATCH, db_prepare=DEPLOYED_PREPARE)
    rt.connection()
    ready.put(os.getpid())
    go.wait()
    cpu = time.process_time()
    done, failed = 0, 0
    while (bodies := batches.get()) is not None:
        answer = consumer.process_batch(sqs_event(bodies), rt)
        failed += len(answer["batchItemFailures"])
        done += len(bodies)
    results.put((done, failed, time.process_time() - cpu))
    finished.wait()  # the backend stays until the server's CPU time has been read
    rt.close()


def _server_cpu(postmaster: int) -> dict[int, int]:
    """Nanoseconds on a CPU of the postmaster and of every process it started, by pid, from
    each one's schedstat (/proc's utime and stime count whole 10 ms ticks)."""
    spent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if int(entry.name) == postmaster or ppid == postmaster:
                spent[int(entry.name)] = int((entry / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return spent


def _server_cpu_since(postmaster: int, before: dict[int, int]) -> float:
    """Seconds the server's processes spent on a CPU since ``before``, over those alive at the
    end (one that started and ended in between, an autovacuum worker, is not seen)."""
    now = _server_cpu(postmaster)
    return sum(ns - before.get(pid, 0) for pid, ns in now.items()) / 1e9


def _pooler_cpu(pid: int) -> float:
    """Seconds PgBouncer (one process) has spent on a CPU."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return float("nan")


def _run(url: str, postmaster: int, bouncer: int, queue: MemoryQueue,
         connections: int) -> Figures:
    """``DELIVERIES_PER_RUN`` leased deliveries settled by ``connections`` consumers at once."""
    ctx = multiprocessing.get_context("fork")
    batches: Queue[Any] = ctx.Queue()
    results: Queue[Any] = ctx.Queue()
    ready: Queue[Any] = ctx.Queue()
    go, finished = ctx.Event(), ctx.Event()
    for _ in range(DELIVERIES_PER_RUN // CONSUMER_BATCH):
        batches.put(queue.take(CONSUMER_BATCH))
    for _ in range(connections):
        batches.put(None)
    workers = [ctx.Process(target=_db_worker, args=(url, batches, results, ready, go, finished))
               for _ in range(connections)]
    for worker in workers:
        worker.start()
    try:
        for _ in workers:
            ready.get(timeout=60)
        with db.connect(url) as conn:
            wal = conn.execute("select pg_current_wal_lsn() as lsn").fetchone()
            server_before = _server_cpu(postmaster)
            pooler_before = _pooler_cpu(bouncer)
            started = time.perf_counter()
            go.set()
            outcomes = [results.get(timeout=300) for _ in workers]
            took = time.perf_counter() - started
            server_s = _server_cpu_since(postmaster, server_before)
            pooler_s = _pooler_cpu(bouncer) - pooler_before
            wal_bytes = conn.execute("select pg_wal_lsn_diff(pg_current_wal_lsn(), %s) as n",
                                     ((wal or {})["lsn"],)).fetchone()
    finally:
        finished.set()
        for worker in workers:
            worker.join(timeout=60)
    done = sum(d for d, _, _ in outcomes)
    consumers_s = sum(c for _, _, c in outcomes)
    assert done == DELIVERIES_PER_RUN - DELIVERIES_PER_RUN % CONSUMER_BATCH, done
    assert sum(f for _, f, _ in outcomes) == 0, outcomes
    return {"deliveries": done, "seconds": took, "deliveries_per_s": done / took,
            "server_cpu_us_per_delivery": 1e6 * server_s / done,
            "consumer_cpu_us_per_delivery": 1e6 * consumers_s / done,
            "pooler_cpu_us_per_delivery": 1e6 * pooler_s / done,
            "server_cores_busy": server_s / took, "consumer_cores_busy": consumers_s / took,
            "wal_bytes_per_delivery": float((wal_bytes or {})["n"]) / done}


def bench_consumer_database(server: Cluster) -> Figures:
    total = DELIVERIES_PER_RUN * len(CONNECTIONS) * DATABASE_ROUNDS
    conn, url = fresh_db(server, "bench_consumer_db")
    for start in range(0, total, 45_000):  # the API takes 50,000 recipients a call at most
        add_schedule(conn, tenant="acme", key=f"db{start}", due=NOW,
                     recipients=[f"p{i}" for i in range(start, min(total, start + 45_000))])
    conn.execute("vacuum analyze")
    queue = MemoryQueue()
    scan = runtime(url, FixedClock(NOW), queue, {}, scan_batch=1000,
                   inflight_budget=1_000_000, scan_seconds=600)
    leased = scanner.tick(scan).leased
    scan.close()
    assert leased == total, leased
    row = conn.execute("show data_directory").fetchone()
    assert row is not None
    postmaster = int((Path(str(row["data_directory"])) / "postmaster.pid").read_text().split()[0])
    runs: dict[int, list[Figures]] = {c: [] for c in CONNECTIONS}
    for _ in range(DATABASE_ROUNDS):
        for connections in CONNECTIONS:
            runs[connections].append(_run(url, postmaster, server.pooler.pid, queue,
                                          connections))
    states = Counter({r["state"]: int(r["n"]) for r in conn.execute(
        "select state, count(*) as n from deliveries group by state").fetchall()})
    conn.close()
    assert states == {"sent": sum(r["deliveries"] for rs in runs.values() for r in rs)}, states
    figures: Figures = {
        "goal": "deliveries a second the database side takes (capacity.md: throughput)",
        "batch": CONSUMER_BATCH, "deliveries_per_run": DELIVERIES_PER_RUN,
        "runs_each": DATABASE_ROUNDS, "channel": "answers at once (no network)",
    }
    for connections, each in runs.items():
        figures[f"connections_{connections}"] = {
            **{name: statistics.median(r[name] for r in each) for name in each[0]},
            "deliveries_per_s_each_run": [r["deliveries_per_s"] for r in each],
            "server_cpu_us_per_delivery_each_run": [r["server_cpu_us_per_delivery"]
                                                    for r in each],
        }
    return figures
