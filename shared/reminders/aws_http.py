"""The AWS calls the Lambda functions make on their hot path, without boto3.

SQS, Secrets Manager and KMS speak AWS's JSON protocol, and Lambda's Invoke is one POST: each
call here is a SigV4-signed request over ``http.client``, with botocore's standard retry rule
(throttling and transient error codes, 429 and 5xx statuses, connection errors; full-jitter
exponential backoff, a bounded number of attempts) and pooled keep-alive connections.
Importing boto3 and building one client costs a function's cold start more than everything
else it loads but psycopg (docs/BENCHMARKS.md, ``cold_start``); this module costs a few
standard-library imports.

Each client has the boto3 method names, arguments and answers the service modules use
(``queue.py``, ``kms.py``, ``lambdas.py``, ``aws.read_db_secret``), so those modules take
either. Errors are :class:`AwsError`, whose ``response`` has botocore's ``Error`` shape.
Credentials come from the environment, as Lambda gives them; ``reminders.aws`` falls back to
boto3 where there are none (a profile, SSO), and for every other service.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import os
import random
import select
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit

from reminders import __version__
from reminders.errors import ConfigError

# What is tried again is botocore's standard retry mode (botocore/retries/standard.py), so a call
# through this client and one through boto3 give up on the same answers:
# - the error codes for "slow down" (its ThrottledRetryableChecker);
THROTTLING_CODES = frozenset({
    "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottledException",
    "TooManyRequestsException", "ProvisionedThroughputExceededException",
    "TransactionInProgressException", "RequestLimitExceeded", "BandwidthLimitExceeded",
    "LimitExceededException", "RequestThrottled", "SlowDown", "PriorRequestNotComplete",
    "EC2ThrottledException",
})
# - the error codes and statuses of a transient failure (its TransientRetryableChecker);
TRANSIENT_CODES = frozenset({"RequestTimeout", "RequestTimeoutException",
                             "PriorRequestNotComplete"})
TRANSIENT_STATUS = frozenset({500, 502, 503, 504})
# - a 429 whatever its code (its ThrottlingStatusCodeChecker), which botocore skips only when the
#   code is one of the operation's modelled errors: for the calls made here the one modelled
#   error AWS answers with a 429 is Lambda's TooManyRequestsException, a throttling code anyway.
THROTTLING_STATUS = frozenset({429})
# (SQS's throttling answer carries the query code "RequestThrottled"; none of the services
# called here models an error as retryable, botocore's fourth rule.)
# What CloudTrail records as the caller's agent.
USER_AGENT = f"reminders/{__version__} (SigV4 over http.client)"
MAX_BACKOFF_SECONDS = 20.0
# The errors a connection raises when the other end has gone (or never answered).
CONNECTION_ERRORS = (OSError, http.client.HTTPException)
# What a kept connection the other end closed while it was idle raises on its next use (a read
# timeout is not one of them: that is a slow answer, and counts as an attempt).
DROPPED = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


@dataclass(frozen=True)
class Limits:
    """How long a call may wait and how often it is tried; ``pool`` bounds the idle
    connections kept per endpoint (the scanner's parallel SendMessageBatch calls).

    ``max_idle_seconds``: a kept connection idle longer than this is closed, not reused. NAT
    gateways and load balancers forget an idle flow after about 350 s without telling either
    end, and a request sent on a connection dropped that way is lost in silence: it costs a
    full ``read_timeout`` per attempt. The scanner calls every minute, publishers and the
    redrive function may idle far longer; 30 s keeps well inside every such limit, and a new
    connection costs a handshake, not a timeout."""

    attempts: int = 3
    connect_timeout: float = 3.0
    read_timeout: float = 10.0
    pool: int = 10
    max_idle_seconds: float = 30.0


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str
    token: str | None = None


def env_credentials(env: Mapping[str, str] | None = None) -> Credentials | None:
    """The credentials Lambda puts in the environment, or None (then boto3 finds them)."""
    env = os.environ if env is None else env
    key, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
    if not key or not secret:
        return None
    return Credentials(key, secret, env.get("AWS_SESSION_TOKEN") or env.get("AWS_SECURITY_TOKEN")
                       or None)


class AwsError(Exception):
    """A call AWS refused, or one that never got an answer (``status`` 0). ``response`` has
    botocore's shape, so code that reads a ClientError's code reads this one's too."""

    def __init__(self, operation: str, code: str, message: str, status: int) -> None:
        super().__init__(f"{operation}: {code}: {message}" if message else f"{operation}: {code}")
        self.operation, self.code, self.message, self.status = operation, code, message, status
        self.response: dict[str, Any] = {"Error": {"Code": code, "Message": message},
                         "ResponseMetadata": {"HTTPStatusCode": status}}

    @property
    def retryable(self) -> bool:
        """Whether botocore's standard mode would try the call again. A 429 is, whatever its
        code: botocore does so for any code the operation does not model, and the one 429 the
        calls here model (Lambda's TooManyRequestsException) is a throttling code. A
        connection error (``status`` 0) is tried again too: see :meth:`Service.send`."""
        return (self.code in THROTTLING_CODES or self.code in TRANSIENT_CODES
                or self.status in TRANSIENT_STATUS or self.status in THROTTLING_STATUS)


# --- signing -----------------------------------------------------------------------------------

def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def sign(method: str, url: str, headers: dict[str, str], body: bytes, *, service: str,
         region: str, credentials: Credentials, now: datetime) -> dict[str, str]:
    """``headers`` with the SigV4 ones added (x-amz-date, the session token, Authorization).
    Every header given is signed; the URL's path must already be percent-encoded, as it is
    sent, and is encoded once more for the canonical request (AWS's rule for every service but
    S3). No call here has a query string, so none is accepted."""
    parts = urlsplit(url)
    if parts.query:
        raise ValueError(f"sign() takes no query string, got {url!r}")
    stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    signed = {k.lower(): " ".join(v.split()) for k, v in headers.items()}
    signed["host"] = parts.netloc
    signed["x-amz-date"] = stamp
    if credentials.token:
        signed["x-amz-security-token"] = credentials.token
    names = sorted(signed)
    canonical = "\n".join([
        method, quote(parts.path or "/", safe="/~"), "",
        "".join(f"{name}:{signed[name]}\n" for name in names), ";".join(names),
        hashlib.sha256(body).hexdigest()])
    scope = f"{stamp[:8]}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{credentials.secret_key}".encode(), stamp[:8]),
                            region), service), "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    # The Host sent is the one signed (http.client would drop a default port the URL names).
    out = {**headers, "Host": parts.netloc, "X-Amz-Date": stamp,
           "Authorization": (f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
                             f"SignedHeaders={';'.join(names)}, Signature={signature}")}
    if credentials.token:
        out["X-Amz-Security-Token"] = credentials.token
    return out


# --- where a service is ------------------------------------------------------------------------

def region_from_env(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if not region:
        raise ConfigError("no AWS region: set AWS_REGION (Lambda sets it)")
    return region


def endpoint_url(service_id: str, prefix: str, region: str,
                 env: Mapping[str, str] | None = None) -> str:
    """``AWS_ENDPOINT_URL_<SERVICE>``, then ``AWS_ENDPOINT_URL`` (moto's server on one
    machine), then the service's regional endpoint: the order boto3 follows."""
    env = os.environ if env is None else env
    own = env.get("AWS_ENDPOINT_URL_" + service_id.upper().replace(" ", "_"))
    url = own or env.get("AWS_ENDPOINT_URL")
    if url:
        return url.rstrip("/")
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"https://{prefix}.{region}.{suffix}"


# --- connections -------------------------------------------------------------------------------

_tls: Any = None
_tls_lock = threading.Lock()


def _tls_context() -> Any:
    """One TLS context per process (loading the CA store is the costly part), made on the
    first HTTPS call; ``AWS_CA_BUNDLE`` names other CAs, as it does for boto3."""
    global _tls
    with _tls_lock:
        if _tls is None:
            import ssl

            _tls = ssl.create_default_context(cafile=os.environ.get("AWS_CA_BUNDLE") or None)
        return _tls


class _Pool:
    """Idle keep-alive connections to one endpoint, at most ``limits.pool`` kept, none
    reused after ``limits.max_idle_seconds`` idle by ``monotonic`` (a machine clock, not the
    service's business clock: idle age is about sockets, and tests move it)."""

    def __init__(self, url: str, limits: Limits,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"AWS endpoint must be an http(s) URL, got {url!r}")
        self.https = parts.scheme == "https"
        self.host, self.port = parts.hostname, parts.port
        self.limits = limits
        self._monotonic = monotonic
        # (connection, when it was given back), the most recently given back last
        self._idle: list[tuple[http.client.HTTPConnection, float]] = []
        self._lock = threading.Lock()

    def take(self, *, fresh: bool = False) -> tuple[http.client.HTTPConnection, bool]:
        """A connection, and whether it was used before (it may have been closed since). A
        kept one with anything to read while it sat idle (the other end closed it, or said
        something before it did, such as a 408) is closed, never sent on: what it holds would
        be read as the next request's answer. So is one idle too long (see :class:`Limits`),
        with every one kept before it."""
        while not fresh:
            with self._lock:
                # The idle list is in the order connections were given back: the ones idle
                # too long are at its front.
                cutoff = self._monotonic() - self.limits.max_idle_seconds
                old = next((i for i, (_, since) in enumerate(self._idle) if since >= cutoff),
                           len(self._idle))
                stale, self._idle = self._idle[:old], self._idle[old:]
                kept = self._idle.pop()[0] if self._idle else None
            for idle, _ in stale:
                idle.close()
            if kept is None:
                break
            if not _readable(kept):
                return kept, True
            kept.close()
        timeout = self.limits.connect_timeout
        conn: http.client.HTTPConnection
        if self.https:
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                               context=_tls_context())
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        conn.connect()
        if conn.sock is not None:
            conn.sock.settimeout(self.limits.read_timeout)
        return conn, False

    def give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self.limits.pool:
                self._idle.append((conn, self._monotonic()))
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn, _ in idle:
            conn.close()


def _readable(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle connection has bytes or an end of stream waiting (urllib3's check
    before it reuses a connection)."""
    sock = conn.sock
    if sock is None:
        return True
    pending = getattr(sock, "pending", None)  # TLS: bytes already decrypted
    if pending is not None and pending():
        return True
    try:
        if hasattr(select, "poll"):
            poll = select.poll()
            poll.register(sock, select.POLLIN)
            return bool(poll.poll(0))
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes


class Service:
    """One AWS service at one endpoint: signs, sends, retries. ``credentials`` is read on
    every call (Lambda may hand a process new ones); ``monotonic`` measures how long a kept
    connection has been idle."""

    def __init__(self, service: str, endpoint: str, region: str, limits: Limits,
                 credentials: Callable[[], Credentials | None] = env_credentials,
                 sleep: Callable[[float], None] = time.sleep,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC),
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        if limits.attempts < 1:
            raise ConfigError(f"AWS call attempts must be at least 1, got {limits.attempts}")
        if not limits.max_idle_seconds > 0:
            raise ConfigError("AWS connections' max_idle_seconds must be more than 0, got "
                              f"{limits.max_idle_seconds}")
        self.service, self.endpoint, self.region = service, endpoint, region
        self.limits = limits
        self._pool = _Pool(endpoint, limits, monotonic)
        self._credentials = credentials
        self._sleep = sleep
        # AWS compares a signature's time with its own clock (five minutes either way), so a
        # request is signed at the machine's time, never at the service's injected clock.
        self._now = now
        self._rng = random.Random()

    def send(self, operation: str, method: str, path: str, headers: dict[str, str],
             body: bytes, error: Callable[[Answer], AwsError]) -> Answer:
        """The answer to a 2xx; :class:`AwsError` for anything else, after the retries."""
        attempt = 0
        while True:
            attempt += 1
            try:
                answer = self._once(method, path, headers, body)
            except CONNECTION_ERRORS as exc:
                failure = AwsError(operation, type(exc).__name__,
                                   f"could not reach {self.endpoint}: {exc}", 0)
            else:
                if 200 <= answer.status < 300:
                    return answer
                failure = error(answer)
            if not (failure.status == 0 or failure.retryable) or attempt >= self.limits.attempts:
                raise failure
            self._sleep(self._rng.random() * min(MAX_BACKOFF_SECONDS, 2.0 ** (attempt - 1)))

    def _once(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Answer:
        credentials = self._credentials()
        if credentials is None:
            raise ConfigError("no AWS credentials in the environment (AWS_ACCESS_KEY_ID and "
                              "AWS_SECRET_ACCESS_KEY)")
        url = self.endpoint + path
        signed = sign(method, url, {**headers, "Content-Length": str(len(body))}, body,
                      service=self.service, region=self.region, credentials=credentials,
                      now=self._now())
        signed["User-Agent"] = USER_AGENT  # not signed, as botocore leaves it out too
        conn, reused = self._pool.take()
        try:
            response = self._ask(conn, method, url, signed, body)
        except CONNECTION_ERRORS as exc:
            conn.close()
            if not (reused and isinstance(exc, DROPPED)):
                raise
            # A kept connection the other end closed while it was idle, before any answer
            # began: once more on a new one, without counting it as an attempt.
            conn, _ = self._pool.take(fresh=True)
            try:
                response = self._ask(conn, method, url, signed, body)
            except CONNECTION_ERRORS:
                conn.close()
                raise
        try:
            # An answer cut short here is a failed attempt: the server had the request.
            data = response.read()
        except CONNECTION_ERRORS:
            conn.close()
            raise
        answer = Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, data)
        if response.will_close:
            conn.close()
        else:
            self._pool.give_back(conn)
        return answer

    @staticmethod
    def _ask(conn: http.client.HTTPConnection, method: str, url: str,
             headers: dict[str, str], body: bytes) -> http.client.HTTPResponse:
        """The request sent, and the answer's status line and headers read."""
        conn.request(method, urlsplit(url).path or "/", body=body, headers=headers)
        return conn.getresponse()

    def close(self) -> None:
        self._pool.close()


def _json_error(operation: str) -> Callable[[Answer], AwsError]:
    """The code and message of a JSON-protocol error: SQS's query-compatible code when it
    gives one (what boto3 reports), else the ``__type`` after its namespace."""

    def parse(answer: Answer) -> AwsError:
        try:
            data = json.loads(answer.body or b"{}")
        except ValueError:
            data = {}
        if not isinstance(data, dict):
            data = {}
        # botocore's order: SQS's query-compatible code, then the error-type header (what
        # Lambda's REST API sets; its body's "Type" is only "User" or "Service"), then the
        # body's __type or code.
        query_code = answer.headers.get("x-amzn-query-error", "").partition(";")[0]
        kind = (answer.headers.get("x-amzn-errortype", "").partition(":")[0]
                or str(data.get("__type") or data.get("code") or ""))
        code = query_code or kind.rpartition("#")[2] or f"HTTP{answer.status}"
        message = str(data.get("message") or data.get("Message") or "")
        return AwsError(operation, code, message, answer.status)

    return parse


class JsonClient:
    """A service speaking AWS's JSON protocol: every call a POST of its arguments to ``/``,
    the operation named in ``X-Amz-Target``. A ``query_compatible`` service (SQS, which spoke
    the query protocol first) is sent ``x-amzn-query-mode: true``, signed, as botocore sends
    it: it then answers an error with its query code in ``x-amzn-query-error``
    (``AWS.SimpleQueueService.NonExistentQueue``), the code boto3 reports."""

    def __init__(self, service: Service, target_prefix: str, json_version: str,
                 *, query_compatible: bool = False) -> None:
        self.service = service
        self._prefix = target_prefix
        self._headers = {"Content-Type": f"application/x-amz-json-{json_version}"}
        if query_compatible:
            self._headers["x-amzn-query-mode"] = "true"

    def call(self, operation: str, params: Mapping[str, Any]) -> dict[str, Any]:
        body = json.dumps(params, separators=(",", ":")).encode()
        answer = self.service.send(operation, "POST", "/", {
            **self._headers, "X-Amz-Target": f"{self._prefix}.{operation}"},
            body, _json_error(operation))
        try:
            data = json.loads(answer.body or b"{}")
        except ValueError:  # not JSON, or not UTF-8
            data = None
        if not isinstance(data, dict):
            raise AwsError(operation, "MalformedAnswer",
                           f"not a JSON object: {answer.body[:80]!r}", answer.status)
        return data

    def close(self) -> None:
        self.service.close()


# --- the clients, with boto3's method names ----------------------------------------------------

class _Closable:
    """``close()``, as a boto3 client has: its kept connections closed (a later call opens
    new ones)."""

    _c: JsonClient

    def close(self) -> None:
        self._c.close()


class SqsClient(_Closable):
    def __init__(self, json_client: JsonClient) -> None:
        self._c = json_client

    def send_message_batch(self, *, QueueUrl: str, Entries: list[dict[str, Any]]
                           ) -> dict[str, Any]:
        return self._c.call("SendMessageBatch", {"QueueUrl": QueueUrl, "Entries": Entries})

    def send_message(self, *, QueueUrl: str, MessageBody: str, **more: Any) -> dict[str, Any]:
        return self._c.call("SendMessage", {"QueueUrl": QueueUrl, "MessageBody": MessageBody,
                                            **more})

    def get_queue_attributes(self, *, QueueUrl: str, AttributeNames: list[str]
                             ) -> dict[str, Any]:
        answer = self._c.call("GetQueueAttributes", {"QueueUrl": QueueUrl,
                                                     "AttributeNames": AttributeNames})
        return {"Attributes": answer.get("Attributes") or {}}

    def receive_message(self, *, QueueUrl: str, **more: Any) -> dict[str, Any]:
        return self._c.call("ReceiveMessage", {"QueueUrl": QueueUrl, **more})

    def delete_message_batch(self, *, QueueUrl: str, Entries: list[dict[str, Any]]
                             ) -> dict[str, Any]:
        return self._c.call("DeleteMessageBatch", {"QueueUrl": QueueUrl, "Entries": Entries})


class SecretsManagerClient(_Closable):
    def __init__(self, json_client: JsonClient) -> None:
        self._c = json_client

    def get_secret_value(self, *, SecretId: str) -> dict[str, Any]:
        return self._c.call("GetSecretValue", {"SecretId": SecretId})


class KmsClient(_Closable):
    """Blobs travel base64-encoded in JSON; boto3 hands them over as bytes, and so does this."""

    def __init__(self, json_client: JsonClient) -> None:
        self._c = json_client

    def generate_data_key(self, *, KeyId: str, KeySpec: str,
                          EncryptionContext: dict[str, str]) -> dict[str, Any]:
        answer = self._c.call("GenerateDataKey", {"KeyId": KeyId, "KeySpec": KeySpec,
                                                  "EncryptionContext": EncryptionContext})
        return {**answer, "Plaintext": base64.b64decode(answer["Plaintext"]),
                "CiphertextBlob": base64.b64decode(answer["CiphertextBlob"])}

    def decrypt(self, *, CiphertextBlob: bytes, KeyId: str,
                EncryptionContext: dict[str, str]) -> dict[str, Any]:
        answer = self._c.call("Decrypt", {
            "CiphertextBlob": base64.b64encode(CiphertextBlob).decode("ascii"),
            "KeyId": KeyId, "EncryptionContext": EncryptionContext})
        return {**answer, "Plaintext": base64.b64decode(answer["Plaintext"])}


class LambdaClient:
    """Invoke only: a POST of the payload to the function's invocations path."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def close(self) -> None:
        self.service.close()

    def invoke(self, *, FunctionName: str, InvocationType: str = "RequestResponse",
               Payload: bytes = b"") -> dict[str, Any]:
        path = f"/2015-03-31/functions/{quote(FunctionName, safe='')}/invocations"
        answer = self.service.send("Invoke", "POST", path, {
            "Content-Type": "application/octet-stream",
            "X-Amz-Invocation-Type": InvocationType}, Payload, _json_error("Invoke"))
        out: dict[str, Any] = {"StatusCode": answer.status, "Payload": _Body(answer.body)}
        if "x-amz-function-error" in answer.headers:
            out["FunctionError"] = answer.headers["x-amz-function-error"]
        return out


class _Body:
    """What boto3 gives as an answer's payload: something with ``read()``."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def read(self) -> bytes:
        return self._data


# service name -> (endpoint service id, endpoint prefix, signing name, JSON target, version,
# query compatible: botocore's model says awsQueryCompatible)
_JSON_SERVICES = {
    "sqs": ("SQS", "sqs", "sqs", "AmazonSQS", "1.0", True),
    "secretsmanager": ("Secrets Manager", "secretsmanager", "secretsmanager", "secretsmanager",
                       "1.1", False),
    "kms": ("KMS", "kms", "kms", "TrentService", "1.1", False),
}
SERVICES = frozenset({*_JSON_SERVICES, "lambda"})


def client(service: str, limits: Limits, env: Mapping[str, str] | None = None,
           credentials: Callable[[], Credentials | None] = env_credentials) -> Any:
    """A client for one of :data:`SERVICES`, with boto3's method names; ``env`` gives the
    region and endpoint (the process's environment by default)."""
    region = region_from_env(env)
    if service == "lambda":
        return LambdaClient(Service("lambda", endpoint_url("Lambda", "lambda", region, env),
                                    region, limits, credentials))
    if service not in _JSON_SERVICES:
        raise ConfigError(f"no lean client for {service!r}; use boto3")
    service_id, prefix, signing, target, version, query_compatible = _JSON_SERVICES[service]
    json_client = JsonClient(Service(signing, endpoint_url(service_id, prefix, region, env),
                                     region, limits, credentials), target, version,
                             query_compatible=query_compatible)
    makers: dict[str, Callable[[JsonClient], Any]] = {
        "sqs": SqsClient, "secretsmanager": SecretsManagerClient, "kms": KmsClient}
    return makers[service](json_client)
