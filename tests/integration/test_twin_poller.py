"""A poller from the template's event source mapping against moto's SQS: batches gathered
over the batching window, at most MaximumConcurrency in flight, partial batch responses, and
what is not deleted coming back with SQS's receive count until the redrive policy moves it."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from typing import Any

import pytest

from reminders import config
from reminders.local import stack
from reminders.local.twin.metrics import MetricKey, MetricStore, record_invocation
from reminders.local.twin.poller import Invocation, Poller
from reminders.local.twin.resources import PollerSpec, read_plan
from reminders.queue import Queue
from tests.twin_templates import template_copy


@pytest.fixture
def consumer_spec() -> PollerSpec:
    plan = read_plan(template_copy("self-publishing"))
    return next(p for p in plan.pollers if p.function.startswith("FunctionsConsumer"))


@pytest.fixture
def queue(queue_urls: config.QueueUrls, moto_endpoint: str) -> Queue:
    return Queue(stack.aws_client("sqs", moto_endpoint), queue_urls.deliveries)


def send(queue: Queue, n: int) -> None:
    for start in range(0, n, 10):
        queue.client.send_message_batch(QueueUrl=queue.url, Entries=[
            {"Id": str(i), "MessageBody": json.dumps({"n": i})}
            for i in range(start, min(n, start + 10))])


def test_a_batch_gathers_up_to_batch_size_over_the_window(
        queue: Queue, consumer_spec: PollerSpec) -> None:
    """BatchSize 25 with a window: SQS gives ten a receive, the poller gathers all 23 (one
    batch in flight at a time, so one poller gathers them all). The visibility timeout
    outlasts the window, as Lambda requires of a mapping's queue: else the first messages
    would come back before the batch is complete."""
    queue.client.set_queue_attributes(QueueUrl=queue.url, Attributes={"VisibilityTimeout": "30"})
    send(queue, 23)
    seen: list[int] = []
    spec = replace(consumer_spec, batch_size=25, maximum_batching_window=1,
                   maximum_concurrency=1)
    poller = Poller(spec, queue, lambda e: seen.append(len(e["Records"])), region=stack.REGION)
    assert poller.run(max_rounds=10, max_seconds=20)
    assert seen == [23]
    assert queue.depth() == 0


def test_without_a_window_a_batch_is_one_receive(queue: Queue,
                                                 consumer_spec: PollerSpec) -> None:
    """The deployed queue's visibility timeout outlasts a batch (360 s); the tests' 1 s did
    not always, on a loaded machine, and a message came back before its batch deleted it
    (seen 13 times for 12)."""
    queue.client.set_queue_attributes(QueueUrl=queue.url, Attributes={"VisibilityTimeout": "30"})
    send(queue, 12)
    seen: list[int] = []
    spec = replace(consumer_spec, batch_size=10, maximum_batching_window=0)
    poller = Poller(spec, queue, lambda e: seen.append(len(e["Records"])), region=stack.REGION)
    assert poller.run(max_rounds=10, max_seconds=20)
    assert sum(seen) == 12 and max(seen) <= 10


def test_at_most_maximum_concurrency_batches_are_in_flight(
        queue: Queue, consumer_spec: PollerSpec) -> None:
    send(queue, 8)
    lock, now, peak = threading.Lock(), [0], [0]

    def slow(event: dict[str, Any]) -> None:
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        time.sleep(0.3)
        with lock:
            now[0] -= 1

    spec = replace(consumer_spec, batch_size=1, maximum_batching_window=0,
                   maximum_concurrency=2)
    poller = Poller(spec, queue, slow, region=stack.REGION, default_concurrency=50)
    assert poller.run(max_rounds=20, max_seconds=30)
    assert peak[0] == 2 == poller.peak_in_flight
    assert poller.counts.batches == 8


def test_reported_failures_come_back_with_their_receive_count_then_go_to_the_dlq(
        queue: Queue, queue_urls: config.QueueUrls, moto_endpoint: str,
        consumer_spec: PollerSpec) -> None:
    """The tests' queues: visibility 1 s, maxReceiveCount 2 (conftest's overrides)."""
    send(queue, 3)
    counts: dict[str, list[str]] = {}
    poison = '{"n": 1}'

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        for record in event["Records"]:
            counts.setdefault(record["body"], []).append(
                record["attributes"]["ApproximateReceiveCount"])
        return {"batchItemFailures": [{"itemIdentifier": r["messageId"]}
                                      for r in event["Records"] if r["body"] == poison]}

    store = MetricStore()
    spec = replace(consumer_spec, batch_size=10, maximum_batching_window=0)
    poller = Poller(spec, queue, invoke, region=stack.REGION,
                    on_invocation=lambda i: record_invocation(
                        store, i.function, _at(), duration_ms=i.duration_ms, error=i.error))
    assert poller.run(max_rounds=20, max_seconds=30)
    assert counts[poison] == ["1", "2"]
    assert counts['{"n": 0}'] == counts['{"n": 2}'] == ["1"]
    # SQS moves a message to its dead-letter queue when a receive finds it past
    # maxReceiveCount: the poller may have gone idle before the poison's visibility ended.
    sqs = stack.aws_client("sqs", moto_endpoint)
    assert "Messages" not in sqs.receive_message(QueueUrl=queue_urls.deliveries,
                                                 WaitTimeSeconds=2, MaxNumberOfMessages=10)
    dlq = sqs.receive_message(QueueUrl=queue_urls.dlq, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in dlq] == [poison]
    assert poller.counts.failures == 2 and poller.counts.errors == 0
    invocations = store.values(MetricKey.of("AWS/Lambda", "Invocations",
                                            {"FunctionName": spec.function}), _at(), _later())
    assert invocations == [1.0] * poller.counts.batches


@pytest.mark.parametrize(("answer", "error"), [
    ({"batchItemFailures": [{"itemIdentifier": ""}]}, "a failure without an itemIdentifier"),
    ({"batchItemFailures": [{"itemIdentifier": "not-in-batch"}]}, "is not a message of"),
    ("ok", "expected an object, got str"),
])
def test_an_unreadable_batch_response_fails_the_whole_batch(
        queue: Queue, consumer_spec: PollerSpec, answer: Any, error: str) -> None:
    send(queue, 2)
    spec = replace(consumer_spec, batch_size=10, maximum_batching_window=0)
    poller = Poller(spec, queue, lambda e: answer, region=stack.REGION)
    failed = poller.handle(poller.receive_batch())
    assert len(failed) == 2 and poller.counts.errors == 1
    assert error in str(poller.counts.first_error)
    assert queue.depth() == 2


def test_a_null_response_is_a_complete_success(queue: Queue,
                                               consumer_spec: PollerSpec) -> None:
    send(queue, 2)
    poller = Poller(consumer_spec, queue, lambda e: None, region=stack.REGION)
    assert poller.handle(poller.receive_batch()) == set()
    assert queue.depth() == 0


def test_without_report_batch_item_failures_the_response_is_not_read(
        queue: Queue, consumer_spec: PollerSpec) -> None:
    send(queue, 2)
    spec = replace(consumer_spec, report_batch_item_failures=False, batch_size=10,
                   maximum_batching_window=0)

    def names_one(event: dict[str, Any]) -> dict[str, Any]:
        return {"batchItemFailures": [{"itemIdentifier": event["Records"][0]["messageId"]}]}

    poller = Poller(spec, queue, names_one, region=stack.REGION)
    assert poller.handle(poller.receive_batch()) == set()
    assert queue.depth() == 0


def test_a_function_error_returns_the_whole_batch_and_counts_as_an_error(
        queue: Queue, consumer_spec: PollerSpec) -> None:
    send(queue, 3)
    seen: list[Invocation] = []

    def raises(event: dict[str, Any]) -> None:
        raise RuntimeError("database unavailable\nmore")

    spec = replace(consumer_spec, batch_size=10, maximum_batching_window=0)
    poller = Poller(spec, queue, raises, region=stack.REGION, on_invocation=seen.append)
    assert len(poller.handle(poller.receive_batch())) == 3
    assert poller.counts.first_error == "RuntimeError: database unavailable"
    assert [i.error for i in seen] == [True]
    assert queue.depth() == 3


def test_a_disabled_mapping_polls_nothing(queue: Queue, consumer_spec: PollerSpec) -> None:
    send(queue, 1)
    poller = Poller(replace(consumer_spec, enabled=False), queue, lambda e: None,
                    region=stack.REGION)
    assert not poller.run(max_rounds=5, max_seconds=5)
    assert queue.depth() == 1


def _at() -> Any:
    from datetime import UTC, datetime

    return datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def _later() -> Any:
    from datetime import timedelta

    return _at() + timedelta(minutes=1)
