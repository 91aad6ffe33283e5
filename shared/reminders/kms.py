"""KMS: the two calls envelope encryption makes (GenerateDataKey, Decrypt), and nothing else.

Every call names the encryption context ``{"purpose": PURPOSE}``: a data key made for webhook
secrets opens only with that context, and the key policy can require it. The client's errors
(botocore's, or ``aws_http``'s in the functions) are translated here into
:class:`KeyUnavailable`; nothing above sees their types. The plaintext data keys returned are
never logged, nor put in an error message.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

from reminders.aws_http import Limits
from reminders.errors import RemindersError

PURPOSE = "reminders-endpoint-secret"
CONTEXT = {"purpose": PURPOSE}
DATA_KEY_SPEC = "AES_256"


class KeyUnavailable(RemindersError):
    """KMS refused or could not be reached; the message says which call and the error code.
    Nothing was encrypted or decrypted; trying again later can succeed."""


@dataclass(frozen=True)
class DataKey:
    plaintext: bytes  # never logged
    wrapped: bytes    # the CiphertextBlob, stored beside what the key sealed
    key_id: str       # the KMS key's ARN


def client_config() -> Limits:
    """Short waits and one retry (about 6 s at worst): a send waits for KMS before its own
    deadline starts, inside the margin the consumer keeps; a KMS outage costs a batch seconds,
    not its whole invocation."""
    return Limits(attempts=2, connect_timeout=1, read_timeout=2, pool=10)


class Kms:
    """The KMS port: a boto3 client's two calls, counted (the tests read ``calls``)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()

    def _count(self, name: str) -> None:
        with self._lock:
            self.calls[name] += 1

    def generate_data_key(self, key_id: str) -> DataKey:
        self._count("GenerateDataKey")
        try:
            answer = self._client.generate_data_key(
                KeyId=key_id, KeySpec=DATA_KEY_SPEC, EncryptionContext=CONTEXT)
        except Exception as exc:  # noqa: BLE001 (botocore's errors become one domain error)
            raise KeyUnavailable(f"KMS GenerateDataKey with key {key_id}: "
                                 f"{_describe(exc)}") from None
        return DataKey(bytes(answer["Plaintext"]), bytes(answer["CiphertextBlob"]),
                       str(answer["KeyId"]))

    def decrypt(self, wrapped: bytes, key_id: str) -> bytes:
        self._count("Decrypt")
        try:
            answer = self._client.decrypt(CiphertextBlob=wrapped, KeyId=key_id,
                                          EncryptionContext=CONTEXT)
        except Exception as exc:  # noqa: BLE001
            raise KeyUnavailable(f"KMS Decrypt with key {key_id}: {_describe(exc)}") from None
        return bytes(answer["Plaintext"])


def _describe(exc: Exception) -> str:
    """The error code and message of a botocore ClientError, else the exception's type and
    text (a connection or timeout error)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        error = response.get("Error") or {}
        code, message = error.get("Code", "?"), error.get("Message", "")
        return f"{code}: {message}".strip().rstrip(":")
    return f"{type(exc).__name__}: {exc}"
