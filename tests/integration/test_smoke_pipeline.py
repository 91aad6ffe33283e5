from __future__ import annotations

from datetime import timedelta

from reminders import db, schedules
from reminders.local import pipeline
from tests.conftest import Harness


def register(h: Harness, url: str) -> None:
    db.execute(h.conn, "endpoint_add", {"tenant": None, "url": url,
                                        "secret": h.receiver.secret})


def test_on_time_webhook_is_sent_once(harness: Harness) -> None:
    h = harness
    url = h.receiver.hook_url("ok")
    register(h, url)
    result = schedules.schedule(h.conn, tenant="acme", recipients=["alice"], channel="webhook",
                                to=url, at=h.clock.now() + timedelta(minutes=5),
                                now=h.clock.now(), key="invoice-1")
    key = result.deliveries[0].delivery_key
    assert pipeline.tick(h.rt)["leased"] == 0
    h.clock.advance(timedelta(minutes=5))
    out = pipeline.run(h.rt)
    assert out["tick"]["published"] == 1
    assert out["work"]["idle"] is True
    row = db.fetch_one(h.conn, "delivery_by_key", {"key": key, "tenant": "acme"})
    assert row is not None and row["state"] == "sent"
    assert h.receiver.stats()["effects"] == {key: 1}
