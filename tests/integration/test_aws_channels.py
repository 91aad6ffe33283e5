"""SES e-mail and SNS SMS channels through moto's server over HTTP, and the shared botocore
error classification checked on constructed errors."""

from __future__ import annotations

import dataclasses
import itertools
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, Literal

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    ReadTimeoutError,
)
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.ses.models import ses_backends
from moto.sns.models import sns_backends

from reminders.channels.aws_errors import (
    classify_aws_error,
    require_single_attempt,
    send_client_config,
)
from reminders.channels.base import Message, Outcome
from reminders.channels.email import DELIVERY_KEY_HEADER, SesEmailChannel, email_content
from reminders.channels.sms import SnsSmsChannel
from reminders.errors import ConfigError

REGION = "us-east-1"
NOW = datetime(2025, 10, 26, 0, 30, tzinfo=UTC)
_unique = itertools.count()


def aws(service: Literal["sesv2", "sns"], endpoint: str, config: Config | None = None) -> Any:
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=config or send_client_config(),
    )


def message(destination: str, payload: dict[str, Any] | None = None) -> Message:
    return Message(
        delivery_key=f"schedule:{next(_unique)}:2025-10-26T00:30:00Z:r1:x",
        tenant="acme",
        kind="trip_tomorrow",
        recipient="r1",
        destination=destination,
        payload=payload if payload is not None else {},
        revision="1",
        occurrence_at=NOW,
        attempt=1,
    )


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    """moto in server mode on a thread of this process, so the tests can read what it got
    (its SES and SNS backends) after sending over HTTP."""
    from moto.server import ThreadedMotoServer

    from reminders.local import stack

    port = stack.free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def verified_sender(moto_endpoint: str) -> str:
    sender = f"reminders-{next(_unique)}@verified.example"
    aws("sesv2", moto_endpoint).create_email_identity(EmailIdentity=sender)
    return sender


# --- SES ------------------------------------------------------------------------------------


def test_email_is_sent_with_subject_and_text(moto_endpoint: str, verified_sender: str) -> None:
    channel = SesEmailChannel(aws("sesv2", moto_endpoint), f"Reminders <{verified_sender}>")
    msg = message("traveller@example.com", {"subject": "Your trip is tomorrow", "text": "Gate 4"})
    result = channel.send(msg, NOW)
    assert result.outcome is Outcome.SENT
    assert result.provider_id
    assert result.detail == f"SES message id {result.provider_id}"
    [sent] = [
        m for m in ses_backends[DEFAULT_ACCOUNT_ID][REGION].sent_messages
        if m.id == result.provider_id
    ]
    assert sent.subject == "Your trip is tomorrow"
    assert sent.body == "Gate 4"
    assert sent.destinations == {"ToAddresses": ["traveller@example.com"]}
    assert not channel.honours_idempotency_key


def test_email_from_an_unverified_sender_is_a_configuration_error_retried(
        moto_endpoint: str) -> None:
    """A day-one SES mistake (the sender not verified, the sandbox) fails every e-mail the same
    way until an operator fixes it: retried and counted, never settled as failed for good."""
    channel = SesEmailChannel(aws("sesv2", moto_endpoint), "nobody@unverified.example")
    result = channel.send(message("traveller@example.com"), NOW)
    assert result.outcome is Outcome.TRANSIENT
    assert result.detail == (
        "configuration error (fix the setup; retried): SES MessageRejected: Email address not "
        "verified nobody@unverified.example"
    )
    assert result.status_code == 400
    assert result.extra["error_code"] == "MessageRejected"
    assert result.extra["config_error"] is True


def test_email_to_a_non_address_is_permanent_without_a_call() -> None:
    class NoCalls:
        def send_email(self, **kwargs: Any) -> Any:
            raise AssertionError("SES must not be called")

    channel = SesEmailChannel(NoCalls(), "a@verified.example")  # type: ignore[arg-type]
    result = channel.send(message("not-an-address"), NOW)
    assert (result.outcome, result.detail) == (
        Outcome.PERMANENT,
        "not an e-mail address: 'not-an-address'",
    )


def test_email_content_defaults_and_the_delivery_key_header() -> None:
    msg = message("a@example.com", {"subject": "Line one\nline two"})
    content = email_content(msg)
    assert content["Subject"]["Data"] == "Line one line two"
    assert content["Body"]["Text"]["Data"] == (
        "This is your trip_tomorrow reminder for 2025-10-26T00:30:00Z."
    )
    assert content["Headers"] == [{"Name": DELIVERY_KEY_HEADER, "Value": msg.delivery_key}]
    assert email_content(message("a@example.com"))["Subject"]["Data"] == "Reminder: trip_tomorrow"
    unicode_key = dataclasses.replace(msg, delivery_key="schedule:1:é")
    assert email_content(unicode_key)["Headers"] == [
        {"Name": DELIVERY_KEY_HEADER, "Value": "schedule:1:%C3%A9"}
    ]


# --- SNS ------------------------------------------------------------------------------------


def test_sms_is_published(moto_endpoint: str) -> None:
    channel = SnsSmsChannel(aws("sns", moto_endpoint))
    result = channel.send(message("+4915112345678", {"text": "Your trip is tomorrow"}), NOW)
    assert result.outcome is Outcome.SENT
    assert result.provider_id
    assert sns_backends[DEFAULT_ACCOUNT_ID][REGION].sms_messages[result.provider_id] == (
        "+4915112345678",
        "Your trip is tomorrow",
    )
    assert not channel.honours_idempotency_key


def test_sms_rejected_by_sns_is_permanent(moto_endpoint: str) -> None:
    channel = SnsSmsChannel(aws("sns", moto_endpoint))
    result = channel.send(message("+4915112345678", {"text": "x" * 1700}), NOW)
    assert result.outcome is Outcome.PERMANENT
    assert result.detail.startswith("SNS InvalidParameter:")
    assert result.extra["error_code"] == "InvalidParameter"


@pytest.mark.parametrize("number", ["015112345678", "+49 151 1234", "+0123456789", "+1234567",
                                    "+1234567890123456", "tel:+4915112345678", ""])
def test_sms_to_a_non_e164_number_is_permanent(moto_endpoint: str, number: str) -> None:
    result = SnsSmsChannel(aws("sns", moto_endpoint)).send(message(number), NOW)
    assert result.outcome is Outcome.PERMANENT
    assert result.detail.startswith("not an E.164 phone number ('+' then 8-15 digits)")


# --- transport failures through real botocore -------------------------------------------------


@pytest.fixture
def silent_server() -> Iterator[tuple[str, list[int]]]:
    """Accepts connections and never answers: every request ends in a read timeout."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[int] = []
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            accepted.append(1)
            held.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


def test_read_timeout_is_unknown_and_sent_exactly_once(
    silent_server: tuple[str, list[int]],
) -> None:
    endpoint, accepted = silent_server
    client = aws("sesv2", endpoint, send_client_config(connect_timeout=1, read_timeout=0.3))
    result = SesEmailChannel(client, "a@verified.example").send(message("b@example.com"), NOW)
    assert result.outcome is Outcome.UNKNOWN
    assert result.detail.startswith("SES ReadTimeoutError:")
    assert len(accepted) == 1  # one attempt: botocore did not resend on its own


def test_nothing_listening_is_transient() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = aws("sns", f"http://127.0.0.1:{port}")
    result = SnsSmsChannel(client).send(message("+4915112345678"), NOW)
    assert result.outcome is Outcome.TRANSIENT
    assert result.detail.startswith("SNS EndpointConnectionError:")


def test_a_client_that_retries_by_itself_is_refused(moto_endpoint: str) -> None:
    with pytest.raises(ConfigError, match="the SES client retries by itself"):
        SesEmailChannel(aws("sesv2", moto_endpoint, Config()), "a@verified.example")
    with pytest.raises(ConfigError, match="the SNS client retries by itself"):
        SnsSmsChannel(aws("sns", moto_endpoint, Config(retries={"max_attempts": 3})))
    require_single_attempt(aws("sns", moto_endpoint, Config(retries={"max_attempts": 0})), "SNS")


# --- the classification, on constructed errors ---------------------------------------------


def client_error(code: str, status: int = 400, kind: str | None = None) -> ClientError:
    error: dict[str, str] = {"Code": code, "Message": f"{code} happened"}
    if kind is not None:
        error["Type"] = kind
    metadata = {"HTTPStatusCode": status, "RequestId": "r-1"}
    response: Any = {"Error": error, "ResponseMetadata": metadata}
    return ClientError(response, "SendEmail")


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("Throttling", 400),
        ("ThrottlingException", 400),
        ("Throttled", 400),
        ("TooManyRequestsException", 429),
        ("LimitExceededException", 400),
        ("ServiceUnavailable", 503),
        ("InternalFailure", 500),
        ("InternalError", 500),
        ("SendingPausedException", 400),
        ("AccountSendingPausedException", 400),
        ("KMSThrottling", 400),
        ("SomethingNew", 503),
        ("SomethingNew", 429),
        ("MaxSendingRateExceeded", 400),
    ],
)
def test_transient_codes(code: str, status: int) -> None:
    result = classify_aws_error(client_error(code, status), "SES")
    assert result.outcome is Outcome.TRANSIENT
    assert result.detail == f"SES {code}: {code} happened"
    assert result.status_code == status
    # The provider's own rate limit: retried without spending an attempt (pacing).
    throttle = status == 429 or code in {"Throttling", "ThrottlingException", "Throttled",
                                         "MaxSendingRateExceeded"}
    assert result.extra == {"error_code": code, "request_id": "r-1",
                            **({"throttled": True} if throttle else {})}


@pytest.mark.parametrize(
    "code",
    [
        "MessageRejected",
        "AccountSuspendedException",
        "InvalidParameterValue",
        "InvalidParameter",
        "BadRequestException",
        "NotFoundException",
        "EndpointDisabled",
        "OptedOut",
        "SomethingNew",
    ],
)
def test_permanent_codes(code: str) -> None:
    assert classify_aws_error(client_error(code), "SNS").outcome is Outcome.PERMANENT


@pytest.mark.parametrize("code", ["AuthorizationError", "AccessDeniedException",
                                  "MailFromDomainNotVerifiedException", "KMSAccessDenied",
                                  "InvalidClientTokenId"])
def test_configuration_errors_are_retried_and_marked(code: str) -> None:
    result = classify_aws_error(client_error(code), "SNS")
    assert result.outcome is Outcome.TRANSIENT and result.extra["config_error"] is True


def test_unknown_code_blamed_on_the_receiver_is_transient() -> None:
    result = classify_aws_error(client_error("Odd", 400, "Receiver"), "SNS")
    assert result.outcome is Outcome.TRANSIENT


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (EndpointConnectionError(endpoint_url="https://email.us-east-1.amazonaws.com"),
         Outcome.TRANSIENT),
        (ConnectTimeoutError(endpoint_url="https://email.us-east-1.amazonaws.com"),
         Outcome.TRANSIENT),
        (NoCredentialsError(), Outcome.TRANSIENT),
        (ReadTimeoutError(endpoint_url="https://sns.us-east-1.amazonaws.com"), Outcome.UNKNOWN),
        (ConnectionClosedError(endpoint_url="https://sns.us-east-1.amazonaws.com"),
         Outcome.UNKNOWN),
        (ParamValidationError(report="Invalid type for parameter Message"), Outcome.PERMANENT),
    ],
)
def test_transport_errors(error: BotoCoreError, outcome: Outcome) -> None:
    result = classify_aws_error(error, "SES")
    assert result.outcome is outcome
    assert result.detail.startswith(f"SES {type(error).__name__}:")
    assert "\n" not in result.detail


def test_a_bug_in_the_client_is_not_dressed_up_as_a_delivery_outcome() -> None:
    class Broken:
        def publish(self, **kwargs: Any) -> Any:
            raise KeyError("MessageId")

    with pytest.raises(KeyError):
        SnsSmsChannel(Broken()).send(message("+4915112345678"), NOW)  # type: ignore[arg-type]


def test_an_older_botocore_without_custom_headers_still_sends() -> None:
    calls: list[dict[str, Any]] = []

    class OldModel:
        def shape_for(self, name: str) -> Any:
            return SimpleNamespace(members={"Subject": None, "Body": None})

    class OldClient:
        meta = SimpleNamespace(service_model=OldModel())

        def send_email(self, **kwargs: Any) -> Any:
            calls.append(kwargs)
            return {"MessageId": "m-1"}

    channel = SesEmailChannel(OldClient(), "a@verified.example")  # type: ignore[arg-type]
    assert channel.send(message("b@example.com"), NOW).provider_id == "m-1"
    assert "Headers" not in calls[0]["Content"]["Simple"]
