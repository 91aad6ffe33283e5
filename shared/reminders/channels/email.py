"""E-mail channel through the SES v2 ``SendEmail`` API (the client is injected).

SES does not deduplicate, so this channel does not honour the idempotency key: a send whose
outcome was lost is reported as ``unknown`` and parked, never resent blindly. The delivery key
travels in an ``X-Reminders-Delivery-Key`` header so a received mail can be traced back.
"""

from __future__ import annotations

import string
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from reminders.channels.aws_errors import (
    AWS_ERRORS,
    classify_aws_error,
    require_single_attempt,
)
from reminders.channels.base import Message, Outcome, SendResult
from reminders.errors import InvalidInput

if TYPE_CHECKING:
    from mypy_boto3_sesv2 import SESV2Client
    from mypy_boto3_sesv2.type_defs import BodyTypeDef, MessageTypeDef

DELIVERY_KEY_HEADER = "X-Reminders-Delivery-Key"
_HEADER_SAFE = "".join(c for c in string.printable if c not in "%\t\n\r\x0b\x0c")
_HEADER_VALUE_LIMIT = 995
_SUBJECT_LIMIT = 200


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    return text if text.strip() else None


def _check_address(address: str) -> str:
    local, at, domain = address.strip().rpartition("@")
    if not at or not local or "." not in domain or any(c.isspace() for c in address.strip()):
        raise InvalidInput(f"not an e-mail address: {address!r}")
    return address.strip()


def email_content(message: Message) -> MessageTypeDef:
    """The SES v2 ``Content.Simple`` block for a delivery (subject and text from the payload)."""
    payload = message.payload
    occurrence = message.occurrence_at.astimezone(UTC).isoformat().replace("+00:00", "Z")
    subject = _text(payload.get("subject")) or f"Reminder: {message.kind}"
    subject = " ".join(subject.split())[:_SUBJECT_LIMIT]
    text = _text(payload.get("text")) or f"This is your {message.kind} reminder for {occurrence}."
    body: BodyTypeDef = {"Text": {"Data": text, "Charset": "UTF-8"}}
    html = _text(payload.get("html"))
    if html is not None:
        body["Html"] = {"Data": html, "Charset": "UTF-8"}
    key_header = quote(message.delivery_key, safe=_HEADER_SAFE)[:_HEADER_VALUE_LIMIT]
    return {
        "Subject": {"Data": subject, "Charset": "UTF-8"},
        "Body": body,
        "Headers": [{"Name": DELIVERY_KEY_HEADER, "Value": key_header}],
    }


def _custom_headers_supported(client: Any) -> bool:
    """Whether this botocore knows SES v2 ``Message.Headers`` (an older one refuses the call)."""
    model = getattr(getattr(client, "meta", None), "service_model", None)
    if model is None:
        return True  # a fake of the client in a test
    try:
        return "Headers" in model.shape_for("Message").members
    except Exception:  # noqa: BLE001 (an unexpected model shape only costs the trace header)
        return False


class SesEmailChannel:
    """Sends one e-mail per attempt with ``sesv2.send_email`` from a verified sender."""

    name = "email"
    honours_idempotency_key = False

    def __init__(self, client: SESV2Client, sender: str, quota_client: Any = None) -> None:
        require_single_attempt(client, "SES")
        self._quota_client = quota_client  # SES v1, for the account's sending quota
        if not sender.strip():
            raise InvalidInput("SES sender address is empty")
        self._client = client
        self.sender = sender
        self._with_key_header = _custom_headers_supported(client)

    def max_send_rate(self) -> float | None:
        """The account's maximum sending rate (SES ``GetSendQuota``), None if it cannot be
        read (the channel then stays as it is paced, or unpaced)."""
        if self._quota_client is None:
            return None
        try:
            rate = float(self._quota_client.get_send_quota()["MaxSendRate"])
        except AWS_ERRORS:
            return None
        return rate if rate > 0 else None

    def send(self, message: Message, now: datetime) -> SendResult:
        try:
            destination = _check_address(message.destination)
        except InvalidInput as exc:
            return SendResult(Outcome.PERMANENT, str(exc))
        content = email_content(message)
        if not self._with_key_header:
            del content["Headers"]
        try:
            response = self._client.send_email(
                FromEmailAddress=self.sender,
                Destination={"ToAddresses": [destination]},
                Content={"Simple": content},
            )
        except AWS_ERRORS as exc:
            return classify_aws_error(exc, "SES")
        message_id = response.get("MessageId")
        return SendResult(
            Outcome.SENT,
            f"SES message id {message_id}",
            status_code=response.get("ResponseMetadata", {}).get("HTTPStatusCode"),
            provider_id=message_id,
        )
