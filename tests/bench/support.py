"""What the benchmark figures share: the database set-up, an in-memory queue, a channel that
records its sends, runtimes for the scanner and the consumer, index-read counters, and webhook
receivers in a process of their own (HTTP and HTTPS) with a consumer held to one CPU.

Postgres is always the real (embedded) server, and every service-side statement reaches it
through a PgBouncer in transaction mode in front of it (the local stand-in for RDS Proxy,
reminders.local.pooler), as the deployed functions reach theirs: databases are created, cloned
and migrated on the server itself (:class:`Cluster`), everything timed runs on their pooled
URLs. The queue and the channel are in-process stand-ins: the figures measure the service's own
work and its database statements, not SQS (moto's SQS slows down with queue depth, so it is
never used here) nor a network.
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing
import os
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

from reminders import config, db, schedules
from reminders.channels.addresses import parse_allow_list
from reminders.channels.base import Message, Outcome, SendResult
from reminders.channels.webhook import WebhookChannel
from reminders.clock import Clock
from reminders.db import migrate
from reminders.local import pooler
from reminders.local.receiver import WebhookReceiver
from reminders.queue import LeaseMessage, Rejected
from reminders.runtime import Runtime

NOW = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
URL = "https://hooks.example.com/bench"
SECRET = "whsec_" + "A" * 32
BASE = "bench_base"  # migrated, one shared endpoint; every figure's database is a copy
HOOK_HOST = "hooks.example.test"  # named by the HTTPS receiver's certificate; is 127.0.0.1


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


@dataclass(frozen=True)
class Cluster:
    """The benchmark's Postgres: ``direct`` reaches the server itself (its ``postgres``
    database: creating, cloning and migrating databases, reading statistics), ``pooler`` is
    the PgBouncer every service-side session goes through."""

    direct: str
    pooler: pooler.Pooler

    def direct_url(self, name: str) -> str:
        return db.with_database(self.direct, name)

    def url(self, name: str) -> str:
        """The database ``name`` as the service reaches it: through the pooler."""
        return self.pooler.url(self.direct, name)

    def release(self, name: str, seconds: float = 15.0) -> None:
        """Have the pooler close its server connections to ``name`` and wait until the
        server has no client session of it left (a direct session of ours excepted): before
        the database is cloned (a template must have no session) and, for
        :func:`index_reads`, so every backend that ran work on it has flushed its statistics
        (a backend flushes them as it exits)."""
        with db.connect(self.direct_url(name)) as conn:
            def others() -> int:
                row = conn.execute("""
                    select count(*) as n from pg_stat_activity
                    where datname = current_database() and pid <> pg_backend_pid()
                      and backend_type = 'client backend'""").fetchone()
                return int((row or {"n": 0})["n"])

            if not others():
                return
            self.pooler.reconnect(self.direct, name)
            deadline = time.monotonic() + seconds
            while others():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sessions of {name} still open after {seconds} s")
                time.sleep(0.01)


def make_base(server: Cluster) -> None:
    with db.connect(db.create_database(server.direct, BASE)) as conn:
        migrate.apply(conn)
    with db.connect(server.url(BASE)) as conn:
        # A plaintext row, as before secrets were sealed: the benchmark runs without KMS.
        conn.execute("insert into endpoints (url, secret) values (%s, %s)", (URL, SECRET))


def fresh_db(server: Cluster, name: str, template: str = BASE) -> tuple[db.Connection, str]:
    """A copy of ``template``, made and migrated on the server itself (its role settings,
    search_path and timeouts, are per database and not copied with it), as the service
    reaches it: a connection through the pooler, and its pooled URL."""
    server.release(template)
    db.drop_database(server.direct, name)
    with db.connect(db.create_database(server.direct, name, template=template)) as conn:
        migrate.apply(conn)
    url = server.url(name)
    return db.connect(url), url


@contextlib.contextmanager
def untimed(conn: db.Connection) -> Iterator[db.Connection]:
    """A transaction of the benchmark's own set-up (building large tables), without the
    login's statement and lock timeouts (its role settings, the service's: 30 s and 5 s).
    ``SET LOCAL``: a session ``SET`` would not outlive its transaction behind the pooler."""
    with db.transaction(conn):
        conn.execute("set local statement_timeout = 0")
        conn.execute("set local lock_timeout = 0")
        yield conn


def add_schedule(conn: db.Connection, *, tenant: str, key: str, due: datetime,
                 recipients: Sequence[str] = ("seed",), url: str = URL) -> int:
    """A one-off schedule through the application API; returns its id."""
    result = schedules.schedule(conn, tenant=tenant, recipients=list(recipients),
                                channel="webhook", to=url, at=due,
                                now=min(due, NOW) - timedelta(minutes=1), key=key)
    return result.schedule_id


def add_rows(conn: db.Connection, *, tenant: str, schedule_id: int, count: int,
             due: datetime, state: str = "scheduled", first: int = 1, url: str = URL,
             spread: timedelta | None = None) -> None:
    """``count`` more deliveries of a schedule in one statement, shaped as ``schedule()``
    writes them (a fan-out's recipients ``r<first>`` ...). Much faster than the API for
    building large tables; the rows are indistinguishable to the scanner. ``spread``: each
    row due at random in the ``spread`` before ``due`` (a day of one-offs), not all at once;
    the rows' order on disk then says nothing of their due order."""
    with untimed(conn):
        conn.execute("""
        insert into deliveries (tenant, schedule_id, generation, recipient, channel, destination,
                                delivery_key, occurrence_at, revision, due_at, state, reason,
                                created_at, updated_at)
        select %(tenant)s, %(sid)s, 0, 'r' || g, 'webhook', %(url)s,
               'bench:' || %(sid)s || ':' || g, w.at, '1', w.at, %(state)s,
               case when %(state)s = 'sent' then 'bench' end, %(created)s, %(created)s
        from generate_series(%(first)s::bigint, %(last)s::bigint) g
        cross join lateral (  -- a draw per row (g makes the subquery correlated)
            select %(due)s::timestamptz - random() * %(spread)s::interval
                   + g * interval '0 s' as at) w""",
                 {"tenant": tenant, "sid": schedule_id, "url": url, "due": due,
                  "state": state, "created": due - timedelta(days=1), "first": first,
                  "last": first + count - 1, "spread": spread or timedelta(0)})


def backlog(conn: db.Connection, *, due_rows: int, done_rows: int = 0, tenant: str = "big",
            due: datetime = NOW - timedelta(minutes=1), spread: timedelta | None = None) -> None:
    """One tenant's fan-out: ``due_rows`` due at one instant (a tie group, the hard case for
    an index on the due time alone), after ``done_rows`` terminal ones of the same schedule;
    with ``spread``, due at random over that time before ``due`` instead (add_rows)."""
    sid = add_schedule(conn, tenant=tenant, key=f"fan-{tenant}", due=due)
    if done_rows:
        add_rows(conn, tenant=tenant, schedule_id=sid, count=done_rows, due=due, state="sent")
    add_rows(conn, tenant=tenant, schedule_id=sid, count=due_rows - 1, due=due,
             first=done_rows + 1, spread=spread)
    conn.execute("vacuum analyze")


class MemoryQueue:
    """The deliveries queue in memory. ``depth`` counts what waits and what a consumer holds,
    as SQS's approximate counts do. Each ``publish`` is one scanner pass: kept, with its time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: collections.deque[str] = collections.deque()
        self._held = 0
        self.passes: list[tuple[float, list[int]]] = []  # (monotonic time, delivery ids)

    def publish(self, messages: Sequence[LeaseMessage], *,
                concurrency: int = 1) -> list[Rejected]:
        bodies = [m.body() for m in messages]
        with self._lock:
            self._waiting.extend(bodies)
            self.passes.append((time.monotonic(), [m.delivery_id for m in messages]))
        return []

    def depth(self) -> int:
        with self._lock:
            return len(self._waiting) + self._held

    def send_raw(self, body: str, attributes: dict[str, str]) -> None:
        with self._lock:
            self._waiting.append(body)

    def take(self, limit: int = 10) -> list[str]:
        """Up to ``limit`` messages, held until :meth:`done` (a receive)."""
        with self._lock:
            taken = [self._waiting.popleft() for _ in range(min(limit, len(self._waiting)))]
            self._held += len(taken)
        return taken

    def done(self, count: int) -> None:
        """A consumer deleted ``count`` held messages."""
        with self._lock:
            self._held -= count

    def clear(self) -> None:
        with self._lock:
            self._waiting.clear()
            self._held = 0
            self.passes.clear()


@dataclass
class RecordingChannel:
    """A webhook channel that answers at once and records each send's key and time."""

    name: str = "webhook"
    honours_idempotency_key: bool = True
    send_timeout: float = 10.0
    sends: list[tuple[str, float]] = field(default_factory=list)

    def send(self, message: Message, now: Any) -> SendResult:
        self.sends.append((message.delivery_key, time.monotonic()))  # list.append is atomic
        return SendResult(Outcome.SENT, "recorded", 200)


class WallClock:
    """Scenario time that runs with the wall clock: ``start`` at the moment it is made."""

    def __init__(self, start: datetime) -> None:
        self.start = start
        self.origin = time.monotonic()

    def now(self) -> datetime:
        return self.start + timedelta(seconds=time.monotonic() - self.origin)

    def at(self, monotonic: float) -> datetime:
        return self.start + timedelta(seconds=monotonic - self.origin)


def runtime(url: str, clock: Clock, queue: MemoryQueue, channels: dict[str, Any],
            **limits: int | str) -> Runtime:
    env = {"DATABASE_URL": url, "REMINDERS_WEBHOOK_ALLOW": "127.0.0.1/32"}
    env.update({f"REMINDERS_{name.upper()}": str(value) for name, value in limits.items()})
    return Runtime(settings=config.load(env), clock=clock,
                   deliveries=queue, dlq=MemoryQueue(),  # type: ignore[arg-type]
                   parking=MemoryQueue(), channels=channels)  # type: ignore[arg-type]


def sqs_event(bodies: Sequence[str]) -> dict[str, Any]:
    return {"Records": [{
        "messageId": str(uuid.uuid4()), "receiptHandle": "r", "body": body,
        "attributes": {"ApproximateReceiveCount": "1"}, "messageAttributes": {},
        "md5OfBody": "", "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:deliveries",
        "awsRegion": "us-east-1",
    } for body in bodies]}


def settle_leased(conn: db.Connection) -> int:
    """What consumers would do, outside any timing: every live lease, pending or taken, ends
    ``sent``."""
    with untimed(conn):
        return conn.execute("""
        update deliveries set state = 'sent', reason = 'bench', lease_token = null,
                              lease_expires_at = null
        where state = 'leased'
           or id = any(array(select id from due_queue where token is not null))""").rowcount


def index_reads(server: Cluster, conn: db.Connection, work: Callable[[], Any],
                ) -> dict[str, int]:
    """Index entries each index of ``deliveries`` and of ``due_queue`` (the due set the
    scanner leases from) returned while ``work`` ran on ``conn``, a pooled connection
    (``pg_stat_user_indexes.idx_tup_read`` before and after). A backend flushes its counters
    now and then, and as it exits; behind the pooler ``work``'s transactions run on whichever
    server connection is free, so before each snapshot the pooler's server connections to the
    database are closed (:meth:`Cluster.release`) and the snapshot is read on the server
    itself. Nothing else runs on the database meanwhile."""
    database = str(conn.info.dbname)

    def snapshot() -> dict[str, int]:
        server.release(database)
        with db.connect(server.direct_url(database)) as direct:
            rows = direct.execute("""
                select indexrelname, idx_tup_read from pg_stat_user_indexes
                where relname in ('deliveries', 'due_queue')""").fetchall()
        return {r["indexrelname"]: int(r["idx_tup_read"]) for r in rows}

    before = snapshot()
    work()
    after = snapshot()
    return {name: after[name] - before.get(name, 0) for name in after
            if after[name] != before.get(name, 0)}


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


# ---------------------------------------------------------------- receivers apart, one CPU


def _serve(secret: str, cert: str, key: str, ports: Queue[Any], stop: Event,
           keep_alive: bool) -> None:
    """A process of its own, on the CPUs the consumer is kept off (:func:`one_cpu`): one
    receiver over HTTP and one over HTTPS (HTTP/1.1 keeping connections with ``keep_alive``);
    their ports on ``ports``, then, once ``stop`` is set, the effects both counted."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > 1:
        os.sched_setaffinity(0, set(cpus[1:]))
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    plain = WebhookReceiver(secret, keep_alive=keep_alive).start()
    secure = WebhookReceiver(secret, tls=tls, keep_alive=keep_alive).start()
    ports.put((plain.port, secure.port))
    stop.wait()
    ports.put(sum(plain.stats()["effects"].values()) + sum(secure.stats()["effects"].values()))
    plain.stop()
    secure.stop()


def keep_alive_requested() -> bool:
    """``BENCH_KEEP_ALIVE=1``: receivers that answer in HTTP/1.1 and keep their connections."""
    return os.environ.get("BENCH_KEEP_ALIVE", "") == "1"


@contextlib.contextmanager
def receivers(secret: str, cert: Path, key: Path, keep_alive: bool = False,
              ) -> Iterator[tuple[int, int, Callable[[], int]]]:
    """Receivers in a process of their own, so the benchmark's CPU time is the consumer's
    alone: (HTTP port, HTTPS port, a call that stops them and returns the effects counted)."""
    ctx = multiprocessing.get_context("spawn")
    ports: Queue[Any] = ctx.Queue()
    stop = ctx.Event()
    process = ctx.Process(target=_serve,
                          args=(secret, str(cert), str(key), ports, stop, keep_alive),
                          daemon=True)
    process.start()
    effects: list[int] = []

    def finish() -> int:
        if not effects:
            stop.set()
            effects.append(int(ports.get(timeout=30)))
            process.join(timeout=30)
        return effects[0]

    try:
        plain, secure = ports.get(timeout=60)
        yield int(plain), int(secure), finish
    finally:
        stop.set()
        process.join(timeout=30)
        if process.is_alive():
            process.kill()


@contextlib.contextmanager
def one_cpu() -> Iterator[None]:
    """The calling thread, and every thread it starts meanwhile (the consumer's sends), on one
    CPU, as a 1769 MB function has one vCPU; the receivers run on the others."""
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, cpus)


def tls_webhook_channel(settings: config.Settings, cert: Path) -> WebhookChannel:
    """The webhook channel as the consumer builds it, trusting ``cert`` and resolving every
    host to 127.0.0.1 (so :data:`HOOK_HOST` reaches the HTTPS receiver)."""
    return WebhookChannel(
        allow=parse_allow_list(settings.webhook_allow),
        connect_timeout=settings.webhook_connect_timeout,
        read_timeout=settings.webhook_read_timeout, send_timeout=settings.send_timeout,
        ssl_context=ssl.create_default_context(cafile=str(cert)),
        resolver=lambda host, port: ["127.0.0.1"])


def statement_reads(conn: db.Connection, name: str, params: dict[str, Any]) -> dict[str, int]:
    """What one execution of the named statement reads (EXPLAIN (ANALYZE, BUFFERS)), run in a
    transaction rolled back, so a lease or a purge measured leaves the rows as they were:
    ``buffers``, the shared buffers it touched (hit or read; planning apart), and
    ``rows_read``, the entries its index scans and the rows its sequential scans returned or
    filtered out (over every loop), which unlike buffers does not grow with a B-tree's depth
    (a small table is often read whole: its rows count as read)."""
    from reminders.db.queries import query

    with conn.transaction(force_rollback=True):
        row = conn.execute("explain (analyze, buffers, format json) " + query(name),
                           params).fetchone()
    assert row is not None
    plan = next(iter(row.values()))[0]["Plan"]
    entries = 0

    def walk(node: dict[str, Any]) -> None:
        nonlocal entries
        if node.get("Node Type") in ("Index Scan", "Index Only Scan", "Bitmap Index Scan",
                                     "Seq Scan"):
            loops = float(node.get("Actual Loops", 1))
            entries += round(loops * (float(node.get("Actual Rows", 0))
                                      + float(node.get("Rows Removed by Filter", 0))))
        for child in node.get("Plans", []):
            walk(child)

    walk(plan)
    return {"buffers": int(plan.get("Shared Hit Blocks", 0))
            + int(plan.get("Shared Read Blocks", 0)), "rows_read": entries}


def statement_buffers(conn: db.Connection, name: str, params: dict[str, Any]) -> int:
    """The shared buffers one execution of the named statement touches (statement_reads)."""
    return statement_reads(conn, name, params)["buffers"]


def postgres_cpu_seconds(direct_url: str) -> float:
    """CPU seconds (user and system) used so far by the processes of the Postgres server
    ``direct_url`` reaches (every process working in its data directory, as /proc shows them:
    the backends the pooler keeps open, and the server's own processes). A difference of two
    readings is what the server spent meanwhile, to the clock tick (10 ms on Linux); a backend
    that ended between them takes its share with it."""
    with db.connect(direct_url) as conn:
        row = conn.execute("show data_directory").fetchone()
    data = str(Path(str((row or {})["data_directory"])).resolve())
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if os.readlink(entry / "cwd") != data:
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile, or not ours to look at
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / ticks
