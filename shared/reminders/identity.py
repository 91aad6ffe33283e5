"""Who ran an operator command, proven to the operations function.

A Lambda invocation does not tell the function which IAM identity invoked it (the context
carries a Cognito identity only, and ``ClientContext`` is whatever the caller wrote). So the
command line sends a proof the function can check: an STS ``GetCallerIdentity`` request
presigned with the caller's credentials, with a signed header ``x-reminders-request`` that
holds the SHA-256 of the command and its arguments. The function sends that request to STS
(the only endpoint it accepts is its own region's, ``REMINDERS_STS_ENDPOINT``) with the digest
of the command it actually received: STS answers with the signer's ARN only if the signature,
the expiry and the digest all match. A proof is good for one command for ``PROOF_SECONDS``.

The caller's own ``GetCallerIdentity`` answer travels beside it as ``claimed_arn``; it is
logged, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit
from xml.etree import ElementTree

from reminders.errors import InvalidInput

HEADER = "x-reminders-request"
PROOF_SECONDS = 60
MAX_PROOF_SECONDS = 900
STS_VERSION = "2011-06-15"
# What a presigned GetCallerIdentity carries in its query, and nothing else.
PROOF_PARAMETERS = frozenset({
    "Action", "Version", "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
    "X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Security-Token"})
MAX_PROOF_LENGTH = 8192
STS_NAMESPACE = "{https://sts.amazonaws.com/doc/2011-06-15/}"


class IdentityRefused(InvalidInput):
    """The proof of who is calling is missing, malformed or refused by STS."""


@dataclass(frozen=True)
class Caller:
    arn: str
    account: str


def request_digest(command: str, arguments: dict[str, Any]) -> str:
    """The SHA-256 of a command and its arguments, in one canonical JSON form."""
    text = json.dumps({"command": command, "args": arguments}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def presign(sts: Any, digest: str, *, seconds: int = PROOF_SECONDS) -> str:
    """A GetCallerIdentity URL signed with ``sts``'s credentials, bound to ``digest``, for
    the GET that :func:`verify` sends (SigV4 signs the method, and botocore presigns STS for
    POST unless told otherwise: STS would refuse such a proof sent as GET)."""

    def bind(request: Any, **_: Any) -> None:
        request.headers[HEADER] = digest

    sts.meta.events.register_first("before-sign.sts.GetCallerIdentity", bind)
    try:
        url: str = sts.generate_presigned_url("get_caller_identity", ExpiresIn=seconds,
                                              HttpMethod="GET")
    finally:
        sts.meta.events.unregister("before-sign.sts.GetCallerIdentity", bind)
    return url


def _error_code(exc: urllib.error.HTTPError) -> str:
    """STS's error code (``SignatureDoesNotMatch``, ``ExpiredToken``, ...), or ""."""
    try:
        root = ElementTree.fromstring(exc.read(65_536))
    except (ElementTree.ParseError, OSError):
        return ""
    code = root.findtext(f".//{STS_NAMESPACE}Code") or root.findtext(".//Code") or ""
    return code if code.isalnum() and len(code) <= 64 else ""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def check_proof(proof: str, sts_endpoint: str) -> None:
    """Refuse anything but a presigned GetCallerIdentity to ``sts_endpoint``, before a byte is
    sent: the function fetches no other URL a caller could name."""
    if len(proof) > MAX_PROOF_LENGTH:
        raise IdentityRefused("identity: the proof is too long")
    parts, trusted = urlsplit(proof), urlsplit(sts_endpoint)
    if (parts.scheme, parts.netloc) != (trusted.scheme, trusted.netloc) or \
            parts.path not in ("", "/") or parts.fragment or parts.username:
        raise IdentityRefused(f"identity: the proof is not a request to {sts_endpoint}")
    try:
        query = parse_qs(parts.query, strict_parsing=True, keep_blank_values=True)
    except ValueError:
        raise IdentityRefused("identity: the proof's query cannot be read") from None
    if set(query) - PROOF_PARAMETERS or any(len(v) != 1 for v in query.values()):
        raise IdentityRefused("identity: the proof carries parameters a GetCallerIdentity "
                              "request does not")
    one = {name: values[0] for name, values in query.items()}
    if one.get("Action") != "GetCallerIdentity" or one.get("Version") != STS_VERSION:
        raise IdentityRefused("identity: the proof is not a GetCallerIdentity request")
    if HEADER not in one.get("X-Amz-SignedHeaders", "").split(";"):
        raise IdentityRefused(f"identity: the proof does not sign {HEADER}")
    expires = one.get("X-Amz-Expires", "")
    if not expires.isdigit() or not 1 <= int(expires) <= MAX_PROOF_SECONDS:
        raise IdentityRefused(f"identity: the proof must expire within {MAX_PROOF_SECONDS} s")


def verify(proof: str, digest: str, *, sts_endpoint: str, timeout: float = 5.0) -> Caller:
    """Ask STS who signed ``proof`` for the command whose digest is ``digest``."""
    check_proof(proof, sts_endpoint)
    opener = urllib.request.build_opener(_NoRedirects)
    request = urllib.request.Request(proof, headers={HEADER: digest}, method="GET")
    try:
        with opener.open(request, timeout=timeout) as response:
            body = response.read(65_536)
    except urllib.error.HTTPError as exc:
        code = _error_code(exc)
        raise IdentityRefused(
            f"identity: STS refused the proof (HTTP {exc.code}{' ' + code if code else ''}): "
            "it expired, was altered, or was signed for another command") from None
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError:
        raise IdentityRefused("identity: STS's answer cannot be read") from None
    arn = root.findtext(f".//{STS_NAMESPACE}Arn") or root.findtext(".//Arn")
    account = root.findtext(f".//{STS_NAMESPACE}Account") or root.findtext(".//Account")
    if not arn or not account:
        raise IdentityRefused("identity: STS's answer names no caller")
    return Caller(arn=arn, account=account)
