"""Envelope encryption of webhook signing secrets: AES-256-GCM under a data key that KMS wraps.

A sealed secret is three values stored on the endpoint row: the ciphertext (a random 96-bit
nonce, then AES-GCM's output), the wrapped data key, and the KMS key's ARN. The associated data
binds a ciphertext to its endpoint (tenant and URL), so a sealed secret copied onto another
endpoint's row does not open.

Per process (a Lambda cold start): a writer generates one data key and seals up to
``MAX_SEALS_PER_DATA_KEY`` secrets with it; a reader asks KMS to unwrap each wrapped data key
once and keeps the result (at most ``CACHE_SIZE`` keys). A failed unwrap is remembered for
``FAILURE_HOLD_SECONDS``, so a KMS outage costs one call per key in that time, not one per send.
Plaintext data keys and secrets are never logged, nor put in an error message.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reminders.errors import ConfigError, RemindersError
from reminders.kms import PURPOSE, KeyUnavailable

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from reminders.kms import Kms

NONCE_BYTES = 12
# Random 96-bit nonces stay far from a collision below 2**32 messages per key (NIST SP 800-38D);
# a writer takes a fresh data key long before that.
MAX_SEALS_PER_DATA_KEY = 1_000_000
CACHE_SIZE = 256
FAILURE_HOLD_SECONDS = 30.0
KEY_SETTING = "REMINDERS_SECRETS_KEY_ID"


class SecretUnavailable(RemindersError):
    """A sealed secret could not be opened (KMS refused or was unreachable, or the ciphertext
    does not belong to this endpoint). Nothing may be sent unsigned; the send is retried."""


@dataclass(frozen=True)
class Sealed:
    ciphertext: bytes  # nonce + AES-GCM ciphertext and tag
    data_key: bytes    # the data key, wrapped by KMS
    key_id: str        # the KMS key that wrapped it


def associated_data(tenant: str | None, url: str) -> bytes:
    """What a sealed secret is bound to: its endpoint."""
    return "\0".join((PURPOSE, tenant or "", url)).encode()


def _aead(key: bytes) -> AESGCM:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM(key)


class SecretBox:
    """Seals and opens webhook secrets; made once per process, used by every send."""

    def __init__(self, kms: Callable[[], Kms], key_id: str | None, *,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._make_kms = kms  # made on first use: the scanner and redrive never call KMS
        self._kms: Kms | None = None
        self.key_id = key_id or None
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._writer: tuple[AESGCM, bytes, str] | None = None
        self._writer_uses = 0
        self._readers: OrderedDict[bytes, AESGCM] = OrderedDict()
        self._failures: dict[bytes, tuple[float, str]] = {}
        self._unwrapping: dict[bytes, threading.Lock] = {}

    @property
    def kms(self) -> Kms:
        with self._lock:
            if self._kms is None:
                self._kms = self._make_kms()
            return self._kms

    # --- writing --------------------------------------------------------------------------

    def seal(self, secret: str, tenant: str | None, url: str) -> Sealed:
        """Encrypt ``secret`` for the endpoint (tenant, url). Raises ConfigError without a key
        and KeyUnavailable when KMS refuses."""
        if self.key_id is None:
            raise ConfigError(f"no KMS key to encrypt webhook secrets with: set {KEY_SETTING} "
                              "(the stack's SecretsKeyArn output; `reminders local up` sets a "
                              "local one)")
        with self._lock:
            writer = self._writer
            if writer is None or self._writer_uses >= MAX_SEALS_PER_DATA_KEY:
                writer = None
        if writer is None:
            made = self.kms.generate_data_key(self.key_id)
            writer = (_aead(made.plaintext), made.wrapped, made.key_id)
            with self._lock:
                self._writer, self._writer_uses = writer, 0
                # The writer's own key opens what it sealed without asking KMS again.
                self._remember(made.wrapped, writer[0])
        with self._lock:
            self._writer_uses += 1
        aead, wrapped, key_id = writer
        nonce = os.urandom(NONCE_BYTES)
        sealed = aead.encrypt(nonce, secret.encode(), associated_data(tenant, url))
        return Sealed(nonce + sealed, wrapped, key_id)

    # --- reading --------------------------------------------------------------------------

    def open(self, sealed: Sealed, tenant: str | None, url: str) -> str:
        """The plaintext secret, or SecretUnavailable saying why (never what)."""
        from cryptography.exceptions import InvalidTag

        aead = self._reader(sealed)
        nonce, body = sealed.ciphertext[:NONCE_BYTES], sealed.ciphertext[NONCE_BYTES:]
        try:
            return aead.decrypt(nonce, body, associated_data(tenant, url)).decode()
        except (InvalidTag, ValueError, UnicodeDecodeError):
            raise SecretUnavailable(
                "the stored webhook secret does not open with its data key for this endpoint "
                "(altered, or copied from another endpoint); rotate the endpoint's secret"
            ) from None

    def _reader(self, sealed: Sealed) -> AESGCM:
        wrapped = sealed.data_key
        with self._lock:
            found = self._readers.get(wrapped)
            if found is not None:
                self._readers.move_to_end(wrapped)
                return found
            gate = self._unwrapping.setdefault(wrapped, threading.Lock())
        with gate:  # concurrent sends of one batch share one Decrypt
            with self._lock:
                found = self._readers.get(wrapped)
                if found is not None:
                    return found
                failed = self._failures.get(wrapped)
            if failed is not None and self._monotonic() < failed[0]:
                raise SecretUnavailable(f"{failed[1]} (not asked again for "
                                        f"{FAILURE_HOLD_SECONDS:g} s)")
            try:
                key = self.kms.decrypt(wrapped, sealed.key_id)
            except KeyUnavailable as exc:
                now = self._monotonic()
                with self._lock:
                    for old in [w for w, (until, _) in self._failures.items() if until <= now]:
                        del self._failures[old]
                    if len(self._failures) < CACHE_SIZE:
                        self._failures[wrapped] = (now + FAILURE_HOLD_SECONDS, str(exc))
                    self._unwrapping.pop(wrapped, None)
                raise SecretUnavailable(str(exc)) from None
            try:
                aead = _aead(key)
            except ValueError:
                raise SecretUnavailable("KMS returned a data key of the wrong length") from None
            with self._lock:
                self._failures.pop(wrapped, None)
                self._remember(wrapped, aead)
                self._unwrapping.pop(wrapped, None)
            return aead

    def _remember(self, wrapped: bytes, aead: AESGCM) -> None:
        """Under ``_lock``: keep an unwrapped key, dropping the least recently used."""
        self._readers[wrapped] = aead
        self._readers.move_to_end(wrapped)
        while len(self._readers) > CACHE_SIZE:
            self._readers.popitem(last=False)
