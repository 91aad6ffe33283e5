"""Publishing fanned out to publisher functions: the real scanner, the fan-out publisher, the
real publisher handler, SQS in moto, the real consumer and a real receiver. Lambda itself
stands in: over HTTP (tests/integration/lambda_invoke.py, so boto3's asynchronous Invoke runs
for real) or in process (reminders.local.publisher, which can refuse, lose, hold or repeat a
chunk)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest

from reminders import config, consumer, fanout, runtime
from reminders.errors import InvalidInput
from reminders.fanout import ChunkSender, FanOutPublisher, PublishIncomplete
from reminders.lambdas import EventInvoker
from reminders.local import stack
from reminders.local.publisher import Fault, InProcessInvoker
from reminders.queue import LeaseMessage, Queue
from tests.conftest import Harness
from tests.integration.lambda_invoke import LambdaStandIn
from tests.integration.pipeline_helpers import (
    attempts,
    delivery,
    due_entry,
    effects,
    event_for,
    pending_lease,
    schedule_webhook,
    take_messages,
    tick,
    work,
)

PUBLISHER = "Reminders-publisher"


@pytest.fixture(autouse=True)
def _no_installed_sender() -> Iterator[None]:
    yield
    fanout.install_sender(None)


def _sender(h: Harness) -> ChunkSender:
    return ChunkSender(Queue(h.sqs(), h.rt.deliveries.url), concurrency=4)


def _in_process(h: Harness, chunk: int, *faults: Fault) -> InProcessInvoker:
    """Fan-out through the in-process stand-in; the n-th invoke meets faults[n-1] (then run)."""
    invoker = InProcessInvoker(
        _sender(h), fault=lambda n: faults[n - 1] if n <= len(faults) else "run")
    h.rt.fanout = FanOutPublisher(invoker, chunk)
    return invoker


def _lambda_client(h: Harness, url: str) -> Any:
    """boto3's Lambda client on the stand-in at ``url``. The stand-in checks no signature; it
    signs with moto's administrator key (the tests' roles are the self-publishing variant's,
    whose scanner has no invoke grant)."""
    return stack.aws_client("lambda", url, credentials=stack.administrator(h.endpoint))


def _sends(h: Harness) -> dict[str, int]:
    """Requests the receiver got per delivery key (every send, answered or not)."""
    return dict(h.receiver.stats()["requests"])


def test_a_fanned_out_tick_publishes_everything_it_leased_through_lambdas_invoke_api(
        harness: Harness) -> None:
    """boto3's Event invoke over HTTP, one per chunk, in parallel; each runs the publisher
    handler, which sends its chunk to SQS; the consumer delivers every one once."""
    from functions.publisher.handler import handler

    h = harness
    keys = schedule_webhook(h, "many", recipients=[f"p{i}" for i in range(25)])
    fanout.install_sender(_sender(h))
    stand_in = LambdaStandIn({PUBLISHER: handler})
    url = stand_in.start()
    try:
        h.rt.fanout = FanOutPublisher(EventInvoker(PUBLISHER, _lambda_client(h, url)),
                                      chunk=10)
        out = tick(h)
    finally:
        stand_in.stop()
    assert (out["leased"], out["published"], out["released"]) == (25, 25, 0)
    assert [c["headers"].get("X-Amz-Invocation-Type") for c in stand_in.calls] == ["Event"] * 3
    assert sorted(len(json.loads(c["body"])["messages"]) for c in stand_in.calls) == [5, 10, 10]
    assert stand_in.async_errors == []
    assert h.rt.deliveries.counts()["visible"] == 25
    work(h)
    assert {delivery(h, k)["state"] for k in keys} == {"sent"}
    assert _sends(h) == {k: 1 for k in keys}


def test_an_invoke_lambda_refuses_releases_its_chunk_and_it_is_due_next_tick(
        harness: Harness) -> None:
    h = harness
    keys = schedule_webhook(h, "refused", recipients=[f"p{i}" for i in range(12)])
    invoker = _in_process(h, 4, "run", "refuse", "run")
    out = tick(h)
    assert (out["leased"], out["published"], out["released"]) == (12, 8, 4)
    assert invoker.invokes == 3 and invoker.runs == 2
    released = [k for k in keys if pending_lease(h, k) is None]
    assert len(released) == 4
    assert all(delivery(h, k)["state"] == "scheduled" and due_entry(h, k) for k in released)
    work(h)
    again = tick(h)  # the next tick, at the same instant: due again
    assert (again["leased"], again["published"]) == (4, 4)
    work(h)
    assert {delivery(h, k)["state"] for k in keys} == {"sent"}
    assert _sends(h) == {k: 1 for k in keys}


def test_a_refused_invoke_through_the_api_releases_its_chunk(harness: Harness) -> None:
    """No such function: Lambda answers 404, boto3 raises, the chunk is released fenced."""
    h = harness
    keys = schedule_webhook(h, "nofn", recipients=["a", "b"])
    stand_in = LambdaStandIn({})
    url = stand_in.start()
    try:
        h.rt.fanout = FanOutPublisher(EventInvoker(PUBLISHER, _lambda_client(h, url)),
                                      chunk=10)
        out = tick(h)
    finally:
        stand_in.stop()
    assert (out["leased"], out["published"], out["released"]) == (2, 0, 2)
    assert {delivery(h, k)["state"] for k in keys} == {"scheduled"}


def test_a_lost_chunk_is_reclaimed_after_the_lease_expires_and_delivered_once(
        harness: Harness) -> None:
    h = harness
    keys = schedule_webhook(h, "lost", recipients=[f"p{i}" for i in range(6)])
    _in_process(h, 3, "lose", "run")
    first = tick(h)
    assert (first["leased"], first["published"]) == (6, 6)  # Lambda accepted both chunks
    work(h)
    assert sum(delivery(h, k)["state"] == "sent" for k in keys) == 3
    stuck = [k for k in keys if pending_lease(h, k) is not None]  # no consumer took them
    assert len(stuck) == 3 and {delivery(h, k)["state"] for k in stuck} == {"scheduled"}
    h.clock.advance(timedelta(seconds=h.rt.settings.limits.lease_seconds - 1))
    assert tick(h)["reclaimed"] == {}  # not before the lease expires
    h.clock.advance(timedelta(seconds=2))
    out = tick(h)
    assert out["reclaimed"] == {"scheduled": 3} and out["published"] == 3
    work(h)
    assert {delivery(h, k)["state"] for k in keys} == {"sent"}
    assert _sends(h) == {k: 1 for k in keys}


def test_a_chunk_that_arrives_after_its_leases_were_reclaimed_is_ignored(
        harness: Harness) -> None:
    """Lambda's retry comes after the scanner took the leases back: stale tokens."""
    h = harness
    keys = schedule_webhook(h, "late", recipients=["a", "b", "c"])
    invoker = _in_process(h, 10, "hold")
    tick(h)
    old = {k: str((pending_lease(h, k) or {})["token"]) for k in keys}
    h.clock.advance(timedelta(seconds=h.rt.settings.limits.lease_seconds + 1))
    assert tick(h)["reclaimed"] == {"scheduled": 3}
    work(h)
    assert {delivery(h, k)["state"] for k in keys} == {"sent"}
    invoker.run_held()  # the held chunk goes out now, with the old tokens
    late = take_messages(h, n=10)
    assert sorted(json.loads(m["Body"])["lease_token"] for m in late) == sorted(old.values())
    answer = consumer.process_batch(event_for(h, late), h.rt)
    assert answer == {"batchItemFailures": []}
    assert all(len(attempts(h, k)) == 1 for k in keys)
    assert _sends(h) == {k: 1 for k in keys}


def test_a_chunk_published_twice_makes_one_send_per_delivery_key(harness: Harness) -> None:
    """Lambda's retry after a failure that came after the sends: every message twice, with
    one lease token; the consumer takes the first copy and ignores the second."""
    h = harness
    keys = schedule_webhook(h, "twice", recipients=[f"p{i}" for i in range(5)])
    invoker = _in_process(h, 10, "twice")
    out = tick(h)
    assert out["published"] == 5 and invoker.runs == 2
    messages = take_messages(h, n=20)
    assert len(messages) == 10
    firsts: dict[str, dict[str, Any]] = {}
    seconds: list[dict[str, Any]] = []
    for m in messages:
        if m["Body"] in firsts:
            seconds.append(m)
        else:
            firsts[m["Body"]] = m
    assert len(firsts) == 5 and len(seconds) == 5
    assert consumer.process_batch(event_for(h, list(firsts.values())), h.rt) == {
        "batchItemFailures": []}
    assert consumer.process_batch(event_for(h, seconds), h.rt) == {"batchItemFailures": []}
    assert {delivery(h, k)["state"] for k in keys} == {"sent"}
    assert all(len(attempts(h, k)) == 1 for k in keys)
    assert _sends(h) == {k: 1 for k in keys} and effects(h) == {k: 1 for k in keys}


def test_a_publisher_the_queue_refuses_raises_so_lambda_retries_then_the_lease_expires(
        harness: Harness) -> None:
    """The handler raises (Lambda retries twice, then drops the chunk); nothing is published,
    and the leases come back through reclaim."""
    h = harness
    keys = schedule_webhook(h, "noqueue", recipients=["a", "b"])
    missing = h.rt.deliveries.url + "-missing"
    invoker = InProcessInvoker(ChunkSender(Queue(h.sqs(), missing), concurrency=2))
    h.rt.fanout = FanOutPublisher(invoker, 10)
    tick(h)
    assert invoker.runs == 3 and len(invoker.failures) == 3
    assert all(f.startswith("PublishIncomplete: the deliveries queue refused 2 of 2")
               for f in invoker.failures)
    assert h.rt.deliveries.counts()["visible"] == 0
    h.rt.fanout = None  # the scanner publishes itself again
    h.clock.advance(timedelta(seconds=h.rt.settings.limits.lease_seconds + 1))
    assert tick(h)["reclaimed"] == {"scheduled": 2}
    work(h)
    assert {delivery(h, k)["state"] for k in keys} == {"sent"}


def test_the_publisher_refuses_a_bad_payload_naming_what_is_wrong() -> None:
    good: list[Any] = [1, "6f2d9a44-44a3-4c3b-9a8e-0d1f2e3a4b5c"]
    assert fanout.parse_payload({"version": 1, "messages": [good]}) == [
        LeaseMessage(1, UUID(str(good[1])))]
    for event, says in [
        ([], "must be a JSON object"),
        ({"version": 2, "messages": []}, "version must be 1"),
        ({"version": 1, "messages": {}}, "messages must be a list"),
        ({"version": 1, "messages": [[1]]}, r"messages\[0\] must be \[delivery_id"),
        ({"version": 1, "messages": [good, [0, good[1]]]}, r"messages\[1\]: delivery_id"),
        ({"version": 1, "messages": [[1, "nope"]]}, r"messages\[0\]: lease_token is not"),
    ]:
        with pytest.raises(InvalidInput, match=says):
            fanout.parse_payload(event)


def test_the_payload_round_trips_and_stays_under_the_async_invoke_limit() -> None:
    chunk = [LeaseMessage(2**63 - 1, uuid4()) for _ in range(config.MAX_PUBLISH_CHUNK)]
    body = fanout.payload(chunk)
    assert len(body) < 256 * 1024
    assert fanout.parse_payload(json.loads(body)) == chunk


def test_the_environment_turns_fan_out_on_and_leaves_it_off_when_unset(
        database_url: str, queue_urls: config.QueueUrls, moto_endpoint: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"DATABASE_URL": database_url, "REMINDERS_QUEUE_URL": queue_urls.deliveries,
           "REMINDERS_DLQ_URL": queue_urls.dlq, "REMINDERS_PARKING_QUEUE_URL": queue_urls.parking,
           **stack.AWS_TEST_ENV}
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    itself = runtime.from_env(env)
    assert itself.fanout is None and itself.publisher is itself.deliveries
    fanned = runtime.from_env({**env, "REMINDERS_PUBLISHER_FUNCTION": PUBLISHER,
                               "REMINDERS_PUBLISH_CHUNK": "500"})
    assert isinstance(fanned.publisher, FanOutPublisher)
    assert fanned.publisher.chunk == 500
    assert isinstance(fanned.publisher.invoker, EventInvoker)
    assert fanned.publisher.invoker.function_name == PUBLISHER
    with pytest.raises(Exception, match="REMINDERS_PUBLISH_CHUNK must be between 1 and 2000"):
        config.load({**env, "REMINDERS_PUBLISH_CHUNK": "5000"})
    with pytest.raises(Exception, match="REMINDERS_QUEUE_URL is not set"):
        fanout.sender_from_env({})


def test_publish_incomplete_names_the_first_reason(harness: Harness) -> None:
    h = harness
    sender = ChunkSender(Queue(h.sqs(), h.rt.deliveries.url + "-missing"), concurrency=1)
    with pytest.raises(PublishIncomplete, match=r"refused 1 of 1 messages \(first: "
                                                r"SendMessageBatch failed"):
        sender.send(json.loads(fanout.payload([LeaseMessage(7, uuid4())])))


def test_a_bad_publisher_setting_fails_its_cold_start_in_one_line() -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("REMINDERS_")}
    env.update({"AWS_LAMBDA_FUNCTION_NAME": "publisher", "AWS_DEFAULT_REGION": "us-east-1",
                "REMINDERS_QUEUE_URL": "http://q", "REMINDERS_PUBLISH_CONCURRENCY": "many"})
    done = subprocess.run([sys.executable, "-c", "import functions.publisher.handler"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "reminders.errors.ConfigError: REMINDERS_PUBLISH_CONCURRENCY must be a whole number, "
        "got 'many'")
    del env["REMINDERS_QUEUE_URL"], env["REMINDERS_PUBLISH_CONCURRENCY"]
    done = subprocess.run([sys.executable, "-c", "import functions.publisher.handler"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.stderr.strip().splitlines()[-1] == (
        "reminders.errors.ConfigError: REMINDERS_QUEUE_URL is not set: the publisher sends "
        "to it")
