"""SMS channel through SNS ``Publish`` to a phone number (the client is injected).

SNS does not deduplicate direct SMS, so this channel does not honour the idempotency key.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING

from reminders.channels.aws_errors import (
    AWS_ERRORS,
    classify_aws_error,
    require_single_attempt,
)
from reminders.channels.base import Message, Outcome, SendResult
from reminders.errors import InvalidInput

if TYPE_CHECKING:
    from mypy_boto3_sns import SNSClient
    from mypy_boto3_sns.type_defs import MessageAttributeValueTypeDef

E164 = re.compile(r"\+[1-9][0-9]{7,14}")
SMS_TYPES = ("Transactional", "Promotional")


def sms_text(message: Message) -> str:
    text = message.payload.get("text")
    if text is not None and str(text).strip():
        return str(text)
    return f"Reminder: {message.kind}"


class SnsSmsChannel:
    """Publishes one SMS per attempt; ``sms_type`` is SNS's delivery class for the message."""

    name = "sms"
    honours_idempotency_key = False

    def __init__(self, client: SNSClient, sms_type: str = "Transactional") -> None:
        require_single_attempt(client, "SNS")
        if sms_type not in SMS_TYPES:
            raise InvalidInput(f"SMS type must be one of {', '.join(SMS_TYPES)}, got {sms_type!r}")
        self._client = client
        self.sms_type = sms_type

    def send(self, message: Message, now: datetime) -> SendResult:
        number = message.destination.strip()
        if not E164.fullmatch(number):
            return SendResult(
                Outcome.PERMANENT,
                f"not an E.164 phone number ('+' then 8-15 digits): {message.destination!r}",
            )
        attributes: dict[str, MessageAttributeValueTypeDef] = {
            "AWS.SNS.SMS.SMSType": {"DataType": "String", "StringValue": self.sms_type},
        }
        try:
            response = self._client.publish(
                PhoneNumber=number, Message=sms_text(message), MessageAttributes=attributes
            )
        except AWS_ERRORS as exc:
            return classify_aws_error(exc, "SNS")
        message_id = response.get("MessageId")
        return SendResult(
            Outcome.SENT,
            f"SNS message id {message_id}",
            status_code=response.get("ResponseMetadata", {}).get("HTTPStatusCode"),
            provider_id=message_id,
        )
