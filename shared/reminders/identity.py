"""Who ran an operator command, proven to the operations function.

A Lambda invocation does not tell the function which IAM identity invoked it (the context
carries a Cognito identity only, and ``ClientContext`` is whatever the caller wrote). So the
command line sends a proof the function can check: an STS ``GetCallerIdentity`` request
presigned with the caller's credentials, with a signed header ``x-reminders-request`` that
holds the SHA-256 of one document: the command, its arguments, the audience (the ARN of the
function it is for: :func:`function_arn`) and a fresh random nonce. The function sends that
request to STS (only its own region's, ``REMINDERS_STS_ENDPOINT``, or that region's FIPS or
dual-stack host: :func:`accepted_origins`) with the digest of the command it actually
received, its own ARN as the audience and the nonce the request carries: STS answers with the
signer's ARN only if the signature, the expiry and the digest all match.

A proof is not a bearer token. It is good for one function (the audience: not another
stack's, nor the other operations function of the same stack), for at most
``MAX_PROOF_SECONDS`` (its ``X-Amz-Expires``, and its ``X-Amz-Date`` within that of the
function's clock), and once: the function remembers each accepted proof's digest in Postgres
until it expires (``identity_proofs``) and refuses a second use.

The caller's own ``GetCallerIdentity`` answer travels beside it as ``claimed_arn``; it is
logged, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit
from xml.etree import ElementTree

from reminders.errors import CommandFailed, InvalidInput
from reminders.outcome import EXIT_UNAVAILABLE

HEADER = "x-reminders-request"
PROOF_SECONDS = 60
# The longest a proof is good for: its X-Amz-Expires at most, and its X-Amz-Date at most this
# far from the function's clock (either way: a clock ahead of the function's is no longer
# good). The function remembers an accepted proof this long after its X-Amz-Date.
MAX_PROOF_SECONDS = 120
# A nonce: 128 bits or more, as hex.
_NONCE = re.compile(r"[0-9a-f]{32,64}")
_AMZ_DATE = re.compile(r"\d{8}T\d{6}Z")
# An operations function's ARN, unqualified or with a version or alias.
_FUNCTION_ARN = re.compile(
    r"arn:(aws[a-z-]*):lambda:([a-z]{2}(?:-[a-z]+)+-[0-9]{1,2}):([0-9]{12}):function:"
    r"([A-Za-z0-9_-]{1,64})(?::[A-Za-z0-9_$-]{1,128})?")
STS_VERSION = "2011-06-15"
# What a presigned GetCallerIdentity carries in its query, and nothing else.
PROOF_PARAMETERS = frozenset({
    "Action", "Version", "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
    "X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Security-Token"})
MAX_PROOF_LENGTH = 8192
STS_NAMESPACE = "{https://sts.amazonaws.com/doc/2011-06-15/}"
# A regional STS endpoint, by partition DNS suffix: its dual-stack suffix, and where STS has
# FIPS hosts.
_REGIONAL = re.compile(r"sts\.([a-z]{2}(?:-[a-z]+)+-[0-9]{1,2})\.(amazonaws\.com(?:\.cn)?)")
_DUAL_STACK = {"amazonaws.com": "api.aws", "amazonaws.com.cn": "api.amazonwebservices.com.cn"}
_FIPS = frozenset({"amazonaws.com"})


class IdentityRefused(InvalidInput):
    """The proof of who is calling is missing, malformed or refused by STS."""


class StsUnavailable(CommandFailed):
    """STS could not say whether the proof is good (it failed, or could not be reached):
    nothing ran, and the same command can be tried again (exit status 5, "unreachable")."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code=EXIT_UNAVAILABLE)


@dataclass(frozen=True)
class Caller:
    arn: str
    account: str

    @property
    def principal(self) -> dict[str, str]:
        """Who the ARN says, in parts. For an assumed role the role and the session name
        apart: the session name is the caller's own choice unless the role's trust policy pins
        it (``sts:RoleSessionName``), so it identifies a person only where that is so."""
        parts = self.arn.split(":", 5)
        resource = parts[5] if len(parts) == 6 else ""
        if parts[2:3] == ["sts"] and resource.startswith("assumed-role/"):
            _, role, session = [*resource.split("/", 2), "", ""][:3]
            return {"role": f"arn:{parts[1]}:iam::{self.account}:role/{role}",
                    "session": session,
                    "session_named_by": "the caller, unless the role's trust policy pins "
                                        "sts:RoleSessionName"}
        return {"principal": self.arn}


def request_digest(command: str, arguments: dict[str, Any], *, audience: str,
                   nonce: str) -> str:
    """The SHA-256 of a command, its arguments, the function it is for and a nonce, in one
    canonical JSON form: what a proof signs."""
    text = json.dumps({"command": command, "args": arguments, "audience": audience,
                       "nonce": nonce}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def new_nonce() -> str:
    """A fresh random nonce for one proof (128 bits)."""
    return secrets.token_hex(16)


def check_nonce(nonce: Any) -> str:
    if not isinstance(nonce, str) or not _NONCE.fullmatch(nonce):
        raise IdentityRefused("identity: identity.nonce must be 32 to 64 lower-case hex "
                              "digits (the reminders command line makes one per command)")
    return nonce


def function_arn(name: str, *, partition: str, region: str, account: str) -> str:
    """The audience of a proof for the function ``name`` (a name, or an ARN, whose qualifier
    is dropped): its unqualified ARN in ``region`` and ``account``."""
    found = _FUNCTION_ARN.fullmatch(name)
    if found is not None:
        return audience_of(name)
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
        raise InvalidInput(f"--ops-function: not a function name or ARN: {name[:80]!r}")
    return f"arn:{partition}:lambda:{region}:{account}:function:{name}"


def audience_of(invoked_function_arn: str) -> str:
    """The function's own audience: the ARN it was invoked as, without a version or alias."""
    found = _FUNCTION_ARN.fullmatch(invoked_function_arn)
    if found is None:
        raise IdentityRefused(f"identity: the function's own ARN cannot be read "
                              f"({invoked_function_arn[:120]!r})")
    partition, region, account, name = found.groups()
    return f"arn:{partition}:lambda:{region}:{account}:function:{name}"


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


def accepted_origins(sts_endpoint: str) -> frozenset[str]:
    """Where a proof may be sent: for the function's own regional STS endpoint
    (``https://sts.REGION.amazonaws.com``, or China's ``.amazonaws.com.cn``), that host, the
    region's FIPS host (``sts-fips.REGION.amazonaws.com``) and its dual-stack host
    (``sts.REGION.api.aws``; in China ``sts.REGION.api.amazonwebservices.com.cn``), each over
    HTTPS on the default port; for any other endpoint (the local stand-in), that one only. Never
    the global ``sts.amazonaws.com``, another region's, or another partition's."""
    trusted = urlsplit(sts_endpoint)
    found = _REGIONAL.fullmatch(trusted.netloc) if trusted.scheme == "https" else None
    if found is None:
        return frozenset({f"{trusted.scheme}://{trusted.netloc}"})
    region, suffix = found.group(1), found.group(2)
    hosts = {f"sts.{region}.{suffix}", f"sts.{region}.{_DUAL_STACK[suffix]}"}
    if suffix in _FIPS:
        hosts.add(f"sts-fips.{region}.{suffix}")
    return frozenset(f"https://{host}" for host in hosts)


def check_proof(proof: str, sts_endpoint: str, *, now: datetime) -> datetime:
    """Refuse anything but a presigned GetCallerIdentity to one of :func:`accepted_origins`,
    good for at most ``MAX_PROOF_SECONDS`` and signed within that of ``now`` (the function's
    clock), before a byte is sent: the function fetches no other URL a caller could name.
    Returns the instant it was signed (its ``X-Amz-Date``)."""
    if len(proof) > MAX_PROOF_LENGTH:
        raise IdentityRefused("identity: the proof is too long")
    parts, origins = urlsplit(proof), accepted_origins(sts_endpoint)
    if f"{parts.scheme}://{parts.netloc}" not in origins or \
            parts.path not in ("", "/") or parts.fragment or parts.username:
        others = " (or this region's FIPS or dual-stack STS host)" if len(origins) > 1 else ""
        raise IdentityRefused(f"identity: the proof is not a request to {sts_endpoint}{others}")
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
        raise IdentityRefused(f"identity: the proof must expire within {MAX_PROOF_SECONDS} s "
                              f"(X-Amz-Expires {expires[:12]!r})")
    stamp = one.get("X-Amz-Date", "")
    if not _AMZ_DATE.fullmatch(stamp):
        raise IdentityRefused("identity: the proof's X-Amz-Date cannot be read")
    try:
        signed_at = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        raise IdentityRefused("identity: the proof's X-Amz-Date cannot be read") from None
    age = (now - signed_at).total_seconds()
    if abs(age) > MAX_PROOF_SECONDS:
        when = f"{int(age)} s ago" if age > 0 else f"{int(-age)} s ahead of the function's clock"
        raise IdentityRefused(f"identity: the proof was signed {when}; a proof is good for "
                              f"{MAX_PROOF_SECONDS} s (run the command again, and check the "
                              "clock where it runs)")
    return signed_at


def remembered_until(signed_at: datetime) -> datetime:
    """Until when an accepted proof is remembered: past it, :func:`check_proof` refuses it
    by its age anyway."""
    return signed_at + timedelta(seconds=MAX_PROOF_SECONDS)


def verify(proof: str, digest: str, *, sts_endpoint: str, now: datetime,
           timeout: float = 5.0) -> Caller:
    """Ask STS who signed ``proof`` for the command whose digest is ``digest``."""
    check_proof(proof, sts_endpoint, now=now)
    opener = urllib.request.build_opener(_NoRedirects)
    request = urllib.request.Request(proof, headers={HEADER: digest}, method="GET")
    try:
        with opener.open(request, timeout=timeout) as response:
            body = response.read(65_536)
    except urllib.error.HTTPError as exc:
        code = _error_code(exc)
        status = f"HTTP {exc.code}{' ' + code if code else ''}"
        if exc.code >= 500:
            raise StsUnavailable(f"identity: STS could not check the proof ({status}); "
                                 "nothing ran, try again") from None
        raise IdentityRefused(
            f"identity: STS refused the proof ({status}): it expired, was altered, or was "
            "signed for another command") from None
    except OSError as exc:  # refused, reset, timed out, no route, no name
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise StsUnavailable(f"identity: STS could not be reached at {sts_endpoint} "
                             f"({reason}); nothing ran, try again") from None
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError:
        raise IdentityRefused("identity: STS's answer cannot be read") from None
    arn = root.findtext(f".//{STS_NAMESPACE}Arn") or root.findtext(".//Arn")
    account = root.findtext(f".//{STS_NAMESPACE}Account") or root.findtext(".//Account")
    if not arn or not account:
        raise IdentityRefused("identity: STS's answer names no caller")
    return Caller(arn=arn, account=account)
