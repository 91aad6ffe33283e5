"""The invariants of ARCHITECTURE.md under a seeded storm of consumer faults: consumers that die
before an attempt, die mid-send, process a message twice, or lose it; endpoints that fail now
and then. Every tick is checked, and at the end every delivery has an outcome."""

from __future__ import annotations

import json
import random
from datetime import timedelta
from typing import Any

import pytest

from reminders import batch, consumer, db, schedules
from reminders.channels.base import Message
from reminders.endpoints import signing_secrets
from tests.conftest import Harness, make_runtime
from tests.integration.pipeline_helpers import (
    event_for,
    register,
    start_attempt,
    take_leases,
    take_messages,
    tick,
)

PENDING = ("scheduled", "leased", "retrying")


def crash_mid_send(h: Harness, body: dict[str, Any]) -> None:
    """Take the lease, start the attempt and send, then die before recording the outcome."""
    take_leases(h, [(body["delivery_id"], body["lease_token"])])
    row = batch.load_rows(h.conn, [body["delivery_id"]])[body["delivery_id"]]
    if row["state"] != "leased" or str(row["lease_token"]) != body["lease_token"]:
        return
    attempt = start_attempt(h, row["id"], body["lease_token"])
    if attempt is not None:
        h.rt.channels["webhook"].send(Message(
            delivery_key=row["delivery_key"], tenant=row["tenant"], kind=row["kind"],
            recipient=row["recipient"], destination=row["destination"], payload=row["payload"],
            revision=row["revision"], occurrence_at=row["occurrence_at"],
            attempt=int(attempt["attempt_no"]),
            secrets=signing_secrets(row, h.clock.now(), h.rt.secret_box)), h.clock.now())


@pytest.mark.resends_allowed
@pytest.mark.parametrize("seed", [11, 29])
def test_invariants_hold_under_consumer_faults(harness: Harness, database_url: str,
                                               seed: int) -> None:
    h = harness
    h.rt.close()
    h.rt = make_runtime(database_url, _urls(h), h.endpoint, h.clock, scan_batch=8,
                        inflight_budget=12, lease_seconds=90)
    rng = random.Random(seed)
    endpoints = [register(h, h.receiver.hook_url("steady")),
                 register(h, h.receiver.hook_url("shaky", codes=[503, 200, 500, 200])),
                 register(h, h.receiver.hook_url("busy", codes=[429, 200], retry_after=60))]
    for i in range(30):
        schedules.schedule(h.conn, tenant="acme", recipients=[f"p{i}"], channel="webhook",
                           to=endpoints[i % 3], now=h.clock.now(), key=f"k{i}",
                           at=h.clock.now() + timedelta(minutes=rng.randrange(0, 10)))

    for minute in range(60):
        tick(h)
        now = h.clock.now()
        # Invariant 1: after a tick, no lease is past its expiry.
        stale_leases = h.conn.execute(
            "select count(*) as n from deliveries where state = 'leased' "
            "and lease_expires_at < %s", (now,)).fetchone()
        assert stale_leases == {"n": 0}, minute
        # Invariant 6: never more in flight than the budget.
        assert h.rt.deliveries.depth() <= 12
        faults = minute < 40  # then a calm spell in which everything must settle
        for message in take_messages(h, n=50):
            body = json.loads(message["Body"])
            fate = rng.random() if faults else 0.0
            if fate < 0.55:
                consumer.process_batch(event_for(h, [message]), h.rt)
            elif fate < 0.7:
                pass  # the consumer died before any attempt: the lease will expire
            elif fate < 0.85:
                crash_mid_send(h, body)
            else:  # delivered twice by SQS, processed by two consumers one after the other
                consumer.process_batch(event_for(h, [message]), h.rt)
                consumer.process_batch(event_for(h, [message]), h.rt)
        h.clock.advance(timedelta(minutes=1))

    rows = h.conn.execute("select delivery_key, state from deliveries").fetchall()
    # Invariant 1: nothing lost; every due delivery reached an outcome.
    assert [r for r in rows if r["state"] in PENDING] == []
    assert {r["state"] for r in rows} <= {"sent", "dead"}
    # Invariant 2: one effect per key at a receiver that honours it; every key answered 2xx
    # more than once went through the send-then-crash window, visible as an `unknown` attempt.
    stats = h.receiver.stats()
    assert all(n == 1 for n in stats["effects"].values())
    for key, answers in stats["ok_answers"].items():
        if answers > 1:
            outcomes = [a["outcome"] for a in db.fetch_all(h.conn, "attempts_of_delivery", {
                "id": _id(h, key), "tenant": "acme"})]
            assert "unknown" in outcomes, (key, outcomes)
    sent = {r["delivery_key"] for r in rows if r["state"] == "sent"}
    assert sent <= set(stats["effects"])
    # The storm really struck: sends were cut short and resent with their key.
    crashed = h.conn.execute(
        "select count(*) as n from attempts where outcome = 'unknown'").fetchone()
    assert crashed is not None and crashed["n"] >= 3
    assert stats["duplicates"] >= 3


def _id(h: Harness, key: str) -> int:
    row = h.conn.execute("select id from deliveries where delivery_key = %s", (key,)).fetchone()
    assert row is not None
    return int(row["id"])


def _urls(h: Harness) -> Any:
    from reminders.config import QueueUrls

    return QueueUrls(h.rt.deliveries.url, h.rt.dlq.url, h.rt.parking.url)
