"""A local event-source mapping: receive from SQS, call a handler with the real SQS event
shape, delete what succeeded, leave failures to the visibility timeout (and so to the queue's
redrive policy, which moves them to the dead-letter queue)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from reminders.errors import RemindersError
from reminders.observability import logger
from reminders.queue import Queue

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]
# Told of every invocation: the function's name, its duration in seconds, whether it raised
# (what Lambda counts in AWS/Lambda Invocations, Duration and Errors).
Observer = Callable[[str, float, bool], None]


@dataclass
class LambdaContext:
    """The attributes Powertools reads from a Lambda context."""

    function_name: str
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = ""
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def sqs_event(messages: list[dict[str, Any]], queue_arn: str, region: str) -> dict[str, Any]:
    """Turn ReceiveMessage output into the event Lambda's SQS event source delivers."""
    return {"Records": [{
        "messageId": m["MessageId"],
        "receiptHandle": m["ReceiptHandle"],
        "body": m["Body"],
        "attributes": m.get("Attributes", {}),
        "messageAttributes": {
            k: {"stringValue": v.get("StringValue"), "binaryValue": v.get("BinaryValue"),
                "stringListValues": [], "binaryListValues": [], "dataType": v["DataType"]}
            for k, v in m.get("MessageAttributes", {}).items()},
        "md5OfBody": m.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    } for m in messages]}


ERROR_TEXT_LIMIT = 300  # characters of an invocation error kept for the summary


class InvalidBatchResponse(ValueError):
    """The handler answered something Lambda could not read; Lambda fails the whole batch."""


@dataclass
class Counts:
    batches: int = 0
    records: int = 0
    failures: int = 0                 # records left to the visibility timeout, for a retry
    errors: int = 0                   # invocations that raised (each failed its whole batch)
    first_error: str | None = None    # "Type: first line of the message"
    last_error: str | None = None

    def add_error(self, text: str) -> None:
        self.errors += 1
        self.first_error = self.first_error or text
        self.last_error = text

    def as_json(self) -> dict[str, Any]:
        return {"batches": self.batches, "records": self.records, "failures": self.failures,
                "errors": self.errors, "first_error": self.first_error,
                "last_error": self.last_error}


def error_text(exc: BaseException) -> str:
    """One line naming an exception: its type and the first line of its message."""
    first = next(iter(str(exc).strip().splitlines()), "")
    text = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return text[:ERROR_TEXT_LIMIT]


def failed_ids(answer: Any, message_ids: set[str]) -> set[str]:
    """The records a partial batch response names; raise InvalidBatchResponse when it cannot
    be read, as Lambda then fails the whole batch."""
    if not isinstance(answer, dict):
        raise InvalidBatchResponse(f"expected an object, got {type(answer).__name__}")
    failed: set[str] = set()
    for failure in answer.get("batchItemFailures") or []:
        ident = failure.get("itemIdentifier") if isinstance(failure, dict) else None
        if not isinstance(ident, str) or not ident:
            raise InvalidBatchResponse("a failure without an itemIdentifier")
        if ident not in message_ids:
            raise InvalidBatchResponse(f"{ident[:80]!r} is not a message of this batch")
        failed.add(ident)
    return failed


def batch_failures(answer: Any, message_ids: set[str]) -> set[str]:
    """As :func:`failed_ids`, with what Lambda counts as a complete success besides: a null
    response (a handler that returns nothing) or one without ``batchItemFailures``."""
    return set() if answer is None else failed_ids(answer, message_ids)


class EventSource:
    """One queue feeding one handler, as Lambda's event source mapping would."""

    def __init__(self, queue: Queue, handler: Handler, function_name: str, region: str,
                 batch_size: int = 10, observe: Observer | None = None) -> None:
        self.observe = observe
        self.queue = queue
        self.handler = handler
        self.function_name = function_name
        self.region = region
        self.batch_size = batch_size
        self.arn = queue.arn()
        self.counts = Counts()

    def poll_once(self) -> int:
        """Receive one batch and hand it to the handler; return how many records it had."""
        messages = self.queue.receive(self.batch_size)
        if not messages:
            return 0
        failed = self._invoke(messages)
        done = [m["ReceiptHandle"] for m in messages if m["MessageId"] not in failed]
        if done:
            self.queue.delete(done)
        self.counts.batches += 1
        self.counts.records += len(messages)
        self.counts.failures += len(failed)
        return len(messages)

    def _invoke(self, messages: list[dict[str, Any]]) -> set[str]:
        """Call the handler; return the ids of the records that failed. An invocation that
        raises fails its whole batch, as in Lambda, and is logged and counted."""
        ids = {m["MessageId"] for m in messages}
        event = sqs_event(messages, self.arn, self.region)
        context = LambdaContext(function_name=self.function_name)
        began = time.monotonic()
        try:
            answer = self.handler(event, context)
        except Exception as exc:  # noqa: BLE001 (an invocation error fails the batch, as in Lambda)
            self._observed(began, error=True)
            self.counts.add_error(error_text(exc))
            # A domain error (Postgres down, a bad setting) is its message; only a bug's
            # traceback says more than the line that names it.
            logger.error("invocation failed", exc_info=not isinstance(exc, RemindersError),
                         extra={"function": self.function_name,
                                "error_type": type(exc).__name__, "error": str(exc),
                                "records": len(messages), "message_ids": sorted(ids)})
            return ids
        self._observed(began, error=False)
        try:
            return failed_ids(answer, ids)
        except InvalidBatchResponse as exc:  # the function ran; Lambda fails the whole batch
            self.counts.add_error(error_text(exc))
            logger.error("invocation failed", extra={  # the answer's fault, named in full
                "function": self.function_name, "error_type": type(exc).__name__,
                "error": str(exc), "records": len(messages), "message_ids": sorted(ids)})
            return ids

    def _observed(self, began: float, *, error: bool) -> None:
        if self.observe is not None:
            self.observe(self.function_name, time.monotonic() - began, error)


def run_until_idle(sources: list[EventSource], *, max_rounds: int, max_seconds: float,
                   idle_sleep: float = 0.2,
                   after_round: Callable[[float], None] | None = None) -> bool:
    """Poll every source until all queues are empty: nothing visible, in flight or delayed.
    Bounded by rounds and by wall time (failures wait out their visibility timeout). True only
    when the queues were seen empty; False when a bound was reached first. ``after_round`` is
    told, after each round, the seconds left before the wall-time bound."""
    deadline = time.monotonic() + max_seconds
    for _ in range(max_rounds):
        got = sum(source.poll_once() for source in sources)
        if after_round is not None:
            after_round(max(0.0, deadline - time.monotonic()))
        if got:
            continue
        if all(source.queue.depth() == 0 for source in sources):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(idle_sleep)
    return False
