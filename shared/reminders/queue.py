"""The one place that talks to SQS. Messages carry only ``{delivery_id, lease_token}``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from reminders.errors import InvalidInput

SQS_BATCH = 10  # SendMessageBatch and DeleteMessageBatch take at most ten entries


@dataclass(frozen=True)
class LeaseMessage:
    delivery_id: int
    lease_token: UUID

    def body(self) -> str:
        return json.dumps({"delivery_id": self.delivery_id, "lease_token": str(self.lease_token)},
                          separators=(",", ":"))


def parse_body(body: str) -> LeaseMessage:
    """Parse a queue message body; raise InvalidInput naming what is wrong."""
    try:
        data = json.loads(body)
    except (TypeError, ValueError):
        raise InvalidInput(f"body is not JSON: {body[:80]!r}") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"body must be a JSON object, got {type(data).__name__}")
    delivery_id, token = data.get("delivery_id"), data.get("lease_token")
    if not isinstance(delivery_id, int) or isinstance(delivery_id, bool) or delivery_id <= 0:
        raise InvalidInput(f"delivery_id must be a positive integer, got {delivery_id!r}")
    if not isinstance(token, str):
        raise InvalidInput(f"lease_token must be a UUID string, got {token!r}")
    try:
        return LeaseMessage(delivery_id, UUID(token))
    except ValueError:
        raise InvalidInput(f"lease_token is not a UUID: {token!r}") from None


@dataclass(frozen=True)
class Rejected:
    message: LeaseMessage
    reason: str


class Queue:
    def __init__(self, client: Any, url: str) -> None:
        self.client = client
        self.url = url

    def publish(self, messages: Sequence[LeaseMessage]) -> list[Rejected]:
        """Send in batches of ten; return what SQS did not take (whole failed calls included)."""
        rejected: list[Rejected] = []
        for start in range(0, len(messages), SQS_BATCH):
            chunk = messages[start:start + SQS_BATCH]
            entries = [{"Id": str(i), "MessageBody": m.body()} for i, m in enumerate(chunk)]
            try:
                answer = self.client.send_message_batch(QueueUrl=self.url, Entries=entries)
            except Exception as exc:  # noqa: BLE001 (any failed call rejects its chunk)
                rejected += [Rejected(m, f"SendMessageBatch failed: {exc}") for m in chunk]
                continue
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
