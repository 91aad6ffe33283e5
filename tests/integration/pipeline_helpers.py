"""Small verbs the pipeline tests share: register, schedule, run, read back."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from reminders import db, endpoints, schedules
from reminders.local import pipeline
from reminders.local.event_source import sqs_event
from tests.conftest import Harness


def register(h: Harness, url: str, secret: str | None = None) -> str:
    assert h.rt.secret_box is not None
    endpoints.register(h.conn, h.rt.secret_box, tenant=None, url=url,
                       secret=secret or h.receiver.secret, now=h.clock.now())
    return url


def schedule_webhook(h: Harness, key: str, *, at: datetime | None = None, url: str | None = None,
                     recipients: list[str] | None = None, kind: str = "default",
                     tenant: str = "acme", **kw: Any) -> list[str]:
    url = url or register(h, h.receiver.hook_url("ok"))
    if url not in _registered(h):
        register(h, url)
    result = schedules.schedule(
        h.conn, tenant=tenant, recipients=recipients or ["alice"], channel="webhook", to=url,
        at=at or h.clock.now(), now=h.clock.now(), key=key, kind=kind, **kw)
    return [d.delivery_key for d in result.deliveries]


def _registered(h: Harness) -> set[str]:
    return {r["url"] for r in h.conn.execute("select url from endpoints").fetchall()}


def delivery(h: Harness, key: str, tenant: str = "acme") -> dict[str, Any]:
    row = db.fetch_one(h.conn, "delivery_by_key", {"key": key, "tenant": tenant})
    assert row is not None, key
    return row


def attempts(h: Harness, key: str) -> list[dict[str, Any]]:
    row = delivery(h, key)
    return db.fetch_all(h.conn, "attempts_of_delivery", {"id": row["id"], "tenant": "acme"})


def events(h: Harness, key: str) -> list[dict[str, Any]]:
    row = delivery(h, key)
    return db.fetch_all(h.conn, "events_of_delivery", {"id": row["id"], "tenant": "acme"})


def tick(h: Harness) -> dict[str, Any]:
    return pipeline.tick(h.rt)


def work(h: Harness, max_seconds: float = 30) -> dict[str, Any]:
    out = pipeline.work(h.rt, max_seconds=max_seconds)
    assert out["idle"], out
    return out


def run_minutes(h: Harness, minutes: int) -> None:
    """Tick and work once a simulated minute."""
    for _ in range(minutes):
        tick(h)
        work(h)
        h.clock.advance(timedelta(minutes=1))


def take_messages(h: Harness, queue_url: str | None = None, n: int = 10) -> list[dict[str, Any]]:
    """Receive (and delete) what is on a queue, as a crashed consumer would have held it."""
    sqs = h.sqs()
    url = queue_url or h.rt.deliveries.url
    got: list[dict[str, Any]] = []
    for _ in range(n // 10 + 5):
        answer = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=min(10, n - len(got)),
                                     AttributeNames=["All"])
        msgs = answer.get("Messages", [])
        for m in msgs:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        got += msgs
        if not msgs or len(got) >= n:
            break
    return got


def bodies(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [json.loads(m["Body"]) for m in messages]


def event_for(h: Harness, messages: list[dict[str, Any]]) -> dict[str, Any]:
    return sqs_event(messages, h.rt.deliveries.arn(), "us-east-1")


def effects(h: Harness) -> dict[str, int]:
    return dict(h.receiver.stats()["effects"])


def ok_answers(h: Harness) -> dict[str, int]:
    return dict(h.receiver.stats()["ok_answers"])


def at_most_one_effect_per_key(h: Harness) -> None:
    assert all(n == 1 for n in effects(h).values()), effects(h)


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


def start_attempt(h: Harness, delivery_id: Any, token: Any) -> dict[str, Any] | None:
    """Start an attempt as a consumer would (a send in flight for 30 s), without sending: the
    consumer then 'crashes'. A pending lease is taken first, as the consumer takes it."""
    take_leases(h, [(delivery_id, token)])
    rows = db.fetch_all(h.conn, "attempts_start", {
        "ids": [int(delivery_id)], "tokens": [str(token)],
        "deadlines": [h.clock.now() + timedelta(seconds=30)], "now": h.clock.now()})
    return rows[0] if rows else None


def take_leases(h: Harness, leases: list[tuple[Any, Any]]) -> int:
    """What a consumer does first with a batch: its pending leases move onto their rows."""
    return db.execute(h.conn, "deliveries_take_leases", {
        "ids": [int(i) for i, _ in leases], "tokens": [str(t) for _, t in leases],
        "now": h.clock.now()})


def pending_lease(h: Harness, key: str, tenant: str = "acme") -> dict[str, Any] | None:
    """The delivery's pending lease (leased by the scanner, not taken by a consumer yet)."""
    return h.conn.execute(
        "select q.* from due_queue q join deliveries d on d.id = q.id "
        "where q.token is not null and d.delivery_key = %s and d.tenant = %s",
        (key, tenant)).fetchone()


def due_entry(h: Harness, key: str, tenant: str = "acme") -> dict[str, Any] | None:
    """The delivery's entry in the due set (due, not leased)."""
    return h.conn.execute(
        "select q.* from due_queue q join deliveries d on d.id = q.id "
        "where q.token is null and d.delivery_key = %s and d.tenant = %s",
        (key, tenant)).fetchone()
