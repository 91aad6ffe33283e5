"""The local event-source loop against moto's SQS: an invocation that raises fails its whole
batch (as Lambda does), and is logged, counted and reported; idle means the queues are empty."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest

from reminders import config
from reminders.clock import FixedClock
from reminders.local import pipeline, stack
from reminders.local.event_source import EventSource, run_until_idle
from reminders.queue import LeaseMessage, Queue
from tests.conftest import T0, make_runtime

TOKEN = UUID("6f1c2a3e-8d5b-4c7a-9e0f-1a2b3c4d5e6f")


class Recorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def named(self, message: str) -> list[dict[str, Any]]:
        """The records logged with this message, as their fields (structured keys included)."""
        return [vars(r) for r in self.records if r.getMessage() == message]


@pytest.fixture
def logs() -> Iterator[Recorder]:
    recorder = Recorder()
    target = logging.getLogger("reminders")  # the Powertools logger's own logger
    target.addHandler(recorder)
    yield recorder
    target.removeHandler(recorder)


@pytest.fixture
def queue(queue_urls: config.QueueUrls, moto_endpoint: str) -> Queue:
    return Queue(stack.aws_client("sqs", moto_endpoint), queue_urls.deliveries)


def send(queue: Queue, n: int) -> None:
    queue.publish([LeaseMessage(i + 1, TOKEN) for i in range(n)])


def raising(*messages: str) -> Any:
    """A handler that raises, with the next of ``messages`` each time it is invoked."""
    calls = iter(messages)

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        raise RuntimeError(next(calls))

    return handler


def test_an_invocation_error_fails_the_batch_and_is_logged_counted_and_reported(
        queue: Queue, logs: Recorder) -> None:
    send(queue, 3)
    source = EventSource(queue, raising("database on fire\nsecond line", "still on fire"),
                         "boom", "us-east-1")

    assert source.poll_once() == 3
    counts = source.counts
    assert (counts.batches, counts.records, counts.failures, counts.errors) == (1, 3, 3, 1)
    assert counts.first_error == counts.last_error == "RuntimeError: database on fire"
    assert queue.depth() == 3  # the whole batch goes back to the queue, as in Lambda
    (record,) = logs.named("invocation failed")
    assert record["levelno"] == logging.ERROR
    assert (record["function"], record["error_type"], record["records"]) == (
        "boom", "RuntimeError", 3)
    assert record["error"] == "database on fire\nsecond line"
    assert len(record["message_ids"]) == 3 and record["exc_info"] is not None

    time.sleep(1.2)  # the visibility timeout: the batch comes back, and fails again
    assert source.poll_once() == 3
    assert (counts.batches, counts.records, counts.failures, counts.errors) == (2, 6, 6, 2)
    assert counts.first_error == "RuntimeError: database on fire"
    assert counts.last_error == "RuntimeError: still on fire"
    assert counts.as_json() == {"batches": 2, "records": 6, "failures": 6, "errors": 2,
                                "first_error": "RuntimeError: database on fire",
                                "last_error": "RuntimeError: still on fire"}


def test_item_failures_the_handler_reports_are_counted_without_an_error(
        queue: Queue, logs: Recorder) -> None:
    send(queue, 3)

    def fail_first(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"batchItemFailures": [{"itemIdentifier": event["Records"][0]["messageId"]}]}

    source = EventSource(queue, fail_first, "picky", "us-east-1")
    assert source.poll_once() == 3
    assert source.counts.as_json() == {"batches": 1, "records": 3, "failures": 1, "errors": 0,
                                       "first_error": None, "last_error": None}
    assert queue.counts() == {"visible": 0, "in_flight": 1}  # the two others were deleted
    assert logs.named("invocation failed") == []


@pytest.mark.parametrize(("answer", "why"), [
    (None, "expected an object, got NoneType"),
    ({"batchItemFailures": [{"itemIdentifier": "nope"}]},
     "'nope' is not a message of this batch"),
    ({"batchItemFailures": [{"id": "x"}]}, "a failure without an itemIdentifier"),
    ({"batchItemFailures": [{"itemIdentifier": ["x"]}]}, "a failure without an itemIdentifier"),
])
def test_an_invalid_batch_response_fails_the_whole_batch(queue: Queue, logs: Recorder,
                                                         answer: Any, why: str) -> None:
    send(queue, 2)
    source = EventSource(queue, lambda event, context: answer, "confused", "us-east-1")
    assert source.poll_once() == 2
    assert (source.counts.failures, source.counts.errors) == (2, 1)
    assert source.counts.first_error == f"InvalidBatchResponse: {why}"
    assert queue.depth() == 2
    assert len(logs.named("invocation failed")) == 1


def test_idle_only_when_the_queue_is_empty_delayed_messages_included(queue: Queue) -> None:
    seen: list[str] = []

    def ok(event: dict[str, Any], context: Any) -> dict[str, Any]:
        seen.extend(r["body"] for r in event["Records"])
        return {"batchItemFailures": []}

    queue.client.send_message(QueueUrl=queue.url, MessageBody="later", DelaySeconds=2)
    source = EventSource(queue, ok, "patient", "us-east-1")
    assert run_until_idle([source], max_rounds=1_000, max_seconds=0.3, idle_sleep=0.05) is False
    assert seen == []
    assert run_until_idle([source], max_rounds=1_000, max_seconds=15, idle_sleep=0.1) is True
    assert seen == ["later"] and queue.depth() == 0


def test_work_reports_invocation_errors_in_its_summary(queue_urls: config.QueueUrls,
                                                       moto_endpoint: str,
                                                       logs: Recorder) -> None:
    dead = f"postgresql://nobody:x@127.0.0.1:{stack.free_port()}/nothing"
    rt = make_runtime(dead, queue_urls, moto_endpoint, FixedClock(T0))
    try:
        rt.deliveries.publish([LeaseMessage(1, TOKEN)])
        out = pipeline.work(rt, max_seconds=2.5)
    finally:
        rt.close()

    assert out["idle"] is False  # the message is still waiting for a database
    consumer = out["consumer"]
    assert consumer["records"] >= 1 and consumer["errors"] >= 1
    assert consumer["failures"] == consumer["records"]
    assert consumer["first_error"].startswith("DatabaseUnavailable: cannot connect to Postgres")
    assert out["failed_records"] == consumer["failures"] + out["redrive"]["failures"]
    assert out["invocation_errors"] == consumer["errors"] + out["redrive"]["errors"]
    assert set(out) >= {"idle", "consumer", "redrive"}
    assert set(consumer) >= {"batches", "records", "failures"}
    logged = logs.named("invocation failed")
    assert logged and logged[0]["error_type"] == "DatabaseUnavailable"
