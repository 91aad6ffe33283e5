"""Envelope encryption of webhook secrets against a fake of the KMS port (a port we own); the
real KMS (moto over HTTP) is in tests/integration/test_endpoint_secrets.py."""

from __future__ import annotations

import os
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from reminders.channels.signing import new_secret
from reminders.endpoints import signing_secrets
from reminders.errors import ConfigError
from reminders.kms import DataKey, KeyUnavailable
from reminders.secret_box import (
    CACHE_SIZE,
    FAILURE_HOLD_SECONDS,
    Sealed,
    SecretBox,
    SecretUnavailable,
)

KEY = "arn:aws:kms:us-east-1:123456789012:key/test"
URL = "https://hooks.example.com/r"
T0 = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)


class FakeKms:
    """Wraps a data key by XOR with a fixed pad; ``down`` makes every call fail."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.down = False
        self._pad = os.urandom(32)

    def generate_data_key(self, key_id: str) -> DataKey:
        self.calls["GenerateDataKey"] += 1
        if self.down:
            raise KeyUnavailable("KMS GenerateDataKey: down")
        plain = os.urandom(32)
        return DataKey(plain, self._wrap(plain) + os.urandom(4), key_id)

    def decrypt(self, wrapped: bytes, key_id: str) -> bytes:
        self.calls["Decrypt"] += 1
        if self.down:
            raise KeyUnavailable(f"KMS Decrypt with key {key_id}: DisabledException")
        return self._wrap(wrapped[:32])

    def _wrap(self, data: bytes) -> bytes:
        return bytes(a ^ b for a, b in zip(data, self._pad, strict=True))


class Ticker:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def boxes(kms: FakeKms, ticker: Ticker | None = None) -> tuple[SecretBox, SecretBox]:
    """A writer and a reader in different processes (no shared cache)."""
    writer = SecretBox(lambda: kms, KEY)  # type: ignore[arg-type, return-value]
    reader = SecretBox(lambda: kms, None,  # type: ignore[arg-type, return-value]
                       monotonic=ticker or Ticker())
    return writer, reader


def test_sealed_secret_holds_no_plaintext_and_opens_for_its_endpoint_only() -> None:
    kms = FakeKms()
    writer, reader = boxes(kms)
    secret = new_secret()
    sealed = writer.seal(secret, "acme", URL)
    assert secret.encode() not in sealed.ciphertext + sealed.data_key
    assert secret.removeprefix("whsec_").encode() not in sealed.ciphertext
    assert reader.open(sealed, "acme", URL) == secret
    for tenant, url in ((None, URL), ("acme", URL + "x"), ("other", URL)):
        with pytest.raises(SecretUnavailable, match=r"does not open .* for this endpoint"):
            reader.open(sealed, tenant, url)
    flipped = bytearray(sealed.ciphertext)
    flipped[-1] ^= 1
    with pytest.raises(SecretUnavailable):
        reader.open(Sealed(bytes(flipped), sealed.data_key, KEY), "acme", URL)


def test_a_writer_seals_with_one_data_key_and_a_reader_unwraps_it_once() -> None:
    kms = FakeKms()
    writer, reader = boxes(kms)
    sealed = [writer.seal(new_secret(), None, f"{URL}/{i}") for i in range(20)]
    assert kms.calls == {"GenerateDataKey": 1}
    assert len({s.data_key for s in sealed}) == 1
    assert len({s.ciphertext[:12] for s in sealed}) == 20  # a fresh nonce each
    for _ in range(3):
        for i, one in enumerate(sealed):
            reader.open(one, None, f"{URL}/{i}")
    assert kms.calls == {"GenerateDataKey": 1, "Decrypt": 1}
    # Another writer process: another data key, one more Decrypt for it.
    other, _ = boxes(kms)
    reader.open(other.seal(new_secret(), None, URL), None, URL)
    assert kms.calls == {"GenerateDataKey": 2, "Decrypt": 2}


def test_the_reader_cache_is_bounded() -> None:
    kms = FakeKms()
    _, reader = boxes(kms)
    writers = [boxes(kms)[0] for _ in range(CACHE_SIZE + 1)]
    sealed = [w.seal(new_secret(), None, URL) for w in writers]
    for one in sealed:
        reader.open(one, None, URL)
    reader.open(sealed[-1], None, URL)
    assert kms.calls["Decrypt"] == CACHE_SIZE + 1
    reader.open(sealed[0], None, URL)  # the least recently used was dropped
    assert kms.calls["Decrypt"] == CACHE_SIZE + 2


def test_a_kms_outage_is_asked_once_per_hold_then_again() -> None:
    kms, ticker = FakeKms(), Ticker()
    writer, reader = boxes(kms, ticker)
    secret = new_secret()
    sealed = writer.seal(secret, None, URL)
    kms.down = True
    for _ in range(5):
        with pytest.raises(SecretUnavailable, match="DisabledException"):
            reader.open(sealed, None, URL)
    assert kms.calls["Decrypt"] == 1
    kms.down = False
    ticker.now += FAILURE_HOLD_SECONDS - 1
    with pytest.raises(SecretUnavailable, match="not asked again"):
        reader.open(sealed, None, URL)
    ticker.now += 1
    assert reader.open(sealed, None, URL) == secret
    assert kms.calls["Decrypt"] == 2


def test_without_a_key_nothing_is_sealed() -> None:
    kms = FakeKms()
    _, reader = boxes(kms)
    with pytest.raises(ConfigError, match="set REMINDERS_SECRETS_KEY_ID"):
        reader.seal(new_secret(), None, URL)
    assert kms.calls == {}


def _row(writer: SecretBox, current: str | None, following: str | None,
         overlap_until: datetime | None, plaintext: str | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {"endpoint_tenant": None, "destination": URL,
                           "endpoint_secret": plaintext, "overlap_until": overlap_until}
    for prefix, secret in (("", current), ("next_", following)):
        sealed = writer.seal(secret, None, URL) if secret else None
        row[f"{prefix}secret_ciphertext"] = sealed.ciphertext if sealed else None
        row[f"{prefix}secret_data_key"] = sealed.data_key if sealed else None
        row[f"{prefix}secret_key_id"] = sealed.key_id if sealed else None
    return row


def test_both_secrets_sign_during_the_overlap_and_only_the_new_one_after() -> None:
    kms = FakeKms()
    writer, reader = boxes(kms)
    old, new = new_secret(), new_secret()
    until = T0 + timedelta(hours=1)
    row = _row(writer, old, new, until)
    assert signing_secrets(row, T0, reader) == (old, new)
    assert signing_secrets(row, until - timedelta(seconds=1), reader) == (old, new)
    assert signing_secrets(row, until, reader) == (new,)
    assert signing_secrets(_row(writer, old, None, None), until, reader) == (old,)
    # A row not yet encrypted signs with its plaintext secret.
    assert signing_secrets(_row(writer, None, None, None, plaintext=old), T0, reader) == (old,)
    assert signing_secrets(_row(writer, None, new, until, plaintext=old), T0, reader) == (old,
                                                                                         new)
