"""A local event-source mapping: receive from SQS, call a handler with the real SQS event
shape, delete what succeeded, leave failures to the visibility timeout (and so to the queue's
redrive policy, which moves them to the dead-letter queue)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from reminders.queue import Queue

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


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


@dataclass
class Counts:
    batches: int = 0
    records: int = 0
    failures: int = 0


class EventSource:
    """One queue feeding one handler, as Lambda's event source mapping would."""

    def __init__(self, queue: Queue, handler: Handler, function_name: str, region: str,
                 batch_size: int = 10) -> None:
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
        event = sqs_event(messages, self.arn, self.region)
        context = LambdaContext(function_name=self.function_name)
        try:
            answer = self.handler(event, context)
            failed = {f["itemIdentifier"] for f in answer.get("batchItemFailures", [])}
        except Exception:  # noqa: BLE001 (an invocation error fails the batch, as in Lambda)
            failed = {m["MessageId"] for m in messages}
        done = [m["ReceiptHandle"] for m in messages if m["MessageId"] not in failed]
        if done:
            self.queue.delete(done)
        self.counts.batches += 1
        self.counts.records += len(messages)
        self.counts.failures += len(failed)
        return len(messages)


def run_until_idle(sources: list[EventSource], *, max_rounds: int, max_seconds: float,
                   idle_sleep: float = 0.2) -> bool:
    """Poll every source until all queues are empty with nothing in flight. Bounded by rounds
    and by wall time (failures wait out their visibility timeout). True when idle was reached."""
    deadline = time.monotonic() + max_seconds
    for _ in range(max_rounds):
        got = sum(source.poll_once() for source in sources)
        if got:
            continue
        if all(sum(s.queue.counts().values()) == 0 for s in sources):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(idle_sleep)
    return False
