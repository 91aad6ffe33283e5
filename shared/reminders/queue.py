"""The one place that talks to SQS. Messages carry only ``{delivery_id, lease_token}``."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol
from uuid import UUID

from reminders.errors import InvalidInput

SQS_BATCH = 10  # SendMessageBatch and DeleteMessageBatch take at most ten entries
# What parse_body will even look at. SQS allows 256 KiB; what the scanner publishes is under
# 100 bytes, so anything near this is not ours and is refused before it is parsed.
MAX_BODY_BYTES = 4096
# Our bodies are one flat object; a few levels spare for fields a future sender may add.
MAX_BODY_NESTING = 20
BIGINT_MAX = 2**63 - 1  # deliveries.id is a Postgres bigint
# A JSON string (closing quote optional, so no text is scanned twice) or a bracket.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]', re.DOTALL)


@dataclass(frozen=True)
class LeaseMessage:
    delivery_id: int
    lease_token: UUID

    def body(self) -> str:
        # What json.dumps gives with compact separators: an int and a UUID need no escaping.
        return f'{{"delivery_id":{int(self.delivery_id)},"lease_token":"{self.lease_token}"}}'

    @classmethod
    def checked(cls, delivery_id: Any, lease_token: Any) -> LeaseMessage:
        """From untrusted values (a publisher's payload); InvalidInput names what is wrong."""
        return cls(_delivery_id(delivery_id), _lease_token(lease_token))


def parse_body(body: str) -> LeaseMessage:
    """Parse a queue message body; raise InvalidInput naming what is wrong, in one line.
    Whatever the body holds, nothing but InvalidInput escapes (invariant 7)."""
    data = _decode(_checked_text(body))
    if not isinstance(data, dict):
        raise InvalidInput(f"body must be a JSON object, got {type(data).__name__}")
    return LeaseMessage(_delivery_id(data.get("delivery_id")),
                        _lease_token(data.get("lease_token")))


def _checked_text(body: object) -> str:
    """The body, if it is text of a size and shape worth handing to the JSON parser."""
    if not isinstance(body, str):
        raise InvalidInput(f"body must be a string, got {type(body).__name__}")
    size = len(body.encode("utf-8", "surrogatepass"))
    if size > MAX_BODY_BYTES:
        raise InvalidInput(f"body is {size} bytes; the limit is {MAX_BODY_BYTES}")
    try:
        body.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"body is not UTF-8 text: {exc.reason} at character {exc.start}"
                           ) from None
    if _nesting(body) > MAX_BODY_NESTING:
        raise InvalidInput(f"body nests deeper than {MAX_BODY_NESTING} levels")
    return body


def _nesting(text: str) -> int:
    """How deep arrays and objects nest, brackets inside JSON strings aside."""
    depth = deepest = 0
    for token in _JSON_TOKEN.findall(text):
        if token in ("[", "{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in ("]", "}"):
            depth -= 1
    return deepest


def _decode(text: str) -> Any:
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise InvalidInput("body nests too deeply to parse") from None
    except InvalidInput:
        raise
    except ValueError:
        raise InvalidInput(f"body is not JSON: {text[:80]!r}") from None


def _refuse_constant(name: str) -> NoReturn:
    raise InvalidInput(f"body is not JSON: {name} is not a JSON value")


def _delivery_id(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InvalidInput(f"delivery_id must be a positive integer, got {_shown(value)}")
    if value > BIGINT_MAX:
        raise InvalidInput(f"delivery_id must be at most {BIGINT_MAX} (Postgres bigint), "
                           f"got {_shown(value)}")
    return value


def _lease_token(value: Any) -> UUID:
    if not isinstance(value, str):
        raise InvalidInput(f"lease_token must be a UUID string, got {_shown(value)}")
    try:
        return UUID(value)
    except ValueError:
        raise InvalidInput(f"lease_token is not a UUID: {_shown(value)}") from None


def _shown(value: Any, limit: int = 60) -> str:
    """A value as it goes into a reason: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 3]}..."


@dataclass(frozen=True)
class Rejected:
    message: LeaseMessage
    reason: str
    # Refused because the publisher function's Invoke was refused (reminders.fanout), not by
    # the queue: the scanner counts these apart (PublisherNotInvoked).
    invoke_refused: bool = False


class Publisher(Protocol):
    """What the scanner hands its leases to: the deliveries queue itself, or a fan-out to
    publisher functions (reminders.fanout). Returns the messages that were refused."""

    def publish(self, messages: Sequence[LeaseMessage], *,
                concurrency: int = 1) -> list[Rejected]: ...


class Queue:
    def __init__(self, client: Any, url: str) -> None:
        self.client = client
        self.url = url

    def publish(self, messages: Sequence[LeaseMessage], *,
                concurrency: int = 1) -> list[Rejected]:
        """Send in batches of ten, ``concurrency`` calls at a time; return what SQS did not take
        (whole failed calls included)."""
        chunks = [messages[i:i + SQS_BATCH] for i in range(0, len(messages), SQS_BATCH)]
        if concurrency <= 1 or len(chunks) <= 1:
            return [r for chunk in chunks for r in self._publish_chunk(chunk)]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(concurrency, len(chunks))) as pool:
            return [r for part in pool.map(self._publish_chunk, chunks) for r in part]

    def _publish_chunk(self, chunk: Sequence[LeaseMessage]) -> list[Rejected]:
        entries = [{"Id": str(i), "MessageBody": m.body()} for i, m in enumerate(chunk)]
        try:
            answer = self.client.send_message_batch(QueueUrl=self.url, Entries=entries)
        except Exception as exc:  # noqa: BLE001 (any failed call rejects its chunk)
            return [Rejected(m, f"SendMessageBatch failed: {exc}") for m in chunk]
        rejected = []
        for failed in answer.get("Failed", []):
            reason = f"{failed.get('Code', '?')}: {failed.get('Message', '')}".strip()
            rejected.append(Rejected(chunk[int(failed["Id"])], reason))
        return rejected

    def depth(self) -> int:
        """Messages waiting or in flight (approximate, as SQS reports them)."""
        attrs = self.client.get_queue_attributes(QueueUrl=self.url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed"])["Attributes"]
        return sum(int(v) for v in attrs.values())

    def counts(self) -> dict[str, int]:
        attrs = self.client.get_queue_attributes(QueueUrl=self.url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        return {"visible": int(attrs["ApproximateNumberOfMessages"]),
                "in_flight": int(attrs["ApproximateNumberOfMessagesNotVisible"])}

    def send_raw(self, body: str, attributes: dict[str, str]) -> None:
        self.client.send_message(QueueUrl=self.url, MessageBody=body, MessageAttributes={
            k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()})

    def receive(self, limit: int = SQS_BATCH) -> list[dict[str, Any]]:
        answer = self.client.receive_message(
            QueueUrl=self.url, MaxNumberOfMessages=min(limit, SQS_BATCH), WaitTimeSeconds=0,
            AttributeNames=["All"], MessageAttributeNames=["All"])
        messages: list[dict[str, Any]] = answer.get("Messages", [])
        return messages

    def delete(self, receipt_handles: Sequence[str]) -> None:
        for start in range(0, len(receipt_handles), SQS_BATCH):
            chunk = receipt_handles[start:start + SQS_BATCH]
            self.client.delete_message_batch(QueueUrl=self.url, Entries=[
                {"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(chunk)])

    def arn(self) -> str:
        attrs = self.client.get_queue_attributes(QueueUrl=self.url, AttributeNames=["QueueArn"])
        return str(attrs["Attributes"]["QueueArn"])
