"""A tick keeps the queue fed for its whole time: with the in-flight budget full it waits for
the consumers to make room and leases again, never holding more than the budget out at once;
and it ends once nothing went out for its patience. (Deployed, one tick a minute that stopped
at a full budget left the consumers idle for the rest of the minute.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from reminders import consumer, db, scanner
from reminders.runtime import Runtime
from tests.conftest import Harness, make_runtime
from tests.integration.pipeline_helpers import effects, event_for, schedule_webhook
from tests.integration.test_promises import _urls

BUDGET = 20


def _live(conn: db.Connection) -> int:
    return int((db.fetch_one(conn, "live_leases") or {}).get("n") or 0)


class Consumers:
    """Consumers polling the queue beside the tick, as the event source mapping does; and a
    watcher that samples what is out (live leases, messages on the queue) all along."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.rt: Runtime = make_runtime(h.rt.settings.database_url, _urls(h), h.endpoint,
                                        h.clock)
        self.stop = threading.Event()
        self.most_out = 0
        self.batches = 0
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._consume),
                        threading.Thread(target=self._watch)]

    def _consume(self) -> None:
        sqs = self.h.sqs()
        url = self.h.rt.deliveries.url
        try:
            while not self.stop.is_set():
                got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                          AttributeNames=["All"]).get("Messages", [])
                if not got:
                    self.stop.wait(0.05)
                    continue
                answer = consumer.process_batch(event_for(self.h, got), self.rt)
                failed = {f["itemIdentifier"] for f in answer["batchItemFailures"]}
                done = [m for m in got if m["MessageId"] not in failed]
                if done:
                    sqs.delete_message_batch(QueueUrl=url, Entries=[
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                        for i, m in enumerate(done)])
                self.batches += 1
        except BaseException as exc:  # noqa: BLE001 (surfaced by the test)
            self.errors.append(exc)

    def _watch(self) -> None:
        with db.connect(self.h.rt.settings.database_url) as conn:
            while not self.stop.is_set():
                self.most_out = max(self.most_out, _live(conn))
                self.stop.wait(0.01)

    def __enter__(self) -> Consumers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)
        self.rt.close()


@pytest.fixture
def refilling(harness: Harness) -> Iterator[Harness]:
    """The harness's runtime as the deployed scanner runs: waiting for room, 3 s at most."""
    h = harness
    h.rt.close()
    h.rt = make_runtime(h.rt.settings.database_url, _urls(h), h.endpoint, h.clock,
                        inflight_budget=BUDGET, scan_batch=10, scan_seconds=20,
                        refill_patience_seconds=3)
    yield h


def test_one_tick_leases_more_than_a_budget_as_the_consumers_make_room(
        refilling: Harness) -> None:
    h = refilling
    keys = schedule_webhook(h, "refill", recipients=[f"r{i}" for i in range(3 * BUDGET)])
    with Consumers(h) as consumers:
        summary = scanner.tick(h.rt)
        for _ in range(200):  # the last passes' messages, taken after the tick ended
            if len(effects(h)) == len(keys):
                break
            consumers.stop.wait(0.05)
    assert consumers.errors == []
    assert summary.skipped is None
    assert summary.leased == summary.published == 3 * BUDGET  # three budgets in one tick
    assert consumers.most_out <= BUDGET, consumers.most_out  # never more than one out at once
    assert effects(h) == {k: 1 for k in keys}


def test_a_tick_with_the_budget_full_and_nobody_consuming_ends_after_its_patience(
        refilling: Harness) -> None:
    h = refilling
    schedule_webhook(h, "stalled", recipients=[f"r{i}" for i in range(2 * BUDGET)])
    summary: Any = scanner.tick(h.rt)
    assert summary.leased == BUDGET  # one budget, then nothing made room
    conn = h.rt.connection()
    assert _live(conn) == BUDGET


def test_stale_messages_on_the_queue_and_a_tick_s_leases_never_exceed_the_budget(
        harness: Harness) -> None:
    """Messages whose leases expired stay on the queue after the reclaim: they are out, beside
    the leases the tick takes. A tick counted the depth it read at its start against leases
    that grew pass by pass (the larger of the two, never their sum), so with 6 stale messages
    on the queue it leased a full budget on top of them: 26 messages against a budget of 20."""
    h = harness
    h.rt.close()
    h.rt = make_runtime(h.rt.settings.database_url, _urls(h), h.endpoint, h.clock,
                        inflight_budget=BUDGET, scan_batch=10)
    schedule_webhook(h, "stale", recipients=[f"s{i}" for i in range(6)])
    first = scanner.tick(h.rt)
    assert first.published == 6
    # Nobody consumed: their leases expire, and the next tick reclaims them.
    h.clock.advance(timedelta(seconds=h.rt.settings.limits.lease_seconds + 60))
    schedule_webhook(h, "more", recipients=[f"m{i}" for i in range(3 * BUDGET)])
    second = scanner.tick(h.rt)
    assert second.reclaimed == {"scheduled": 6}
    on_queue = h.rt.deliveries.depth()
    live = _live(h.rt.connection())
    # Every live lease's message is on the queue (no consumer took one), and so are the stale
    # messages, which carry no lease: the queue's depth is what is out.
    assert live == second.leased
    assert on_queue == 6 + second.leased
    assert on_queue <= BUDGET, (on_queue, live)
    assert second.leased == BUDGET - 6
