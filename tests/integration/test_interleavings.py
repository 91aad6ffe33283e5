"""Every pair of actors on one delivery, the first paused at each of its statement boundaries
while the second runs to completion (or until it waits on a lock the first holds), over the
real Postgres. Afterwards the system is run until quiet and the promises are checked:

- every due delivery is terminal (nothing lost, nothing held by a dead lease);
- no delivery key has two effects unless an `unknown` attempt or a same-key resend (a second
  attempt on a channel that honours the key) is recorded;
- no attempt starts after a cancel or an opt-out committed;
- no attempt is left open, and no delivery spends more attempts than its kind allows;
- the counts ``status`` reads (``delivery_counts``, kept by triggers) equal the rows;
- the due set (``due_queue``: due entries and pending leases, kept by triggers) agrees with
  the rows.

The queue is an in-memory port (transport only: Postgres is the authority under test) and the
channels record every send, so one interleaving costs milliseconds.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from reminders import config, consumer, db, operator, redrive, scanner, schedules
from reminders.channels.base import Message, Outcome, SendResult
from reminders.channels.signing import new_secret
from reminders.clock import FixedClock
from reminders.db.queries import CHECKS
from reminders.errors import Conflict, InvalidInput
from reminders.queue import LeaseMessage, Rejected, parse_body
from reminders.runtime import Runtime
from tests.conftest import T0

LEASE_SECONDS = 300
HOOK = "http://127.0.0.1:9/hook"
TERMINAL = ("sent", "failed", "suppressed", "stale", "unknown", "dead")


class MemoryQueue:
    """The queue port in memory: what the scanner published, in order."""

    def __init__(self) -> None:
        self.bodies: list[str] = []
        self._lock = threading.Lock()

    def publish(self, messages: list[LeaseMessage], *, concurrency: int = 1) -> list[Rejected]:
        with self._lock:
            self.bodies += [m.body() for m in messages]
        return []

    def depth(self) -> int:
        return len(self.bodies)

    def send_raw(self, body: str, attributes: dict[str, str]) -> None:
        with self._lock:
            self.bodies.append(body)

    def take(self) -> list[str]:
        with self._lock:
            taken, self.bodies = self.bodies, []
        return taken


@dataclass
class RecordingChannel:
    """A channel we own: every send is recorded, and succeeds."""

    name: str
    honours_idempotency_key: bool
    sends: list[str] = field(default_factory=list)
    send_timeout: float = 10.0

    def send(self, message: Message, now: Any) -> SendResult:
        self.sends.append(message.delivery_key)
        return SendResult(Outcome.SENT, "recorded")


def event(bodies: list[str]) -> dict[str, Any]:
    return {"Records": [{
        "messageId": str(uuid.uuid4()), "receiptHandle": "r", "body": body,
        "attributes": {"ApproximateReceiveCount": "1"}, "messageAttributes": {},
        "md5OfBody": "", "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q", "awsRegion": "us-east-1",
    } for body in bodies]}


class World:
    """One database, the channels, and a runtime per actor (its own connection and clock)."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self.settings = config.load({"DATABASE_URL": database_url,
                                     "REMINDERS_LEASE_SECONDS": str(LEASE_SECONDS),
                                     "REMINDERS_DB_LOCK_TIMEOUT_MS": "10000",
                                     "REMINDERS_REFILL_PATIENCE_SECONDS": "0"})
        self.channels = {"webhook": RecordingChannel("webhook", True),
                         "email": RecordingChannel("email", False)}
        self.queue = MemoryQueue()
        self.app = db.connect(database_url)
        # A row as written before secrets were sealed: the recording channels sign nothing.
        self.app.execute("insert into endpoints (url, secret) values (%s, %s)",
                         (HOOK, new_secret()))

    def runtime(self, at: timedelta) -> Runtime:
        return Runtime(settings=self.settings, clock=FixedClock(T0 + at),
                       deliveries=self.queue, dlq=MemoryQueue(),  # type: ignore[arg-type]
                       parking=MemoryQueue(), channels=self.channels)  # type: ignore[arg-type]

    def close(self) -> None:
        self.app.close()

    def sends(self, key: str) -> int:
        return sum(ch.sends.count(key) for ch in self.channels.values())


@dataclass
class Case:
    """One delivery, leased by a tick, with its queued message."""

    key: str
    schedule_key: str
    recipient: str
    channel: str
    body: str
    marks: dict[str, int] = field(default_factory=dict)  # max attempt id when a change committed


Actor = Callable[[World, Case, Runtime], None]


def consume(world: World, case: Case, rt: Runtime) -> None:
    consumer.process_batch(event([case.body]), rt)


def reclaim(world: World, case: Case, rt: Runtime) -> None:
    scanner.tick(rt)


def redrive_it(world: World, case: Case, rt: Runtime) -> None:
    redrive.decide(rt, rt.connection(), parse_body(case.body), "dlq-copy")


def _mark(world: World, case: Case, conn: db.Connection, what: str) -> None:
    row = conn.execute("select coalesce(max(id), 0) as m from attempts").fetchone()
    assert row is not None
    case.marks[what] = int(row["m"])


def cancel(world: World, case: Case, rt: Runtime) -> None:
    conn = rt.connection()  # as an application's connection
    try:
        schedules.cancel(conn, tenant="acme", key=case.schedule_key, now=rt.clock.now())
    except InvalidInput:
        return
    _mark(world, case, conn, "cancel")


def reschedule(world: World, case: Case, rt: Runtime) -> None:
    try:
        schedules.reschedule(rt.connection(), tenant="acme", key=case.schedule_key,
                             now=rt.clock.now(), at=T0 + timedelta(minutes=30))
    except InvalidInput:
        return


def opt_out(world: World, case: Case, rt: Runtime) -> None:
    conn = rt.connection()
    schedules.opt_out(conn, tenant="acme", recipient=case.recipient, channel=case.channel,
                      now=rt.clock.now())
    _mark(world, case, conn, "opt_out")


def reconcile(world: World, case: Case, rt: Runtime) -> None:
    with contextlib.suppress(InvalidInput):  # only parked deliveries can be retried
        operator.reconcile(rt.connection(), key=case.key, tenant="acme", target="retry",
                           reason="drill", now=rt.clock.now())


# Each actor and the clock it runs on (the scanner's is past the lease and any send deadline).
ACTORS: dict[str, tuple[Actor, timedelta]] = {
    "consume": (consume, timedelta(seconds=1)),
    "duplicate": (consume, timedelta(seconds=2)),
    "reclaim": (reclaim, timedelta(seconds=LEASE_SECONDS + 60)),
    "redrive": (redrive_it, timedelta(seconds=LEASE_SECONDS + 60)),
    "cancel": (cancel, timedelta(seconds=1)),
    "reschedule": (reschedule, timedelta(seconds=1)),
    "opt_out": (opt_out, timedelta(seconds=1)),
    "reconcile": (reconcile, timedelta(seconds=1)),
}


class Pauses:
    """The statement hook: the named thread stops before its k-th statement until resumed."""

    def __init__(self) -> None:
        self.thread = ""
        self.at = -1
        self.count = 0
        self.paused = threading.Event()
        self.resume = threading.Event()

    def arm(self, thread: str, at: int) -> None:
        self.thread, self.at, self.count = thread, at, 0
        self.paused.clear()
        self.resume.clear()

    def __call__(self, name: str) -> None:
        if threading.current_thread().name != self.thread:
            return
        if self.count == self.at:
            self.paused.set()
            self.resume.wait(20)
        self.count += 1


@pytest.fixture
def pauses() -> Iterator[Pauses]:
    hook = Pauses()
    db.before_statement = hook
    yield hook
    db.before_statement = None


def prepare(world: World, n: int, channel: str, *, leased: bool = True) -> Case:
    """One delivery due at T0; leased by a tick with its message queued, or (``leased=False``)
    still due, for the pairs that race the lease itself."""
    recipient = f"r{n}@example.com" if channel == "email" else f"r{n}"
    key = f"case-{n}"
    result = schedules.schedule(
        world.app, tenant="acme", recipients=[recipient], channel=channel, now=T0, at=T0,
        key=key, to=HOOK if channel == "webhook" else None)
    world.queue.take()
    body = ""
    if leased:
        rt = world.runtime(timedelta(0))
        scanner.tick(rt)
        rt.close()
        (body,) = world.queue.take()
    return Case(result.deliveries[0].delivery_key, key, recipient, channel, body)


def blocked_or_done(world: World, thread: threading.Thread) -> None:
    """Wait until the thread finished or its session waits on a lock (bounded). Through the
    pooler a client's transactions run on whichever server connection is free, so its
    backend is not the one it logged in on: the waiting session is found as any session of
    this database waiting on a lock (the first actor, paused between statements, waits on
    none, and the observer runs only this query)."""
    deadline = time.monotonic() + 15
    while thread.is_alive() and time.monotonic() < deadline:
        row = world.app.execute("select count(*) as n from pg_stat_activity"
                                " where datname = current_database()"
                                " and wait_event_type = 'Lock'").fetchone()
        if row and row["n"]:
            return
        thread.join(0.005)


def run(world: World, case: Case, first: str, second: str, at: int,
        pauses: Pauses, actors: dict[str, tuple[Actor, timedelta]] | None = None) -> bool:
    """The first actor paused before its statement ``at``, the second run meanwhile. Returns
    False when the first actor has fewer statements (nothing more to interleave)."""
    errors: list[BaseException] = []
    actors = actors or ACTORS

    def go(name: str, rt: Runtime) -> Callable[[], None]:
        def body() -> None:
            try:
                actors[name][0](world, case, rt)
            except (Conflict, AssertionError) as exc:  # a refused write is an outcome
                if isinstance(exc, AssertionError):
                    errors.append(exc)
            except BaseException as exc:  # noqa: BLE001 - surfaced below
                errors.append(exc)
        return body

    rt_a = world.runtime(actors[first][1])
    rt_b = world.runtime(actors[second][1])
    rt_a.connection()
    rt_b.connection()
    pauses.arm("first", at)
    a = threading.Thread(target=go(first, rt_a), name="first")
    a.start()
    while not pauses.paused.is_set() and a.is_alive():
        a.join(0.002)
    reached = pauses.paused.is_set()
    b = threading.Thread(target=go(second, rt_b), name="second")
    b.start()
    blocked_or_done(world, b)
    pauses.resume.set()
    a.join(30)
    b.join(30)
    rt_a.close()
    rt_b.close()
    assert not a.is_alive() and not b.is_alive(), "an actor never finished"
    assert not errors, errors
    return reached


def settle_all(world: World, case: Case) -> None:
    """Run the system until quiet: ticks and consumers, well past every lease, at most to
    minute 100. Quiet is a round after which nothing was queued and every delivery of the
    case is terminal: a later round could only find what a check below finds anyway (a
    lease or due entry left behind, which check_due_queue compares with the rows)."""
    for minute in (20, 40, 60, 80, 100):
        rt = world.runtime(timedelta(minutes=minute))
        scanner.tick(rt)
        bodies = world.queue.take()
        if bodies:
            consumer.process_batch(event(bodies), rt)
        scanner.tick(rt)
        rt.close()
        if not world.queue.depth() and settled(world, case):
            return


def settled(world: World, case: Case) -> bool:
    row = world.app.execute(
        "select count(*) filter (where d.state <> all(%s)) as open from deliveries d"
        " join schedules s on s.id = d.schedule_id where s.schedule_key = %s",
        (list(TERMINAL), case.schedule_key)).fetchone()
    return row is not None and row["open"] == 0


def violations(world: World, case: Case) -> list[str]:
    found: list[str] = []
    now = T0 + timedelta(minutes=100)
    rows = world.app.execute(
        "select d.id, d.delivery_key, d.state, d.due_at, d.recipient, d.channel, "
        "       d.attempts_made, k.max_attempts "
        "from deliveries d join schedules s on s.id = d.schedule_id "
        "join kinds k on k.name = s.kind where s.schedule_key = %s", (case.schedule_key,)
    ).fetchall()
    for row in rows:
        key = row["delivery_key"]
        attempts = world.app.execute(
            "select id, outcome, finished_at from attempts where delivery_id = %s order by id",
            (row["id"],)).fetchall()
        if row["state"] not in TERMINAL and row["due_at"] <= now:
            found.append(f"{key}: still {row['state']} after the system went quiet")
        sends = world.sends(key)
        unknown = any(a["outcome"] == "unknown" for a in attempts)
        keyed_resend = row["channel"] == "webhook" and len(attempts) > 1
        if sends > 1 and not (unknown or keyed_resend):
            found.append(f"{key}: {sends} effects without an unknown attempt or keyed resend")
        if sends > len(attempts):
            found.append(f"{key}: {sends} sends but {len(attempts)} attempts in the ledger")
        for what, mark in case.marks.items():
            late = [a["id"] for a in attempts if a["id"] > mark]
            if late:
                found.append(f"{key}: attempt {late} started after {what} committed")
        if any(a["finished_at"] is None for a in attempts):
            found.append(f"{key}: an attempt is still open after the system went quiet")
        if len(attempts) > row["max_attempts"]:
            found.append(f"{key}: {len(attempts)} attempts, budget {row['max_attempts']}")
    # The counts status reads, kept by triggers while both actors wrote, equal the rows.
    for group in db.fetch_all(world.app, "check_delivery_counts", source=CHECKS):
        found.append(f"counts of {group['tenant']}/{group['kind']}/{group['channel']}/"
                     f"{group['state']}: kept {group['kept']}, rows {group['actual']}")
    # The due set (due entries and pending leases, kept by triggers) agrees with the rows.
    for row in db.fetch_all(world.app, "check_due_queue", source=CHECKS):
        found.append(f"due set of {row['delivery_key']}: delivery {row['state']}, due_queue "
                     f"{row['entry_state']} (pending lease: {row['pending']})")
    return found


PAIRS = list(itertools.permutations(ACTORS, 2))


@pytest.mark.parametrize("channel", ["email", "webhook"])
@pytest.mark.parametrize(("first", "second"), PAIRS)
def test_every_interleaving_keeps_the_promises(database_url: str, pauses: Pauses,
                                               first: str, second: str, channel: str) -> None:
    every_interleaving(database_url, pauses, first, second, channel)


def every_interleaving(database_url: str, pauses: Pauses, first: str, second: str,
                       channel: str, actors: dict[str, tuple[Actor, timedelta]] | None = None,
                       *, leased: bool = True) -> None:
    """``first`` paused before each of its statements in turn, ``second`` run meanwhile, on a
    fresh delivery each time (leased or still due); the promises checked after each."""
    world = World(database_url)
    try:
        found: list[str] = []
        ran = 0
        for at in range(40):  # bounded: no actor runs this many statements
            case = prepare(world, at, channel, leased=leased)
            reached = run(world, case, first, second, at, pauses, actors)
            settle_all(world, case)
            found += [f"{first} paused before statement {at}, {second} ran: {v}"
                      for v in violations(world, case)]
            ran += 1
            if not reached:
                break
        print(f"interleavings {first} then {second} on {channel}: {ran}")
        assert ran > 1
        assert found == []
    finally:
        world.close()


# The lease itself against the application's writes: a tick leasing the due delivery (a
# pending lease on its due_queue row) while a cancel, a reschedule or an opt-out runs, each
# paused at every statement boundary (the application's writes hold their locks across the
# pause: they run in one transaction). Then the consumers take whatever was queued.
LEASE_ACTORS: dict[str, tuple[Actor, timedelta]] = {
    "lease": (reclaim, timedelta(seconds=1)),  # a tick: it leases what is due
    "cancel": ACTORS["cancel"],
    "reschedule": ACTORS["reschedule"],
    "opt_out": ACTORS["opt_out"],
}
LEASE_PAIRS = [(a, b) for a, b in itertools.permutations(LEASE_ACTORS, 2)
               if "lease" in (a, b)]


@pytest.mark.parametrize("channel", ["email", "webhook"])
@pytest.mark.parametrize(("first", "second"), LEASE_PAIRS)
def test_every_interleaving_with_the_lease_keeps_the_promises(
        database_url: str, pauses: Pauses, first: str, second: str, channel: str) -> None:
    every_interleaving(database_url, pauses, first, second, channel, LEASE_ACTORS, leased=False)
