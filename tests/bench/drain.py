"""The drain as deployed, on a simulated clock: a fan-out of ``size`` recipients due at one
instant, one scanner tick a minute with the deployed defaults (infra/settings.py: in-flight
budget, ``scanSeconds``, ``scanBatch``, the refill's patience) while the deployed consumer fleet
(maximum concurrency x ``consumerBatchSize``, the batching window) drains the queue beside it.

A discrete-event simulation over the real code: the service's own ``scanner.tick`` and
``consumer.process_batch`` on the real Postgres behind the pooler, one actor at a time, each a
thread that runs only when the simulation hands it the turn. An actor's time is the simulated
instant it was resumed at plus the wall time it has run since (its statements, its CPU), so a
lease pass costs what it costs here, and each of the consumer instances costs what one batch
costs on one core here, as if each had its own (as Lambda's instances do; the database is not
shared between them in time, so its contention at 36 clients is not in the figure). What is
modelled, not run:

- the channel: a port fake that records each send and its simulated instant; every send of a
  batch waits for its receiver's answer (``SEND_SECONDS``, capacity.md's throughput arithmetic:
  webhooks answering in 200 ms; 1 s in :func:`bench_drains`' slower runs), charged once to
  the batch, whose sends go out all at once;
- the queue: the in-memory queue (moto's SQS slows with its depth, 531 ms for a send near
  3,000 waiting, so at the in-flight budget's depth its own time would be the figure), and
  the hand-over is the scanner publishing itself (deployed, asynchronous invokes of the
  publisher);
- the scanner's time: ``scanner.time`` is the simulation's (``monotonic`` the scanner's
  simulated seconds, ``sleep`` a wait on the simulated clock), and the tick's Lambda context
  says how much of the scanner's timeout is left on that clock;
- the event source: each consumer instance polls every ``POLL_SECONDS`` and takes a full batch,
  or after the batching window what is there.

An actor's effects on the database are visible from the instant it was resumed at, and the
next actor may run at an instant before the previous one's end: the scanner can count room a
consumer frees up to one batch's time early.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import math
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from unittest import mock

from infra.settings import Settings
from reminders import consumer, db, scanner, schedules
from reminders.channels.base import Message, Outcome, SendResult
from reminders.queue import LeaseMessage, Rejected
from tests.bench.support import (
    NOW,
    URL,
    Cluster,
    MemoryQueue,
    fresh_db,
    percentile,
    runtime,
    sqs_event,
)

Figures = dict[str, Any]
SEND_SECONDS = 0.2   # a webhook receiver's answer, as capacity.md's arithmetic assumes
POLL_SECONDS = 0.1   # an idle consumer instance looks at the queue again this often
SAMPLE_SECONDS = 0.25  # what is out (live leases) is counted this often, between actors
MINUTE = 60.0


class Stopped(BaseException):  # not an Exception: no ``except Exception`` takes it
    """The simulation ended while an actor was waiting for its turn."""


class Sim:
    """Simulated seconds since ``start``, and the actors' turns in order of their instants."""

    def __init__(self, start: datetime) -> None:
        self.start = start
        self._heap: list[tuple[float, int, Actor]] = []
        self._order = itertools.count()
        self._lock = threading.Lock()
        self._handed_back = threading.Event()
        self.running: Actor | None = None
        self.at = 0.0  # the instant of the last turn handed out
        self.stopping = False

    def seconds(self) -> float:
        actor = self.running
        return actor.local() if actor is not None else self.at

    def now(self) -> datetime:  # the Clock protocol: the one clock every actor reads
        return self.start + timedelta(seconds=self.seconds())

    def due(self, at: float, actor: Actor) -> None:
        with self._lock:
            heapq.heappush(self._heap, (at, next(self._order), actor))

    def earlier_than(self, at: float) -> bool:
        with self._lock:
            return bool(self._heap) and self._heap[0][0] < at

    def run(self, done: Callable[[], bool], *, limit: float,
            between: Callable[[float], None]) -> None:
        """Hand out turns, earliest instant first, until ``done`` or ``limit`` seconds."""
        try:
            while not done():
                with self._lock:
                    if not self._heap:
                        return
                    at, _, actor = heapq.heappop(self._heap)
                if at > limit:
                    return
                self.at = max(self.at, at)
                between(self.at)
                self._handed_back.clear()
                self.running = actor
                actor.resume(at)
                self._handed_back.wait()
                self.running = None
                if actor.error is not None:
                    raise actor.error
        finally:
            self.stopping = True
            with self._lock:
                waiting, self._heap = self._heap, []
            for _, _, actor in waiting:
                actor.resume(self.at)


class Actor:
    """A thread that runs only on its turn; its clock is its turn's instant plus the wall time
    it has run since."""

    def __init__(self, sim: Sim, name: str, body: Callable[[Actor], None]) -> None:
        self.sim = sim
        self.name = name
        self._body = body
        self._go = threading.Event()
        self._t0 = 0.0
        self._wall0 = time.perf_counter()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name=f"sim-{name}", daemon=True)

    def local(self) -> float:
        return self._t0 + (time.perf_counter() - self._wall0)

    def resume(self, at: float) -> None:
        self._t0, self._wall0 = at, time.perf_counter()
        self._go.set()

    def charge(self, seconds: float) -> None:
        """Time the actor spends that it does not run here (a receiver's answer)."""
        self._t0 += seconds

    def until(self, at: float) -> None:
        """Hand the turn back; run again at ``at`` (at once if that has passed), after every
        actor due earlier."""
        if self.sim.stopping:
            raise Stopped
        self.sim.due(max(at, self.local()), self)
        self._go.clear()
        self.sim._handed_back.set()
        self._go.wait()
        if self.sim.stopping:
            raise Stopped

    def _main(self) -> None:
        self._go.wait()
        try:
            if not self.sim.stopping:
                self._body(self)
        except Stopped:
            pass
        except BaseException as exc:  # noqa: BLE001 (raised again by Sim.run)
            self.error = exc
        finally:
            self.sim.stopping = self.sim.stopping or self.error is not None
            self.sim._handed_back.set()


class ScannerTime:
    """``time`` as the scanner module sees it during the simulation: its monotonic clock is the
    scanner actor's simulated seconds (a reading is also where earlier actors get their turn),
    and a sleep waits on the simulated clock."""

    def __init__(self, actor: Actor) -> None:
        self.actor = actor

    def monotonic(self) -> float:
        actor = self.actor
        if actor.sim.stopping:
            return actor.local() + 1e6  # every deadline has passed: the tick ends
        if actor.sim.earlier_than(actor.local()):
            actor.until(actor.local())
        return actor.local()

    def sleep(self, seconds: float) -> None:
        if not self.actor.sim.stopping:
            self.actor.until(self.actor.local() + seconds)


@dataclass
class TickContext:
    """The Lambda context of a tick: the scanner's timeout, counted on the simulated clock."""

    actor: Actor
    timeout: float
    started: float = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.actor.local()

    def get_remaining_time_in_millis(self) -> int:
        return int(1000 * (self.timeout - (self.actor.local() - self.started)))


class SimQueue(MemoryQueue):
    """The in-memory deliveries queue, with each pass's simulated instant kept."""

    def __init__(self, sim: Sim) -> None:
        super().__init__()
        self.sim = sim
        self.published: list[tuple[float, int]] = []

    def publish(self, messages: Sequence[LeaseMessage], *,
                concurrency: int = 1) -> list[Rejected]:
        self.published.append((self.sim.seconds(), len(messages)))
        return super().publish(messages, concurrency=concurrency)

    def visible(self) -> int:
        """Messages a receive would get (not those a consumer holds)."""
        with self._lock:
            return len(self._waiting)


@dataclass
class SimChannel:
    """The channel port: records each send with its simulated instant and answers sent; its
    receiver's time (SEND_SECONDS) is charged to the batch."""

    sim: Sim
    name: str = "webhook"
    honours_idempotency_key: bool = True
    send_timeout: float = 10.0
    sends: list[tuple[str, float]] = field(default_factory=list)

    def send(self, message: Message, now: Any) -> SendResult:
        self.sends.append((message.delivery_key, self.sim.seconds()))  # atomic append
        return SendResult(Outcome.SENT, "recorded", 200)


@contextlib.contextmanager
def scanner_on(actor: Actor) -> Iterator[None]:
    with mock.patch.object(scanner, "time", ScannerTime(actor)):
        yield


def fan_out(conn: db.Connection, size: int, due: datetime) -> float:
    """``size`` recipients of one schedule due at ``due``, through the Python API in calls of
    45,000 at most (it takes 50,000 a call); returns the seconds it took."""
    chunk = 45_000
    start = time.perf_counter()
    for first in range(0, size, chunk):
        schedules.schedule(conn, tenant="digest", channel="webhook", to=URL, at=due,
                           recipients=[f"p{i}" for i in range(first, min(size, first + chunk))],
                           now=due - timedelta(hours=1), key=f"digest-{first}")
    conn.execute("vacuum analyze")
    return time.perf_counter() - start


def bench_drains(server: Cluster, size: int) -> Figures:
    """The drain with receivers answering in 200 ms (capacity.md's arithmetic), in 1 s (the
    consumers slower than the scanner: the in-flight budget fills and the tick refills it),
    and in 1 s with ticks that stop at a full budget (``refill=False``, as before the refill:
    the reference)."""
    template = "bench_drain_tpl"
    conn, _ = fresh_db(server, template)
    setup_s = fan_out(conn, size, NOW)
    conn.close()
    figures: Figures = {"deliveries": size, "setup_s": setup_s}
    for label, send_s, refill in (("receiver_200ms", 0.2, True), ("receiver_1s", 1.0, True),
                                  ("receiver_1s_without_refill", 1.0, False)):
        figures[label] = bench_drain(server, template, size, send_s=send_s, refill=refill)
    figures["receiver_1s_without_over_with_refill"] = (
        figures["receiver_1s_without_refill"]["drain_s"] / figures["receiver_1s"]["drain_s"])
    return figures


def bench_drain(server: Cluster, template: str, size: int, *, send_s: float = SEND_SECONDS,
                refill: bool = True, limit_minutes: int = 30) -> Figures:
    """The fan-out due at T0 (a minute's start), the first tick at T0, one a minute after; the
    figures: when the last answer came, lateness at the send, what was out at most, against
    the arithmetic of capacity.md's throughput table with the rates measured here."""
    deployed = Settings()
    budget = deployed.effective_inflight_budget
    consumers = deployed.consumer_max_concurrency
    batch = deployed.consumer_batch_size
    window = float(deployed.consumer_batching_window_seconds)
    scan_limits = {"scan_batch": deployed.scan_batch, "inflight_budget": budget,
                   "scan_seconds": deployed.effective_scan_seconds,
                   "lease_seconds": deployed.lease_seconds,
                   "publish_concurrency": deployed.publish_concurrency}
    conn, url = fresh_db(server, "bench_drain", template)
    due = {r["delivery_key"]: r["due_at"] for r in conn.execute(
        "select delivery_key, due_at from deliveries").fetchall()}
    conn.close()
    sim = Sim(NOW)
    queue, channel = SimQueue(sim), SimChannel(sim)
    ticks: list[scanner.TickSummary] = []
    tick_spans: list[tuple[float, float]] = []
    batches: list[tuple[float, float, int]] = []  # (start, simulated seconds, messages)
    # Warm instances: each connection is made before the clock starts.
    scanner_rt = runtime(url, sim, queue, {"webhook": channel}, **scan_limits)
    consumer_rts = [runtime(url, sim, queue, {"webhook": channel}, send_concurrency=batch)
                    for _ in range(consumers)]
    for rt in (scanner_rt, *consumer_rts):
        rt.connection()

    def scan(actor: Actor) -> None:
        rt, minute = scanner_rt, 0
        with scanner_on(actor):
            while True:
                actor.until(minute * MINUTE)
                context = TickContext(actor, float(deployed.scanner_timeout_seconds))
                ticks.append(scanner.tick(rt, context, refill=refill))
                tick_spans.append((context.started, actor.local()))
                minute = math.floor(actor.local() / MINUTE) + 1

    def consumes(rt: Any) -> Callable[[Actor], None]:
        return lambda actor: consume(actor, rt)

    def consume(actor: Actor, rt: Any) -> None:
        first_seen: float | None = None
        while True:
            visible = queue.visible()
            now = actor.local()
            if visible == 0:
                first_seen = None
                actor.until(now + POLL_SECONDS)
                continue
            if visible < batch:  # the batching window: wait for a full batch, not longer
                first_seen = now if first_seen is None else first_seen
                if now < first_seen + window:
                    actor.until(min(first_seen + window, now + POLL_SECONDS))
                    continue
            first_seen = None
            bodies = queue.take(batch)
            start = actor.local()
            consumer.process_batch(sqs_event(bodies), rt)
            actor.charge(send_s)
            queue.done(len(bodies))
            batches.append((start, actor.local() - start, len(bodies)))
            actor.until(actor.local())

    actors = [Actor(sim, "scanner", scan)]
    actors += [Actor(sim, f"consumer-{i}", consumes(rt)) for i, rt in enumerate(consumer_rts)]
    watcher = db.connect(url)
    most_out = {"live_leases": 0, "queued": 0, "samples": 0}
    next_sample = [0.0]

    def sample(at: float) -> None:
        if at < next_sample[0]:
            return
        next_sample[0] = at + SAMPLE_SECONDS
        live = int((db.fetch_one(watcher, "live_leases") or {}).get("n") or 0)
        most_out["live_leases"] = max(most_out["live_leases"], live)
        most_out["queued"] = max(most_out["queued"], queue.depth())
        most_out["samples"] += 1

    for actor in actors:
        actor.thread.start()
        sim.due(0.0, actor)
    wall = time.perf_counter()
    try:
        sim.run(lambda: len(channel.sends) >= size, limit=limit_minutes * MINUTE,
                between=sample)
    finally:
        for actor in actors:
            actor.thread.join(120)
        for rt in (scanner_rt, *consumer_rts):
            rt.close()
    wall = time.perf_counter() - wall
    live_after = int((db.fetch_one(watcher, "live_leases") or {}).get("n") or 0)
    watcher.close()

    keys = [k for k, _ in channel.sends]
    late = [at - (due[k] - NOW).total_seconds() for k, at in channel.sends]
    full = [seconds for _, seconds, n in batches if n == batch]
    batch_s = statistics.median(full) if full else float("nan")
    consumers_per_s = consumers * batch / batch_s
    last_sent = max((at for _, at in channel.sends), default=float("nan"))
    drain_s = last_sent + send_s  # the last answer (the fan-out is due at 0)
    handed, first_budget = 0, float("nan")
    for at, count in queue.published:
        handed += count
        if handed >= min(budget, size):
            first_budget = at
            break
    scanner_per_s = min(budget, size) / first_budget
    # capacity.md's arithmetic: the drain runs at the slower stage's rate, and the last
    # delivery waits the time from lease to settle: the batching window (its batch is not
    # full), then a batch's time.
    arithmetic_s = size / min(scanner_per_s, consumers_per_s) + window + batch_s
    # The drain's pace once under way: sends a second between the 10th and the 90th
    # percentile of the send instants (the fill at the start and the last batch's window at
    # the end apart), against the slower stage's rate.
    instants = sorted(at for _, at in channel.sends)
    lo, hi = instants[len(instants) // 10], instants[len(instants) * 9 // 10]
    pace = (len(instants) * 8 // 10) / (hi - lo) if hi > lo else float("nan")
    figures: Figures = {
        "goal": "drain_over_arithmetic <= 1.2",
        "refill": refill, "simulation_wall_s": wall,
        "deployed": {**scan_limits, "refill_patience_seconds":
                     scanner_rt.settings.limits.refill_patience_seconds,
                     "consumer_max_concurrency": consumers, "consumer_batch_size": batch,
                     "batching_window_s": window, "send_s": send_s},
        "sent": len(keys), "sent_twice": len(keys) - len(set(keys)),
        "drain_s": drain_s,
        "lateness_p50_s": percentile(late, 50), "lateness_p99_s": percentile(late, 99),
        "lateness_max_s": max(late, default=float("nan")),
        "ticks": len(ticks), "passes": sum(t.passes for t in ticks),
        "leased_by_tick": [t.leased for t in ticks],
        "tick_spans_s": [[round(a, 2), round(b, 2)] for a, b in tick_spans],
        "first_budget_handed_over_s": first_budget,
        "most_live_leases_sampled": most_out["live_leases"],
        "most_queued_sampled": most_out["queued"], "samples": most_out["samples"],
        "live_leases_at_end": live_after,
        "consumer_batches": len(batches),
        "consumer_batch_s_median": batch_s,
        "consumer_batch_run_here_ms_median": 1000 * (batch_s - send_s),
        "scanner_leased_per_s": scanner_per_s,
        "consumers_per_s_arithmetic": consumers_per_s,
        "drain_s_arithmetic": arithmetic_s,
        "drain_over_arithmetic": drain_s / arithmetic_s,
        "sends_per_s_10_to_90_pct": pace,
        "slower_stage_over_pace": min(scanner_per_s, consumers_per_s) / pace,
    }
    if most_out["live_leases"] > budget:
        figures["budget_exceeded"] = most_out["live_leases"]
    return figures
