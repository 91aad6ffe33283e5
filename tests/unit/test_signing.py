"""Standard Webhooks signing and verification, on fixed instants."""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from reminders.channels.signing import (
    InvalidSignature,
    new_secret,
    sign,
    validate_secret,
    verify,
)
from reminders.errors import InvalidInput

# The published Standard Webhooks example (standardwebhooks.com reference libraries).
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SPEC_TIMESTAMP = 1614265330
SPEC_BODY = b'{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

NOW = datetime(2025, 3, 30, 1, 30, tzinfo=UTC)
SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()


def headers_for(body: bytes, msg_id: str = "key-1", at: datetime = NOW) -> dict[str, str]:
    timestamp = int(at.timestamp())
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(SECRET, msg_id, timestamp, body),
    }


def test_sign_matches_the_published_example() -> None:
    assert sign(SPEC_SECRET, SPEC_ID, SPEC_TIMESTAMP, SPEC_BODY) == SPEC_SIGNATURE


def test_verify_accepts_the_published_example() -> None:
    headers = {
        "webhook-id": SPEC_ID,
        "webhook-timestamp": str(SPEC_TIMESTAMP),
        "webhook-signature": SPEC_SIGNATURE,
    }
    verify(SPEC_SECRET, headers, SPEC_BODY)


def test_verify_looks_headers_up_case_insensitively() -> None:
    body = b'{"a":1}'
    headers = {name.title(): value for name, value in headers_for(body).items()}
    verify(SECRET, headers, body)


def test_verify_accepts_any_matching_signature_among_several() -> None:
    body = b"{}"
    headers = headers_for(body)
    headers["webhook-signature"] = f"v1,bm90LWl0 v2,whatever {headers['webhook-signature']}"
    verify(SECRET, headers, body)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda h: h.pop("webhook-id"), "missing webhook-id header"),
        (lambda h: h.pop("webhook-timestamp"), "missing webhook-timestamp header"),
        (lambda h: h.pop("webhook-signature"), "missing webhook-signature header"),
        (lambda h: h.update({"webhook-timestamp": "soon"}), "not an integer"),
        (lambda h: h.update({"webhook-signature": "v2,abc"}), "carries no v1 signature"),
        (lambda h: h.update({"webhook-id": "another-key"}), "no v1 signature matches"),
    ],
)
def test_verify_names_what_is_wrong(
    change: Callable[[dict[str, str]], object], message: str
) -> None:
    body = b'{"a":1}'
    headers = headers_for(body)
    change(headers)
    with pytest.raises(InvalidSignature, match=message):
        verify(SECRET, headers, body)


def test_verify_rejects_a_changed_body() -> None:
    headers = headers_for(b'{"amount":10}')
    with pytest.raises(InvalidSignature, match="no v1 signature matches the body"):
        verify(SECRET, headers, b'{"amount":1000}')


def test_verify_rejects_another_secret() -> None:
    body = b"{}"
    with pytest.raises(InvalidSignature):
        verify(new_secret(), headers_for(body), body)


def test_tolerance_is_off_unless_asked() -> None:
    body = b"{}"
    verify(SECRET, headers_for(body, at=NOW - timedelta(days=30)), body)


def test_tolerance_checks_both_directions_against_the_injected_now() -> None:
    body = b"{}"
    verify(SECRET, headers_for(body, at=NOW - timedelta(seconds=300)), body, 300, NOW)
    with pytest.raises(InvalidSignature, match="too old: 301s off"):
        verify(SECRET, headers_for(body, at=NOW - timedelta(seconds=301)), body, 300, NOW)
    with pytest.raises(InvalidSignature, match="far in the future"):
        verify(SECRET, headers_for(body, at=NOW + timedelta(seconds=301)), body, 300, NOW)


def test_tolerance_without_now_is_refused() -> None:
    body = b"{}"
    with pytest.raises(InvalidInput, match="needs the current instant"):
        verify(SECRET, headers_for(body), body, 300, None)


@pytest.mark.parametrize(
    ("secret", "message"),
    [
        ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "must start with 'whsec_'"),
        ("whsec_not base64!", "not valid base64"),
        ("whsec_" + base64.b64encode(b"short").decode(), "key is 5 bytes, needs at least 16"),
        ("whsec_", "key is 0 bytes"),
    ],
)
def test_validate_secret_names_the_problem(secret: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        validate_secret(secret)
    with pytest.raises(InvalidInput, match=message):
        sign(secret, "id", 0, b"")


def test_new_secret_is_valid_and_random() -> None:
    first, second = new_secret(), new_secret()
    assert first != second
    assert len(validate_secret(first)) == 32


def test_a_key_an_http_header_cannot_carry_is_sent_percent_encoded() -> None:
    from reminders.channels.signing import message_id

    plain = "schedule:1/g1:2027-03-01T09:00:00Z:alice:webhook"
    assert message_id(plain) == plain
    assert message_id("schedule:1/g1:t:Łukasz:webhook") == "schedule:1/g1:t:%C5%81ukasz:webhook"
    assert message_id("k:用户:a b:50%") == "k:%E7%94%A8%E6%88%B7:a%20b:50%25"
    assert message_id("k:%C5%81") != message_id("k:Ł")  # the encoding is one-to-one
