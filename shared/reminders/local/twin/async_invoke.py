"""Lambda's Invoke API for the twin's functions, and Lambda's queue of asynchronous events.

moto runs Lambda functions only in Docker, which is not here, so the twin serves the Invoke
call itself (:class:`InvokeEndpoint`, on 127.0.0.1; the functions' processes reach it through
``AWS_ENDPOINT_URL_LAMBDA``), as strictly as Lambda answers it:

- the request's SigV4 signature is recomputed (service ``lambda``, this region, 15 minutes of
  skew) with the secret of the access key that signed it, a role's session token included:
  ``InvalidSignatureException`` when it does not match, ``UnrecognizedClientException`` for a
  key no role has;
- the caller's role must be granted ``lambda:InvokeFunction`` on the function's ARN by the
  template's statements (moto's IAM policy evaluation, an explicit Deny winning), else
  ``AccessDeniedException`` naming the role, the action and the ARN;
- a function the twin does not run is ``ResourceNotFoundException``; a payload that is not
  JSON ``InvalidRequestContentException``; one over the asynchronous limit (256 KiB)
  ``RequestEntityTooLargeException``; an unknown ``X-Amz-Invocation-Type``
  ``InvalidParameterValueException``.

An accepted ``Event`` invoke answers 202 at once and is queued in :class:`AsyncEvents`, which
runs each event as Lambda runs asynchronous events, on the injected clock: the first attempt
when :meth:`AsyncEvents.run_due` is next called, and after a function error, up to the
function's ``MaximumRetryAttempts`` more, one minute after the first attempt and two minutes
after the second (Lambda's documented waits); an instance that is not free (throttled) is
retried with a backoff from 1 s doubling to 5 minutes, without spending a retry. An event
older than ``MaximumEventAgeInSeconds`` when its turn comes is dropped unrun. Each drop counts
in ``AsyncEventsDropped`` and goes to the ``OnFailure`` destination (an SQS queue of the
template) as Lambda's invocation record when the configuration names one. Every event's
attempts and outcome stay in :attr:`AsyncEvents.events`.

What only Lambda proves: its exact retry instants (it adds jitter), resource-based policies on
the function (the twin's callers are its own roles), and events run in parallel with their
caller (here they run when the twin is asked, after the caller returned).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

from reminders.local.sts_server import (
    ALGORITHM,
    SKEW,
    StsError,
    canonical_headers,
    canonical_query,
    canonical_uri,
    signing_key,
)

MAX_ASYNC_PAYLOAD = 256 * 1024  # Lambda's limit on an Event invoke's payload, in bytes
MAX_SYNC_PAYLOAD = 6 * 1024 * 1024
INVOKE_PATH = "/2015-03-31/functions/"
# Lambda's waits before the second and the third attempt after a function error.
RETRY_WAITS = (timedelta(minutes=1), timedelta(minutes=2))
THROTTLE_FIRST = timedelta(seconds=1)
THROTTLE_MOST = timedelta(minutes=5)

Outcome = Literal["queued", "succeeded", "dropped"]


class InvokeError(Exception):
    """A refusal, as Lambda's REST API answers it: status, ``x-amzn-ErrorType``, message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.status, self.code, self.message = status, code, message


@dataclass(frozen=True)
class Caller:
    """A role's session: its key's secret and token, the assumed role's ARN, and the policy
    document its role holds (the template's statements, resolved)."""

    access_key: str
    secret_key: str
    session_token: str | None
    arn: str
    policy: Mapping[str, Any]


@dataclass(frozen=True)
class AsyncConfig:
    """A function's asynchronous invoke configuration (AWS::Lambda::EventInvokeConfig)."""

    maximum_retry_attempts: int = 2
    maximum_event_age: int = 6 * 3600
    on_failure: str | None = None  # an SQS queue's URL


@dataclass
class Attempt:
    at: datetime
    error: str | None  # None: it succeeded
    throttled: bool = False


@dataclass
class AsyncEvent:
    request_id: str
    function: str  # the twin's name for it: publisher, ...
    payload: bytes
    received: datetime
    next_at: datetime
    attempts: list[Attempt] = field(default_factory=list)
    outcome: Outcome = "queued"
    reason: str = ""  # why it was dropped: RetriesExhausted or EventAgeExceeded
    destination: str = ""  # what became of its invocation record: sent, or the refusal

    @property
    def function_errors(self) -> int:
        return sum(1 for a in self.attempts if a.error is not None and not a.throttled)

    def as_json(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "function": self.function,
                "received": self.received.isoformat(), "outcome": self.outcome,
                "reason": self.reason, "destination": self.destination,
                "attempts": [{"at": a.at.isoformat(), "error": a.error,
                              "throttled": a.throttled} for a in self.attempts]}


@dataclass(frozen=True)
class RunResult:
    """What running one attempt gave: ``error`` None when the function succeeded;
    ``throttled`` when no instance could take it (it did not run)."""

    error: str | None
    throttled: bool = False
    response: bytes = b""


class AsyncEvents:
    """Lambda's queue of accepted asynchronous events, run on the injected clock ``now``.

    ``run``: runs one attempt of a function with a payload; ``configs``: each function's
    asynchronous configuration; ``received`` and ``dropped``: called with each event accepted
    and dropped (the metrics); ``send_failure``: sends a dropped event's invocation record to
    an OnFailure queue's URL (raising when it is refused). At most ``max_events`` queued."""

    def __init__(self, run: Callable[[str, bytes], RunResult], configs: Mapping[str, AsyncConfig],
                 now: Callable[[], datetime], *,
                 received: Callable[[AsyncEvent], None] = lambda e: None,
                 dropped: Callable[[AsyncEvent, datetime], None] = lambda e, at: None,
                 send_failure: Callable[[AsyncEvent, str, dict[str, Any]], None] | None = None,
                 function_arn: Callable[[str], str] = str,
                 max_events: int = 10_000) -> None:
        self._run, self.configs, self._now = run, configs, now
        self._received, self._dropped, self._send_failure = received, dropped, send_failure
        self._function_arn = function_arn
        self.max_events = max_events
        self.events: list[AsyncEvent] = []
        self.paused = False  # True: nothing runs (Lambda's queue backed up)
        self._lock = threading.Lock()

    def accept(self, function: str, payload: bytes) -> AsyncEvent:
        at = self._now()
        event = AsyncEvent(str(uuid.uuid4()), function, payload, at, at)
        with self._lock:
            if sum(1 for e in self.events if e.outcome == "queued") >= self.max_events:
                raise InvokeError(429, "TooManyRequestsException",
                                  f"Rate Exceeded: {self.max_events} events queued")
            self.events.append(event)
        self._received(event)
        return event

    def pending(self) -> list[AsyncEvent]:
        with self._lock:
            return [e for e in self.events if e.outcome == "queued"]

    def run_due(self, *, max_attempts: int = 1000) -> list[AsyncEvent]:
        """Run every queued event whose turn has come at the clock's instant (bounded by
        ``max_attempts`` attempts a call); the events that ended in this call."""
        ended: list[AsyncEvent] = []
        if self.paused:
            return ended
        for _ in range(max_attempts):
            now = self._now()
            due = [e for e in self.pending() if e.next_at <= now]
            if not due:
                break
            event = min(due, key=lambda e: (e.next_at, e.received))
            self._step(event, now)
            if event.outcome != "queued":
                ended.append(event)
        return ended

    def _step(self, event: AsyncEvent, now: datetime) -> None:
        config = self.configs.get(event.function, AsyncConfig())
        if now - event.received > timedelta(seconds=config.maximum_event_age):
            self._drop(event, now, "EventAgeExceeded", config)
            return
        result = self._run(event.function, event.payload)
        event.attempts.append(Attempt(now, result.error, result.throttled))
        if result.error is None:
            event.outcome = "succeeded"
            return
        if result.throttled:
            throttles = sum(1 for a in event.attempts if a.throttled)
            wait = min(THROTTLE_MOST, THROTTLE_FIRST * 2 ** (throttles - 1))
            event.next_at = now + wait
            return
        errors = event.function_errors
        if errors > config.maximum_retry_attempts:
            self._drop(event, now, "RetriesExhausted", config, result.response)
            return
        event.next_at = now + RETRY_WAITS[min(errors, len(RETRY_WAITS)) - 1]

    def _drop(self, event: AsyncEvent, now: datetime, reason: str, config: AsyncConfig,
              response: bytes = b"") -> None:
        event.outcome, event.reason = "dropped", reason
        self._dropped(event, now)
        if config.on_failure and self._send_failure is not None:
            try:
                self._send_failure(event, config.on_failure,
                                   self.invocation_record(event, now, response))
                event.destination = "sent"
            except Exception as exc:  # noqa: BLE001 (Lambda loses the record; say why)
                event.destination = f"not sent: {exc}"

    def invocation_record(self, event: AsyncEvent, now: datetime,
                          response: bytes) -> dict[str, Any]:
        """What Lambda sends an OnFailure destination."""
        try:
            request: Any = json.loads(event.payload)
        except ValueError:
            request = event.payload.decode(errors="replace")
        try:
            answer: Any = json.loads(response) if response else None
        except ValueError:
            answer = response.decode(errors="replace")
        ran = [a for a in event.attempts if not a.throttled]
        return {
            "version": "1.0",
            "timestamp": now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z",
            "requestContext": {"requestId": event.request_id,
                               "functionArn": f"{self._function_arn(event.function)}:$LATEST",
                               "condition": event.reason,
                               "approximateInvokeCount": len(ran)},
            "requestPayload": request,
            **({"responseContext": {"statusCode": 200, "executedVersion": "$LATEST",
                                    "functionError": "Unhandled"},
                "responsePayload": answer} if ran else {}),
        }


# ---------------------------------------------------------------- the endpoint


def verify_signature(*, method: str, target: str, headers: Mapping[str, list[str]],
                     body: bytes, now: datetime, region: str,
                     callers: Mapping[str, Caller], service: str = "lambda") -> Caller:
    """The caller whose key signed this request (its signature in the Authorization header,
    as every SDK signs a Lambda call), or InvokeError as Lambda refuses it."""
    authorization = (headers.get("authorization") or [""])[0]
    if not authorization:
        raise InvokeError(403, "MissingAuthenticationTokenException",
                          "Missing Authentication Token")
    algorithm, _, rest = authorization.partition(" ")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, _, value = part.strip().partition("=")
        fields[name] = value
    date = (headers.get("x-amz-date") or [""])[0]
    if algorithm != ALGORITHM or not {"Credential", "SignedHeaders", "Signature"} <= set(fields) \
            or len(date) != 16:
        raise InvokeError(403, "IncompleteSignatureException",
                          "Authorization header requires 'Credential', 'Signature', "
                          "'SignedHeaders' and an X-Amz-Date header.")
    scope = fields["Credential"].split("/")
    if len(scope) != 5 or scope[4] != "aws4_request" or scope[3] != service or \
            scope[2] != region or scope[1] != date[:8]:
        raise InvokeError(403, "InvalidSignatureException",
                          f"Credential should be scoped to a valid date, region {region} and "
                          f"service {service}: {fields['Credential']}")
    try:
        when = datetime.strptime(date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        raise InvokeError(403, "IncompleteSignatureException",
                          f"Date must be in ISO-8601 'basic format'. Got '{date}'.") from None
    if abs(now - when) > SKEW:
        raise InvokeError(403, "InvalidSignatureException",
                          f"Signature expired: {date} is not within 15 minutes of "
                          f"{now.strftime('%Y%m%dT%H%M%SZ')}")
    caller = callers.get(scope[0])
    tokens = headers.get("x-amz-security-token")
    token = tokens[0] if tokens else None
    if caller is None or caller.session_token != token:
        raise InvokeError(403, "UnrecognizedClientException",
                          "The security token included in the request is invalid.")
    signed = fields["SignedHeaders"].split(";")
    if "host" not in signed or signed != sorted(set(signed)):
        raise InvokeError(403, "InvalidSignatureException",
                          "SignedHeaders must be sorted, lower-case, and include host.")
    parts = urlsplit(target)
    pairs = [(unquote(k), unquote(v)) for k, _, v in
             (p.partition("=") for p in parts.query.split("&") if p)]
    payload_hash = (headers.get("x-amz-content-sha256") or [""])[0] \
        if "x-amz-content-sha256" in signed else hashlib.sha256(body).hexdigest()
    try:
        canonical = "\n".join([method, canonical_uri(parts.path or "/"), canonical_query(pairs),
                               canonical_headers(signed, headers), fields["SignedHeaders"],
                               payload_hash])
    except StsError as exc:
        raise InvokeError(403, "InvalidSignatureException", exc.message) from None
    to_sign = "\n".join([ALGORITHM, date, "/".join(scope[1:]),
                         hashlib.sha256(canonical.encode()).hexdigest()])
    expected = hmac.new(signing_key(caller.secret_key, scope[1], region, service),
                        to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, fields["Signature"]):
        raise InvokeError(403, "InvalidSignatureException",
                          "The request signature we calculated does not match the signature "
                          "you provided. Check your AWS Secret Access Key and signing method.")
    return caller


def authorize(caller: Caller, function_arn: str) -> None:
    """The caller's role grants lambda:InvokeFunction on ``function_arn``, or
    AccessDeniedException as Lambda words it."""
    from moto.iam.access_control import IAMPolicy, PermissionResult

    decision = IAMPolicy(json.dumps(caller.policy)).is_action_permitted(
        "lambda:InvokeFunction", function_arn)
    if decision != PermissionResult.PERMITTED:
        why = "an explicit deny in an identity-based policy" \
            if decision == PermissionResult.DENIED else \
            "no identity-based policy allows the lambda:InvokeFunction action"
        raise InvokeError(403, "AccessDeniedException",
                          f"User: {caller.arn} is not authorized to perform: "
                          f"lambda:InvokeFunction on resource: {function_arn} because {why}")


@dataclass(frozen=True)
class Served:
    """A function the endpoint answers for: the twin's name for it and its deployed name."""

    name: str
    deployed_name: str


class InvokeEndpoint:
    """The Invoke path of Lambda's API for ``functions`` (by deployed name), on 127.0.0.1.

    ``events`` takes the Event invokes; ``run_sync`` runs a RequestResponse one;
    ``callers`` are the roles' sessions by access key (:meth:`add_caller`)."""

    def __init__(self, functions: Mapping[str, Served], events: AsyncEvents, *,
                 region: str, account: str,
                 run_sync: Callable[[str, bytes], RunResult] | None = None,
                 wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.functions = dict(functions)
        self.events = events
        self.region, self.account = region, account
        self.run_sync = run_sync
        self.callers: dict[str, Caller] = {}
        self.refusals: list[dict[str, str]] = []  # every refusal: code, message, function
        self._wall_clock = wall_clock
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="lambda-invoke")
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def add_caller(self, caller: Caller) -> None:
        self.callers[caller.access_key] = caller

    def function_arn(self, deployed_name: str) -> str:
        return f"arn:aws:lambda:{self.region}:{self.account}:function:{deployed_name}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def answer(self, method: str, target: str, headers: Mapping[str, list[str]],
               body: bytes) -> tuple[int, dict[str, str], bytes]:
        """Status, headers and body of the answer to one request."""
        request_id = str(uuid.uuid4())
        try:
            return self._answer(method, target, headers, body, request_id)
        except InvokeError as exc:
            self.refusals.append({"code": exc.code, "message": exc.message, "target": target})
            document = json.dumps({"Type": "User", "message": exc.message}).encode()
            return exc.status, {"x-amzn-ErrorType": exc.code, "x-amzn-RequestId": request_id,
                                "Content-Type": "application/json"}, document

    def _answer(self, method: str, target: str, headers: Mapping[str, list[str]], body: bytes,
                request_id: str) -> tuple[int, dict[str, str], bytes]:
        caller = verify_signature(method=method, target=target, headers=headers, body=body,
                                  now=self._wall_clock(), region=self.region,
                                  callers=self.callers)
        path = urlsplit(target).path
        if method != "POST" or not path.startswith(INVOKE_PATH) or \
                not path.endswith("/invocations"):
            raise InvokeError(404, "UnknownOperationException",
                              f"{method} {path} is no operation of this endpoint (Invoke only)")
        served = self._function(unquote(path[len(INVOKE_PATH):-len("/invocations")]))
        arn = self.function_arn(served.deployed_name)
        authorize(caller, arn)
        kind = (headers.get("x-amz-invocation-type") or ["RequestResponse"])[0]
        if kind not in ("Event", "RequestResponse", "DryRun"):
            raise InvokeError(400, "InvalidParameterValueException",
                              f"1 validation error detected: Value '{kind}' at "
                              "'invocationType' failed to satisfy constraint: Member must "
                              "satisfy enum value set: [Event, RequestResponse, DryRun]")
        limit = MAX_ASYNC_PAYLOAD if kind == "Event" else MAX_SYNC_PAYLOAD
        if len(body) > limit:
            raise InvokeError(413, "RequestEntityTooLargeException",
                              f"{len(body)} byte payload is too large for the {kind} "
                              f"invocation type (limit {limit} bytes)")
        if body:
            try:
                json.loads(body)
            except ValueError:
                raise InvokeError(400, "InvalidRequestContentException",
                                  "Could not parse request body into json: the payload is "
                                  "not JSON") from None
        base = {"x-amzn-RequestId": request_id}
        if kind == "DryRun":
            return 204, base, b""
        if kind == "Event":
            event = self.events.accept(served.name, body or b"{}")
            return 202, {**base, "x-amzn-RequestId": event.request_id}, b""
        if self.run_sync is None:
            raise InvokeError(400, "InvalidParameterValueException",
                              "this endpoint runs Event invokes only")
        result = self.run_sync(served.name, body or b"{}")
        if result.throttled:
            raise InvokeError(429, "TooManyRequestsException", result.error or "Rate Exceeded.")
        answer = {**base, "Content-Type": "application/json",
                  "X-Amz-Executed-Version": "$LATEST"}
        if result.error is not None:
            answer["X-Amz-Function-Error"] = "Unhandled"
        return 200, answer, result.response

    def _function(self, given: str) -> Served:
        """By name, ARN or partial ARN (``123456789012:function:name``), as Lambda takes it."""
        name = given
        if given.startswith("arn:"):
            parts = given.split(":")
            if len(parts) not in (7, 8) or parts[3] != self.region or \
                    parts[4] != self.account or parts[5] != "function":
                raise InvokeError(404, "ResourceNotFoundException",
                                  f"Function not found: {given}")
            name = parts[6]
        elif ":function:" in given:
            account, _, name = given.partition(":function:")
            if account != self.account:
                raise InvokeError(404, "ResourceNotFoundException",
                                  f"Function not found: {given}")
        name = name.split(":")[0]
        served = self.functions.get(name)
        if served is None:
            raise InvokeError(404, "ResourceNotFoundException",
                              f"Function not found: {self.function_arn(name)}")
        return served


def _handler_for(endpoint: InvokeEndpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self._serve()

        def do_GET(self) -> None:
            self._serve()

        def _serve(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers: dict[str, list[str]] = {}
            for name, value in self.headers.items():
                headers.setdefault(name.lower(), []).append(value)
            status, answer, payload = endpoint.answer(self.command, self.path, headers, body)
            self.send_response(status)
            for name, value in answer.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    return Handler
