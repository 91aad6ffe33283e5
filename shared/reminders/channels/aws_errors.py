"""What a botocore failure means for a delivery: the one classification SES and SNS share.

A ``ClientError`` means AWS answered and refused, so nothing was sent; the error code decides
between transient and permanent. A connection failure before the request left is transient; a
timeout or a dropped connection after it left is ``unknown``, because SES and SNS do not
deduplicate and the message may already be on its way.

The clients must not retry on their own: SQS already retries, and a botocore retry after a read
timeout could send a second e-mail or SMS unseen. Build them with :func:`send_client_config`.
"""

from __future__ import annotations

from typing import Any

from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectionError,
    CredentialRetrievalError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
    ReadTimeoutError,
)

from reminders.channels.base import Outcome, SendResult
from reminders.errors import ConfigError

# Retrying later can succeed: throttling, quotas that reset, AWS-side failures, an account
# sending pause (lifted by AWS or the operator; failing every reminder meanwhile would lose them).
TRANSIENT_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "Throttled",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "MaxSendingRateExceeded",
        "LimitExceededException",  # SES v2: sending quota or rate reached
        "KMSThrottling",
        "KMSThrottlingException",
        "InternalError",
        "InternalErrorException",
        "InternalFailure",
        "InternalServerError",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "RequestTimeout",
        "RequestTimeoutException",
        "ExpiredToken",
        "ExpiredTokenException",
        "RequestExpired",
        "SendingPausedException",  # SES v2: account sending paused
        "AccountSendingPausedException",  # SES v1
        "ConfigurationSetSendingPausedException",
    }
)

# The provider's own rate limit: SES's maximum sending rate (v1 `Throttling` "Maximum sending
# rate exceeded.", v2 `TooManyRequestsException`), SNS's SMS throughput (`Throttled`,
# `ThrottlingException`). Such a send is retried without spending an attempt, and the channel's
# bucket slows down (pacing.py); any 429 counts too.
THROTTLE_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "Throttled",
        "TooManyRequestsException",
        "MaxSendingRateExceeded",
        "RequestLimitExceeded",
    }
)

# The deployment's setup is wrong (a sender identity not verified, the SES sandbox, a missing
# grant, a disabled key): every send fails the same way until an operator fixes it, and then
# they all can succeed. Retried within the kind's budget and counted (SendConfigErrors, by
# channel), so a day-one mistake pages someone instead of failing every message for good.
CONFIG_CODES = frozenset(
    {
        "MailFromDomainNotVerified",
        "MailFromDomainNotVerifiedException",
        "ConfigurationSetDoesNotExist",
        "AuthorizationError",
        "AccessDenied",
        "AccessDeniedException",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "InvalidSecurity",
        "KMSDisabled",
        "KMSInvalidState",
        "KMSNotFound",
        "KMSOptInRequired",
        "KMSAccessDenied",
    }
)

# The same request will keep failing until the message or the recipient changes.
PERMANENT_CODES = frozenset(
    {
        "MessageRejected",
        "AccountSuspendedException",
        "InvalidParameterValue",
        "InvalidParameter",
        "ParameterValueInvalid",
        "ValidationError",
        "ValidationException",
        "BadRequestException",
        "NotFound",
        "NotFoundException",
        "EndpointDisabled",
        "OptedOut",
        "PlatformApplicationDisabled",
    }
)

# What a channel catches around a client call; anything else is a bug and propagates.
AWS_ERRORS = (ClientError, BotoCoreError)

_DETAIL_LIMIT = 300


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _DETAIL_LIMIT else flat[: _DETAIL_LIMIT - 1] + "…"


def classify_client_error(error: ClientError, service: str) -> SendResult:
    """AWS answered with an error: nothing was sent. The code decides whether to retry."""
    info: dict[str, Any] = dict(error.response.get("Error") or {})
    metadata: dict[str, Any] = dict(error.response.get("ResponseMetadata") or {})
    code = str(info.get("Code") or "Unknown")
    text = str(info.get("Message") or "")
    raw_status = metadata.get("HTTPStatusCode")
    status = raw_status if isinstance(raw_status, int) else None
    config_error = code in CONFIG_CODES or (
        code == "MessageRejected" and "not verified" in text.lower())  # the SES sandbox
    if code in TRANSIENT_CODES or config_error:
        outcome = Outcome.TRANSIENT
    elif code in PERMANENT_CODES:
        outcome = Outcome.PERMANENT
    elif info.get("Type") == "Receiver" or status is None or status == 429 or status >= 500:
        outcome = Outcome.TRANSIENT  # AWS's fault or unclear: retrying is the safe side
    else:
        outcome = Outcome.PERMANENT  # another 4xx: the request itself is wrong
    detail = _one_line(f"{service} {code}: {text}" if text else f"{service} {code}")
    extra: dict[str, Any] = {"error_code": code}
    if code in THROTTLE_CODES or status == 429:
        extra["throttled"] = True
    if config_error:
        detail = _one_line(f"configuration error (fix the setup; retried): {detail}")
        extra["config_error"] = True
    request_id = metadata.get("RequestId")
    if request_id:
        extra["request_id"] = request_id
    return SendResult(outcome, detail, status_code=status, extra=extra)


def classify_aws_error(error: ClientError | BotoCoreError, service: str) -> SendResult:
    """Classify an error raised by a botocore client call (``service`` names it in detail)."""
    if isinstance(error, ClientError):
        return classify_client_error(error, service)
    kind = type(error).__name__
    detail = _one_line(f"{service} {kind}: {error}")
    if isinstance(error, ConnectionError):
        # EndpointConnectionError, ConnectTimeoutError, ProxyConnectionError, SSLError: the
        # connection was never established, so nothing was sent.
        outcome = Outcome.TRANSIENT
    elif isinstance(error, ReadTimeoutError | ConnectionClosedError | IncompleteReadError):
        outcome = Outcome.UNKNOWN
    elif isinstance(error, HTTPClientError):
        outcome = Outcome.UNKNOWN  # failed somewhere in the exchange; it may have been sent
    elif isinstance(error, ParamValidationError):
        outcome = Outcome.PERMANENT  # rejected before sending; the same input fails again
    elif isinstance(error, NoCredentialsError | PartialCredentialsError | CredentialRetrievalError):
        outcome = Outcome.TRANSIENT  # failed before sending
    else:
        outcome = Outcome.UNKNOWN
    return SendResult(outcome, detail, extra={"error_code": kind})


def send_client_config(connect_timeout: float = 3.0, read_timeout: float = 10.0) -> Config:
    """Client settings for a channel: bounded timeouts and exactly one attempt per send."""
    return Config(
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        retries={"total_max_attempts": 1, "mode": "standard"},
    )


def require_single_attempt(client: Any, service: str) -> None:
    """Refuse a client that would retry by itself (it could resend after a read timeout)."""
    config = getattr(getattr(client, "meta", None), "config", None)
    if not isinstance(config, Config):
        return  # a fake of the client in a test: nothing to check
    retries: dict[str, Any] = dict(getattr(config, "retries", None) or {})
    total = retries.get("total_max_attempts")
    if total is None and "max_attempts" in retries:
        total = int(retries["max_attempts"]) + 1
    if total != 1:
        raise ConfigError(
            f"the {service} client retries by itself ({retries or 'botocore default'}); build it "
            "with config=reminders.channels.aws_errors.send_client_config() so one send is one "
            "attempt"
        )
