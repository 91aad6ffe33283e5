"""Standard Webhooks signing: one signer for the webhook channel, one verifier for receivers.

The signed content is ``{webhook-id}.{webhook-timestamp}.{body}`` and the signature is
``v1,`` + base64(HMAC-SHA256(key, content)), where the key is the base64-decoded part of a
``whsec_...`` secret. See https://www.standardwebhooks.com/.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Mapping, Sequence
from datetime import datetime

from reminders.clock import require_aware
from reminders.errors import InvalidInput

SECRET_PREFIX = "whsec_"
MIN_KEY_BYTES = 16
SIGNATURE_VERSION = "v1"

HEADER_ID = "webhook-id"
HEADER_TIMESTAMP = "webhook-timestamp"
HEADER_SIGNATURE = "webhook-signature"


class InvalidSignature(InvalidInput):
    """A webhook request failed verification; the message says which check failed."""


def validate_secret(secret: str) -> bytes:
    """Return the HMAC key inside a ``whsec_`` secret, or raise InvalidInput naming the problem."""
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        raise InvalidInput(f"webhook secret must start with {SECRET_PREFIX!r}")
    encoded = secret[len(SECRET_PREFIX):]
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(
            f"webhook secret: the part after {SECRET_PREFIX!r} is not valid base64"
        ) from None
    if len(key) < MIN_KEY_BYTES:
        raise InvalidInput(
            f"webhook secret: key is {len(key)} bytes, needs at least {MIN_KEY_BYTES}"
        )
    return key


def new_secret(nbytes: int = 32) -> str:
    """A fresh random secret in the ``whsec_`` form."""
    if nbytes < MIN_KEY_BYTES:
        raise InvalidInput(f"a webhook secret needs at least {MIN_KEY_BYTES} bytes, got {nbytes}")
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(nbytes)).decode("ascii")


def _digest(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    content = f"{msg_id}.{timestamp}.".encode() + body
    mac = hmac.new(key, content, hashlib.sha256).digest()
    return base64.b64encode(mac).decode("ascii")


def message_id(delivery_key: str) -> str:
    """The ``webhook-id`` (and ``Idempotency-Key``) a delivery key is sent as: the key itself
    where it is printable ASCII, as most are; otherwise percent-encoded UTF-8 (and ``%`` as
    ``%25``), since an HTTP header carries no other characters. One key, one id, across every
    retry, dead-letter replay and redrive; the body's ``delivery_key`` stays the key itself."""
    if all(0x21 <= ord(ch) <= 0x7E and ch != "%" for ch in delivery_key):
        return delivery_key
    return "".join(ch if 0x21 <= ord(ch) <= 0x7E and ch != "%" else
                   "".join(f"%{b:02X}" for b in ch.encode()) for ch in delivery_key)


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header value for these exact body bytes."""
    return f"{SIGNATURE_VERSION},{_digest(validate_secret(secret), msg_id, timestamp, body)}"


def sign_all(secrets: Sequence[str], msg_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,`` signature per secret, space-separated (during a rotation: old and new)."""
    if not secrets:
        raise InvalidInput("no signing secret given")
    return " ".join(sign(secret, msg_id, timestamp, body) for secret in secrets)


def _header(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name)
    if value is None:
        for key, candidate in headers.items():
            if key.lower() == name:
                value = candidate
                break
    if value is None or not value.strip():
        raise InvalidSignature(f"missing {name} header")
    return value.strip()


def verify_each(
    secrets: Sequence[str],
    headers: Mapping[str, str],
    body: bytes,
    tolerance_seconds: int | None = None,
    now: datetime | None = None,
) -> tuple[int, ...]:
    """Which of ``secrets`` (their positions) signed the request, each by a valid ``v1``
    signature; raises InvalidSignature when none did (or a header is missing or bad)."""
    matched = []
    failure: InvalidSignature | None = None
    for index, secret in enumerate(secrets):
        try:
            verify(secret, headers, body, tolerance_seconds, now)
        except InvalidSignature as exc:
            failure = failure or exc
            continue
        matched.append(index)
    if not matched:
        raise failure or InvalidSignature("no secret to verify with")
    return tuple(matched)


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    tolerance_seconds: int | None = None,
    now: datetime | None = None,
) -> None:
    """Check a request's Standard Webhooks headers against its body; raise InvalidSignature.

    ``headers`` is looked up case-insensitively. The timestamp is checked against ``now`` only
    when ``tolerance_seconds`` is given (then ``now`` is required: time is injected).
    """
    key = validate_secret(secret)
    msg_id = _header(headers, HEADER_ID)
    raw_timestamp = _header(headers, HEADER_TIMESTAMP)
    signatures = _header(headers, HEADER_SIGNATURE)
    try:
        timestamp = int(raw_timestamp)
    except ValueError:
        raise InvalidSignature(
            f"{HEADER_TIMESTAMP} is not an integer: {raw_timestamp[:40]!r}"
        ) from None
    if tolerance_seconds is not None:
        if now is None:
            raise InvalidInput("verify: a timestamp tolerance needs the current instant (now)")
        skew = int(require_aware(now, "now").timestamp()) - timestamp
        if abs(skew) > tolerance_seconds:
            direction = "old" if skew > 0 else "far in the future"
            raise InvalidSignature(
                f"{HEADER_TIMESTAMP} {timestamp} is too {direction}: "
                f"{abs(skew)}s off, tolerance {tolerance_seconds}s"
            )
    expected = _digest(key, msg_id, timestamp, body)
    offered = 0
    for candidate in signatures.split():
        version, _, value = candidate.partition(",")
        if version != SIGNATURE_VERSION:
            continue
        offered += 1
        if hmac.compare_digest(value.encode(), expected.encode()):
            return
    if offered == 0:
        raise InvalidSignature(f"{HEADER_SIGNATURE} carries no {SIGNATURE_VERSION} signature")
    raise InvalidSignature(f"no {SIGNATURE_VERSION} signature matches the body")
