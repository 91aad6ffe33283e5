"""Bodies that once failed a whole batch (invariant 7): an id beyond Postgres' bigint, deep
nesting, a non-standard constant, an oversized body. Each fails alone; the good ones are sent;
redrive parks the bad ones with a reason naming what is wrong."""

from __future__ import annotations

import json

from reminders import consumer
from reminders.queue import MAX_BODY_BYTES
from tests.conftest import Harness
from tests.integration.pipeline_helpers import (
    delivery,
    effects,
    event_for,
    schedule_webhook,
    take_messages,
    tick,
    work,
)

TOKEN = "00000000-0000-0000-0000-000000000000"
OVERSIZED = json.dumps({"delivery_id": 1, "lease_token": TOKEN, "pad": "x" * MAX_BODY_BYTES})
BAD = {
    json.dumps({"delivery_id": 2**63, "lease_token": TOKEN}):
        f"unparseable: delivery_id must be at most {2**63 - 1} (Postgres bigint), got {2**63}",
    "[" * 3000: "unparseable: body nests deeper than 20 levels",
    f'{{"delivery_id": NaN, "lease_token": "{TOKEN}"}}':
        "unparseable: body is not JSON: NaN is not a JSON value",
    OVERSIZED: f"unparseable: body is {len(OVERSIZED)} bytes; the limit is {MAX_BODY_BYTES}",
}


def test_each_bad_body_fails_alone_and_is_parked_with_its_reason(harness: Harness) -> None:
    h = harness
    (key,) = schedule_webhook(h, "good")
    tick(h)
    for body in BAD:
        h.rt.deliveries.send_raw(body, {})
    messages = take_messages(h, n=len(BAD) + 1)
    assert len(messages) == len(BAD) + 1

    answer = consumer.process_batch(event_for(h, messages), h.rt)

    failed = {f["itemIdentifier"] for f in answer["batchItemFailures"]}
    assert failed == {m["MessageId"] for m in messages if m["Body"] in BAD}
    assert delivery(h, key)["state"] == "sent"
    # Through the real loop: retried, dead-lettered, then parked with the parser's reason.
    for m in messages:
        if m["MessageId"] in failed:
            h.rt.deliveries.send_raw(m["Body"], {})
    out = work(h)
    assert out["consumer"]["failures"] == 2 * len(BAD) and out["invocation_errors"] == 0
    parked = h.rt.parking.receive(10)
    reasons = {p["Body"]: p["MessageAttributes"]["reason"]["StringValue"] for p in parked}
    assert reasons == BAD
    assert effects(h) == {key: 1}
