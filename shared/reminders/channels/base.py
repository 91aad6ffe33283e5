"""The one small interface every channel implements, and the outcome it reports."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol


class Outcome(enum.StrEnum):
    SENT = "sent"            # the receiver accepted it (2xx, SES/SNS message id)
    TRANSIENT = "transient"  # worth retrying later (429, 5xx, timeout, throttling)
    PERMANENT = "permanent"  # will never succeed as is (410, other 4xx, rejected address)
    UNKNOWN = "unknown"      # the send may or may not have happened (read timeout after write)


@dataclass(frozen=True)
class Message:
    """Everything a channel needs to send one delivery. Built from the re-read row, never
    from a queue message."""

    delivery_key: str          # stable across retries, DLQ and redrive; the idempotency key
    tenant: str
    kind: str
    recipient: str
    destination: str           # webhook URL, e-mail address or phone number
    payload: dict[str, Any]
    revision: str
    occurrence_at: datetime    # the instant the reminder is for (UTC)
    attempt: int               # 1-based attempt number
    # Webhook signing secrets (whsec_...), one signature each: one secret, or the current and
    # the next during a rotation's overlap; none for other channels.
    secrets: tuple[str, ...] = ()


@dataclass(frozen=True)
class SendResult:
    outcome: Outcome
    detail: str                               # one line: status code, error code, message id
    status_code: int | None = None
    retry_after: datetime | None = None       # never retry earlier than this
    provider_id: str | None = None            # SES/SNS message id, when known
    extra: dict[str, Any] = field(default_factory=dict)


class Channel(Protocol):
    name: str
    # True when the receiver deduplicates on the delivery key, so resending after a
    # send-then-crash is safe; False means such a case is parked as `unknown`.
    honours_idempotency_key: bool

    def send(self, message: Message, now: datetime) -> SendResult:
        """Send once. Never raises for a delivery problem: classify it in the result."""
        ...
