"""A stand-in for STS's ``GetCallerIdentity`` that checks signatures the way STS does.

moto's STS answers every request with its default user, whatever the signature; so a proof
signed for the wrong HTTP method, or for other arguments, would pass through moto as if it were
good. This server recomputes the SigV4 signature of each request (presigned in the query, as
the operations function's identity proof is, or in an ``Authorization`` header, as boto3's own
``get_caller_identity`` is) and answers only when it matches:

- the canonical request: the HTTP method, the canonical URI, the query with every parameter but
  ``X-Amz-Signature``, the signed headers and their values as received (``host`` among them),
  and the body's SHA-256 (the empty body's, for a presigned GET);
- the credential scope: the date of ``X-Amz-Date``, this server's region, the service ``sts``;
- the time: a presigned request is refused once ``X-Amz-Date`` plus ``X-Amz-Expires`` has
  passed, and any request signed more than 15 minutes ahead of the clock (or, in a header,
  more than 15 minutes behind it);
- the key: an access key in the :class:`Registry`, with its session token when it has one.

A refusal has STS's XML error shape and status (``SignatureDoesNotMatch``, ``ExpiredToken``,
``InvalidClientTokenId``: 403); a success is a ``GetCallerIdentityResponse`` naming the
principal that owns the key. What only real STS proves: that the credentials are an IAM
user's or role's at all, and the exact wording of its messages.

``python -m reminders.local.sts_server --port N [--region R] [--principal KEY SECRET ARN]``
serves until SIGTERM; tests start :class:`StsStandIn` in the process, with their own clock.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import re
import signal
import sys
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any
from urllib.parse import quote, unquote, urlsplit
from xml.sax.saxutils import escape

ALGORITHM = "AWS4-HMAC-SHA256"
NAMESPACE = "https://sts.amazonaws.com/doc/2011-06-15/"
VERSION = "2011-06-15"
MAX_EXPIRES = 604_800  # SigV4's limit on X-Amz-Expires: seven days
SKEW = timedelta(minutes=15)
HEALTH_PATH = "/_stand-in/health"
_DATE = re.compile(r"^\d{8}T\d{6}Z$")


@dataclass(frozen=True)
class Principal:
    """Who owns an access key: an IAM user's, or an assumed role's (with a session token)."""

    access_key: str
    secret_key: str
    arn: str
    session_token: str | None = None
    user_id: str = ""

    @property
    def account(self) -> str:
        return self.arn.split(":")[4]


@dataclass
class Registry:
    """The access keys the stand-in knows, by access key id."""

    principals: dict[str, Principal] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, principal: Principal) -> Principal:
        with self.lock:
            self.principals[principal.access_key] = principal
        return principal

    def get(self, access_key: str) -> Principal | None:
        with self.lock:
            return self.principals.get(access_key)


class StsError(Exception):
    """A refusal, as STS words it: HTTP status, error code, message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.status, self.code, self.message = status, code, message


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def _encode(text: str) -> str:
    return quote(text, safe="-_.~")


def _pairs(query: str) -> list[tuple[str, str]]:
    """The query's parameters, decoded (a ``+`` stays a plus, as SigV4 reads it)."""
    pairs = []
    for part in query.split("&") if query else []:
        key, _, value = part.partition("=")
        pairs.append((unquote(key), unquote(value)))
    return pairs


def canonical_uri(path: str) -> str:
    """The path with its dot segments resolved, each byte URI-encoded (again), as SigV4 does
    for every service but S3."""
    segments: list[str] = []
    for segment in path.split("/")[1:]:
        if segment == "..":
            if segments:
                segments.pop()
        elif segment != ".":
            segments.append(segment)
    normalized = "/" + "/".join(segments)
    if path.endswith("/") and normalized != "/":
        normalized += "/"
    return quote(normalized, safe="/~")


def canonical_query(pairs: list[tuple[str, str]]) -> str:
    encoded = sorted((_encode(k), _encode(v)) for k, v in pairs if k != "X-Amz-Signature")
    return "&".join(f"{k}={v}" for k, v in encoded)


def canonical_headers(signed: list[str], headers: Mapping[str, list[str]]) -> str:
    lines = []
    for name in signed:
        values = headers.get(name)
        if values is None:
            raise StsError(403, "SignatureDoesNotMatch",
                           f"The request signature we calculated does not match the signature "
                           f"you provided. Signed header {name!r} is missing from the request.")
        lines.append(f"{name}:{','.join(' '.join(v.split()) for v in values)}\n")
    return "".join(lines)


def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    key = _hmac(("AWS4" + secret).encode(), date)
    key = _hmac(key, region)
    key = _hmac(key, service)
    return _hmac(key, "aws4_request")


def _parse_date(text: str) -> datetime:
    if not _DATE.match(text):
        raise StsError(400, "IncompleteSignature",
                       f"Date must be in ISO-8601 'basic format'. Got '{text}'.")
    return datetime.strptime(text, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)


@dataclass(frozen=True)
class Signed:
    """What a request claims about its signature, from its query or its Authorization."""

    credential: str
    signed_headers: str
    signature: str
    date: str
    expires: int | None  # presigned only
    token: str | None


def _from_query(one: dict[str, str]) -> Signed:
    for name in ("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-SignedHeaders",
                 "X-Amz-Signature", "X-Amz-Expires"):
        if name not in one:
            raise StsError(400, "AuthorizationQueryParametersError",
                           f"Query-string authentication version 4 requires the {name} "
                           "parameter.")
    if one["X-Amz-Algorithm"] != ALGORITHM:
        raise StsError(400, "IncompleteSignature",
                       f"Unsupported AWS 'algorithm': '{one['X-Amz-Algorithm']}'")
    expires = one["X-Amz-Expires"]
    if not expires.isdigit() or not 1 <= int(expires) <= MAX_EXPIRES:
        raise StsError(400, "AuthorizationQueryParametersError",
                       "X-Amz-Expires must be a number from 1 to 604800 (seven days).")
    return Signed(one["X-Amz-Credential"], one["X-Amz-SignedHeaders"], one["X-Amz-Signature"],
                  one["X-Amz-Date"], int(expires), one.get("X-Amz-Security-Token"))


def _from_header(authorization: str, headers: Mapping[str, list[str]]) -> Signed:
    algorithm, _, rest = authorization.partition(" ")
    if algorithm != ALGORITHM:
        raise StsError(400, "IncompleteSignature",
                       f"Unsupported AWS 'algorithm': '{algorithm}'")
    fields = {}
    for part in rest.split(","):
        name, _, value = part.strip().partition("=")
        fields[name] = value
    date = (headers.get("x-amz-date") or [""])[0]
    if not {"Credential", "SignedHeaders", "Signature"} <= set(fields) or not date:
        raise StsError(400, "IncompleteSignature",
                       "Authorization header requires 'Credential', 'Signature', "
                       "'SignedHeaders' and an X-Amz-Date header.")
    tokens = headers.get("x-amz-security-token")
    token = tokens[0] if tokens else None
    return Signed(fields["Credential"], fields["SignedHeaders"], fields["Signature"], date,
                  None, token)


def verify(*, method: str, target: str, headers: Mapping[str, list[str]], body: bytes,
           now: datetime, region: str, registry: Registry) -> tuple[Principal, dict[str, str]]:
    """The principal whose key signed this request, and its parameters (query and form
    body); or :class:`StsError` as STS would refuse it. ``target`` is the request line's
    path and query, as received; ``headers`` are keyed by lower-case name."""
    parts = urlsplit(target)
    pairs = _pairs(parts.query)
    names = [k for k, _ in pairs]
    if len(set(names)) != len(names):
        raise StsError(400, "InvalidParameterValue", "A parameter is given more than once.")
    one = dict(pairs)
    authorization = (headers.get("authorization") or [""])[0]
    if "X-Amz-Signature" in one or "X-Amz-Credential" in one:
        if authorization:
            raise StsError(400, "InvalidRequest", "Only one auth mechanism allowed.")
        signed = _from_query(one)
    elif authorization:
        signed = _from_header(authorization, headers)
    else:
        raise StsError(403, "MissingAuthenticationToken", "Request is missing "
                       "Authentication Token")
    scope = signed.credential.split("/")
    if len(scope) != 5 or scope[4] != "aws4_request":
        raise StsError(400, "IncompleteSignature",
                       f"Credential must have exactly 5 slash-delimited elements, e.g. "
                       f"keyid/date/region/service/term, got '{signed.credential}'")
    access_key, date, scope_region, service, _ = scope
    when = _parse_date(signed.date)
    if date != signed.date[:8]:
        raise StsError(403, "SignatureDoesNotMatch",
                       f"Date in Credential scope does not match YYYYMMDD from ISO-8601 "
                       f"version of date from HTTP: '{date}' != '{signed.date[:8]}', from "
                       f"'{signed.date}'.")
    if service != "sts":
        raise StsError(403, "SignatureDoesNotMatch",
                       "Credential should be scoped to correct service: 'sts'. ")
    if scope_region != region:
        raise StsError(403, "SignatureDoesNotMatch",
                       "Credential should be scoped to a valid region. ")
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    if when - now > SKEW:
        raise StsError(403, "SignatureDoesNotMatch",
                       f"Signature not yet current: {signed.date} is still later than "
                       f"{(now + SKEW).strftime('%Y%m%dT%H%M%SZ')} ({stamp} + 15 min.)")
    if signed.expires is not None and now > when + timedelta(seconds=signed.expires):
        raise StsError(403, "ExpiredToken", "Request has expired")
    if signed.expires is None and now - when > SKEW:
        raise StsError(403, "SignatureDoesNotMatch",
                       f"Signature expired: {signed.date} is now earlier than "
                       f"{(now - SKEW).strftime('%Y%m%dT%H%M%SZ')} ({stamp} - 15 min.)")
    principal = registry.get(access_key)
    if principal is None or principal.session_token != signed.token:
        raise StsError(403, "InvalidClientTokenId",
                       "The security token included in the request is invalid.")
    signed_names = signed.signed_headers.split(";")
    if "host" not in signed_names or signed_names != sorted(set(signed_names)) or \
            any(n != n.lower() for n in signed_names):
        raise StsError(403, "SignatureDoesNotMatch",
                       "The request signature we calculated does not match the signature you "
                       "provided. SignedHeaders must be sorted, lower-case, and include host.")
    payload = (headers.get("x-amz-content-sha256") or [""])[0] \
        if "x-amz-content-sha256" in signed_names else _sha256(body)
    canonical = "\n".join([method, canonical_uri(parts.path or "/"), canonical_query(pairs),
                           canonical_headers(signed_names, headers), signed.signed_headers,
                           payload])
    to_sign = "\n".join([ALGORITHM, signed.date, "/".join(scope[1:]),
                         _sha256(canonical.encode())])
    expected = hmac.new(signing_key(principal.secret_key, date, region, "sts"),
                        to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signed.signature):
        raise StsError(403, "SignatureDoesNotMatch",
                       "The request signature we calculated does not match the signature you "
                       "provided. Check your AWS Secret Access Key and signing method. Consult "
                       "the service documentation for details.")
    params = dict(one)
    content_type = (headers.get("content-type") or [""])[0]
    if body and content_type.startswith("application/x-www-form-urlencoded"):
        params.update(_pairs(body.decode("utf-8", "replace").replace("+", "%20")))
    return principal, params


def error_xml(code: str, message: str, request_id: str) -> bytes:
    kind = "Receiver" if code in ("InternalFailure", "ServiceUnavailable") else "Sender"
    return (f'<ErrorResponse xmlns="{NAMESPACE}">\n  <Error>\n    <Type>{kind}</Type>\n'
            f"    <Code>{escape(code)}</Code>\n    <Message>{escape(message)}</Message>\n"
            f"  </Error>\n  <RequestId>{request_id}</RequestId>\n</ErrorResponse>\n").encode()


def identity_xml(principal: Principal, request_id: str) -> bytes:
    user_id = principal.user_id or principal.access_key
    return (f'<GetCallerIdentityResponse xmlns="{NAMESPACE}">\n  <GetCallerIdentityResult>\n'
            f"    <Arn>{escape(principal.arn)}</Arn>\n    <UserId>{escape(user_id)}</UserId>\n"
            f"    <Account>{principal.account}</Account>\n  </GetCallerIdentityResult>\n"
            f"  <ResponseMetadata>\n    <RequestId>{request_id}</RequestId>\n"
            "  </ResponseMetadata>\n</GetCallerIdentityResponse>\n").encode()


@dataclass
class StsStandIn:
    """The stand-in on a port of 127.0.0.1, in this process: ``clock`` is its time, and
    ``fault`` (an HTTP status) makes it answer every request with that 5xx, as STS does when
    it fails."""

    region: str
    registry: Registry = field(default_factory=Registry)
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    fault: int | None = None
    seen: list[dict[str, Any]] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self, port: int = 0, host: str = "127.0.0.1") -> str:
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def answer(self, method: str, target: str, headers: Mapping[str, list[str]],
               body: bytes) -> tuple[int, bytes]:
        request_id = str(uuid.uuid4())
        self.seen.append({"method": method, "target": target})
        if self.fault is not None:
            return self.fault, error_xml("ServiceUnavailable", "Service is unable to handle "
                                         "request.", request_id)
        try:
            principal, params = verify(method=method, target=target, headers=headers,
                                       body=body, now=self.clock(), region=self.region,
                                       registry=self.registry)
            if params.get("Action") != "GetCallerIdentity":
                raise StsError(400, "InvalidAction",
                               f"Could not find operation {params.get('Action')} for version "
                               f"{params.get('Version')}")
            if params.get("Version") != VERSION:
                raise StsError(400, "InvalidAction", "Could not find operation "
                               f"GetCallerIdentity for version {params.get('Version')}")
        except StsError as exc:
            return exc.status, error_xml(exc.code, exc.message, request_id)
        return 200, identity_xml(principal, request_id)


def _handler(stand_in: StsStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == HEALTH_PATH:
                self._send(200, b"ok\n", "text/plain")
                return
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers: dict[str, list[str]] = {}
            for name, value in self.headers.items():
                headers.setdefault(name.lower(), []).append(value)
            status, payload = stand_in.answer(self.command, self.path, headers, body)
            self._send(status, payload, "text/xml")

        def _send(self, status: int, payload: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reminders-sts")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--principal", nargs=3, action="append", default=[],
                        metavar=("ACCESS_KEY", "SECRET_KEY", "ARN"),
                        help="a key it knows and who owns it (repeatable)")
    args = parser.parse_args(argv)
    stand_in = StsStandIn(region=args.region)
    for access_key, secret_key, arn in args.principal:
        stand_in.registry.add(Principal(access_key, secret_key, arn))
    stand_in.start(args.port, args.host)

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    print(f"http://{args.host}:{args.port}", flush=True)
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
