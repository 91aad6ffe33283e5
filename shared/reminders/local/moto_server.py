"""moto in server mode (AWS APIs over HTTP on loopback), as strict about who calls as AWS.

Every request must carry a valid SigV4 signature (else ``SignatureDoesNotMatch``, or
``InvalidClientTokenId`` for an unknown key) and be allowed by the caller's IAM policies (else
``AccessDenied``): moto's access control is on from the first request, with no unauthenticated
requests at all. The one principal that exists at start is an administrator IAM user, made in
this process before it serves; its access key is written to ``--credentials`` (mode 0600), and
whoever starts the server sets up queues, keys, identities and the functions' roles with it.
moto's own API (``/moto-api/...``: ``data.json`` shows every backend's state, the
administrator's secret key among it; ``reset-auth`` and ``reset`` would open the door again or
forget the administrator) answers no one. ``GET HEALTH_PATH`` says the server is up.

moto checks a statement's Resource only against what the request names; for the services the
functions call it knows the resource of SQS requests alone, and would match every other request
against "*" (so a policy scoped to a key would deny what AWS allows). The resolvers below name
the resource of the KMS, SES v2, Secrets Manager and CloudFormation (the operator's
``DescribeStacks``) requests as AWS authorizes them.

moto has no SQS message move tasks; reminders.local.message_moves adds them (the console's
dead-letter queue redrive: StartMessageMoveTask, ListMessageMoveTasks, CancelMessageMoveTask),
as strictly as SQS runs them.

werkzeug writes a response's headers and body in separate small writes; with Nagle on, each
waits for the client's delayed ACK (~40 ms a call). ``python -m reminders.local.moto_server
--port N --credentials FILE`` serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterable
from email.utils import parseaddr
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import parse_qs

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

from reminders.local import message_moves

ACCOUNT = "123456789012"  # moto's default account, where every key below is made
ADMINISTRATOR = "reminders-local-admin"
ADMINISTRATOR_POLICY = {"Version": "2012-10-17", "Statement": [
    {"Sid": "SetUpTheLocalStack", "Effect": "Allow", "Action": "*", "Resource": "*"}]}
# moto's API, unauthenticated: its state (data.json, the administrator's secret in it), the
# calls that would turn access control off or forget the administrator, and the rest.
REFUSED_MOTO_API = "/moto-api"
CALLS_PATH = "/_reminders/decisions"
HEALTH_PATH = "/_reminders/health"  # what a probe asks (it reveals nothing)
# Each queue's oldest message's SentTimestamp: the twin's CloudWatch stand-in computes
# ApproximateAgeOfOldestMessage from it (SQS has no attribute for it, and receiving a message
# to look would change its receive count). It reveals queue names and ages, no content.
OLDEST_PATH = "/_reminders/sqs-oldest"
# The operations AWS authorizes as another action (moto would look for a permission named
# after the operation itself, which no policy grants).
AUTHORIZED_AS = {"sqs:SendMessageBatch": "SendMessage", "sqs:DeleteMessageBatch": "DeleteMessage",
                 "sqs:ChangeMessageVisibilityBatch": "ChangeMessageVisibility"}
DECISIONS: list[dict[str, str]] = []
# The SES stand-in's own count of e-mails it accepted (what pacing is measured by) and a
# provider throttle a test turns on and off: ``GET SES_PATH`` answers {"sent", "throttled",
# "throttling"}; ``POST SES_PATH`` with {"throttle": true|false} turns throttling on or off.
# While on, every SendEmail that IAM allows is answered as SES answers one over the account's
# maximum sending rate (429 TooManyRequestsException), and nothing is sent.
SES_PATH = "/_reminders/ses"
SES_SEND_PATH = "/v2/email/outbound-emails"
SES_STATE = {"sent": 0, "throttled": 0, "throttling": False}
_SES_COUNTING = threading.Lock()  # the server answers each request on a thread of its own


class _NoDelayHandler(MotoRequestHandler):
    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_request(self, *args: object, **kwargs: object) -> None:
        return None


def presigned_as_signed(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """moto routes a request by its Authorization header, so a presigned one (its signature in
    the query, as the operations function's identity proof is) would reach S3. Give such a
    request the header its query stands for. With access control on, moto then checks it as
    if it were signed in its headers, which a presigned request is not (it fails for want of
    an X-Amz-Date header): identity proofs need a stand-in that checks presigned requests."""

    def route(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        query = parse_qs(environ.get("QUERY_STRING", ""))
        credential = query.get("X-Amz-Credential", [""])[0]
        if credential and "HTTP_AUTHORIZATION" not in environ:
            environ["HTTP_AUTHORIZATION"] = (
                f"AWS4-HMAC-SHA256 Credential={credential}, "
                f"SignedHeaders={query.get('X-Amz-SignedHeaders', [''])[0]}, "
                f"Signature={query.get('X-Amz-Signature', [''])[0]}")
        return app(environ, start_response)

    return route


def refuse_open_doors(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """Answer 403 to moto's own API (REFUSED_MOTO_API); ``GET CALLS_PATH`` answers the
    authorization decisions taken so far (:func:`record`), ``GET HEALTH_PATH`` that it is up,
    ``GET OLDEST_PATH`` each queue's oldest message's SentTimestamp."""

    def route(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "").rstrip("/")
        if path == REFUSED_MOTO_API or path.startswith(f"{REFUSED_MOTO_API}/"):
            start_response("403 Forbidden", [("Content-Type", "text/plain")])
            return [b"access control stays on in the reminders local stack\n"]
        if path == HEALTH_PATH and environ.get("REQUEST_METHOD") in ("GET", "HEAD"):
            start_response("200 OK", [("Content-Type", "application/json")])
            return [b'{"status": "ok"}']
        if path == CALLS_PATH and environ.get("REQUEST_METHOD") == "GET":
            # ``?since=N``: the decisions from the N-th on, with how many there are in all
            # (a caller asks for what is new, never for a list that grows with the server).
            since = parse_qs(environ.get("QUERY_STRING", "")).get("since", ["0"])[0]
            start = int(since) if since.isdigit() else 0
            taken = list(DECISIONS)
            start_response("200 OK", [("Content-Type", "application/json")])
            return [json.dumps({"count": len(taken), "decisions": taken[start:]}).encode()]
        if path == SES_PATH:
            return _ses_control(environ, start_response)
        if path == SES_SEND_PATH and environ.get("REQUEST_METHOD") == "POST":
            return _ses_send(app, environ, start_response)
        if path == OLDEST_PATH and environ.get("REQUEST_METHOD") == "GET":
            start_response("200 OK", [("Content-Type", "application/json")])
            return [json.dumps(oldest_messages()).encode()]
        if "HTTP_X_AMZ_TARGET" not in environ and \
                "json" not in environ.get("CONTENT_TYPE", ""):
            return app(environ, start_response)
        return _json_refusals(app, environ, start_response)

    return route


def _ses_control(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    if environ.get("REQUEST_METHOD") == "POST":
        size = int(environ.get("CONTENT_LENGTH") or 0)
        asked = json.loads(environ["wsgi.input"].read(size) or b"{}")
        SES_STATE["throttling"] = bool(asked.get("throttle"))
    start_response("200 OK", [("Content-Type", "application/json")])
    return [json.dumps(SES_STATE).encode()]


def _ses_send(app: Callable[..., Iterable[bytes]], environ: dict[str, Any],
              start_response: Any) -> Iterable[bytes]:
    """SendEmail, counted; throttled (after IAM allowed it, as AWS decides) while a test
    says so."""
    held: list[Any] = []

    def hold(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        held[:] = [status, headers, exc_info]
        return lambda data: None

    body = b"".join(_json_refusals(app, environ, hold))
    status, headers, exc_info = held
    if status.startswith("200") and SES_STATE["throttling"]:
        with _SES_COUNTING:
            SES_STATE["throttled"] += 1
        body = json.dumps({"message": "Maximum sending rate exceeded."}).encode()
        start_response("429 Too Many Requests", [
            ("Content-Type", "application/json"), ("Content-Length", str(len(body))),
            ("x-amzn-ErrorType", "TooManyRequestsException")])
        return [body]
    if status.startswith("200"):
        with _SES_COUNTING:
            SES_STATE["sent"] += 1
    start_response(status, headers, exc_info)
    return [body]


def oldest_messages() -> dict[str, int | None]:
    """Each queue of the account's oldest non-deleted message's SentTimestamp (milliseconds;
    in flight and delayed ones included, as CloudWatch's ApproximateAgeOfOldestMessage counts
    them), None for an empty queue; by queue name, every region."""
    from moto.sqs.models import sqs_backends

    found: dict[str, int | None] = {}
    for backend in sqs_backends[ACCOUNT].values():
        for name, queue in backend.queues.items():
            sent = (getattr(m, "sent_timestamp", None) for m in list(queue._messages))
            stamps = [int(stamp) for stamp in sent if stamp is not None]
            found[name] = min(stamps) if stamps else None
    return found


def _json_refusals(app: Callable[..., Iterable[bytes]], environ: dict[str, Any],
                   start_response: Any) -> Iterable[bytes]:
    """moto answers an authentication or authorization refusal in XML whatever the protocol;
    AWS answers a JSON request (X-Amz-Target, or REST with a JSON body: SES v2) in JSON, with
    the code in __type and in x-amzn-ErrorType."""
    held: list[Any] = []

    def hold(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        held[:] = [status, headers, exc_info]
        return lambda data: None

    body = b"".join(app(environ, hold))
    status, headers, exc_info = held
    code = re.search(rb"<Code>([^<]+)</Code>", body) if status.startswith("403") else None
    if code is not None:
        message = re.search(rb"<Message>([^<]*)</Message>", body)
        body = json.dumps({"__type": code.group(1).decode(),
                           "message": message.group(1).decode() if message else ""}).encode()
        headers = [(k, v) for k, v in headers if k.lower() not in ("content-type",
                                                                   "content-length",
                                                                   "x-amzn-errortype")]
        headers += [("Content-Type", "application/x-amz-json-1.0"),
                    ("Content-Length", str(len(body))),
                    ("x-amzn-ErrorType", code.group(1).decode())]
    start_response(status, headers, exc_info)
    return [body]


def record() -> None:
    """Keep every authorization decision moto takes: who (the access key), which action,
    on which resource, and the outcome ("allowed", or the error's code)."""
    from moto.core.authorization import ActionAuthenticatorMixin

    decide = ActionAuthenticatorMixin._authenticate_and_authorize_action

    def recorded(self: Any, iam_request_cls: type, resource: str = "*") -> None:
        authorization = next((str(v) for k, v in self.headers.items()
                              if k.lower() == "authorization"), "")
        scope = authorization.partition("Credential=")[2].partition(",")[0].split("/")
        service = scope[3] if len(scope) > 3 else "?"
        operation = self._get_action()
        # A check of another action than the operation's own (message_moves: a move task's
        # reads of its source) names it on the class.
        name = getattr(iam_request_cls, "action_name", None) or \
            AUTHORIZED_AS.get(f"{service}:{operation}", operation)

        class AsAws(iam_request_cls):  # type: ignore[misc]
            def __init__(self, **kwargs: Any) -> None:
                super().__init__(**{**kwargs, "action": name})

        entry = {"key": scope[0], "action": f"{service}:{name}", "resource": resource}
        try:
            decide(self, AsAws, resource)
        except Exception as exc:
            code = str(getattr(exc, "error_type", type(exc).__name__))
            DECISIONS.append({**entry, "outcome": code})
            raise
        DECISIONS.append({**entry, "outcome": "allowed"})

    ActionAuthenticatorMixin._authenticate_and_authorize_action = recorded  # type: ignore[method-assign]


def _kms_resource(response: Any) -> str:
    """The ARN of the key a KMS request names (by id, ARN or alias), else "*"."""
    try:
        key_id = json.loads(response.body or "{}").get("KeyId")
        if not key_id:
            return "*"
        backend = response.kms_backend
        return str(backend.keys[backend.any_id_to_key_id(key_id)].arn)
    except Exception:  # noqa: BLE001 (an unknown key: the call itself answers NotFound)
        return "*"


def _sesv2_resource(response: Any) -> str:
    """The identity SES authorizes a SendEmail against: the From address's own identity if
    it is one, else its domain's (verified or not: authorization comes first)."""
    try:
        source = json.loads(response.body or "{}").get("FromEmailAddress") or ""
    except ValueError:
        return "*"
    address = parseaddr(source)[1]
    identities = response.sesv2_backend.core_backend.email_identities
    identity = address if address in identities else address.rpartition("@")[2]
    if not identity:
        return "*"
    return f"arn:aws:ses:{response.region}:{response.current_account}:identity/{identity}"


def _secretsmanager_resource(response: Any) -> str:
    """The ARN of the secret a Secrets Manager request names (by name or ARN), else "*"."""
    try:
        secret_id = json.loads(response.body or "{}").get("SecretId")
        if not secret_id:
            return "*"
        return str(response.backend.describe_secret(secret_id).arn)
    except Exception:  # noqa: BLE001 (an unknown secret: the call answers NotFound)
        return "*"


def _cloudformation_resource(response: Any) -> str:
    """The stack a CloudFormation request names: its stack ARN if it exists, else the ARN
    pattern AWS authorizes a name against (``stack/NAME/*``); "*" when it names none."""
    name = response._get_param("StackName")
    if not name:
        return "*"
    for found in response.cloudformation_backend.stacks.values():
        if name in (found.name, found.stack_id):
            return str(found.stack_id)
    if name.startswith("arn:"):
        return str(name)
    return f"arn:aws:cloudformation:{response.region}:{response.current_account}:stack/{name}/*"


def resolve_resources() -> None:
    """Give moto's KMS, SES v2, Secrets Manager and CloudFormation responses the resource of
    each request."""
    from moto.cloudformation.responses import CloudFormationResponse
    from moto.kms.responses import KmsResponse
    from moto.secretsmanager.responses import SecretsManagerResponse
    from moto.sesv2.responses import SESV2Response

    KmsResponse._determine_resource = _kms_resource  # type: ignore[attr-defined]
    SESV2Response._determine_resource = _sesv2_resource  # type: ignore[attr-defined]
    SecretsManagerResponse._determine_resource = (  # type: ignore[attr-defined]
        _secretsmanager_resource)
    CloudFormationResponse._determine_resource = (  # type: ignore[attr-defined]
        _cloudformation_resource)


def enforce_access_control(credentials_file: Path) -> None:
    """Access control on from the first request; the administrator made in this process, its
    access key written to ``credentials_file``."""
    from moto import settings
    from moto.core.authorization import ActionAuthenticatorMixin
    from moto.iam.models import iam_backends

    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
    ActionAuthenticatorMixin.request_count = 0
    iam = iam_backends[ACCOUNT]["aws"]
    user = iam.create_user("global", ADMINISTRATOR)
    iam.put_user_policy(ADMINISTRATOR, "administrator", json.dumps(ADMINISTRATOR_POLICY))
    key = iam.create_access_key(ADMINISTRATOR)
    resolve_resources()
    message_moves.install()
    record()
    credentials_file.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(credentials_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        json.dump({"access_key": key.access_key_id, "secret_key": key.secret_access_key,
                   "arn": user.arn, "account": ACCOUNT}, out)


# The REST services the functions call here (SES's SendEmail, Lambda's Invoke, S3), whose
# requests moto routes by their path.
REST_SERVICES = ("sesv2", "lambda", "s3")


def build_rest_routing() -> None:
    """Build moto's operation models of the REST services before the first request. moto
    builds them on a service's first request, and botocore's model and moto's are cached under
    one key: two requests building them at once (four consumers' first e-mails) can find
    botocore's where moto's belongs and fail in routing ("'OperationModel' object has no
    attribute 'http_trait'", an AttributeError taken for a refusal)."""
    from moto.core.routing import get_service_router

    for name in REST_SERVICES:
        model = get_service_router(name)._service_model
        for operation in model.operation_names:
            model.operation_model(operation)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reminders-moto")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--credentials", type=Path, required=True,
                        help="where the administrator's access key is written (JSON)")
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    enforce_access_control(args.credentials)
    build_rest_routing()
    app = refuse_open_doors(presigned_as_signed(
        DomainDispatcherApplication(create_backend_app)))
    server = make_server(args.host, args.port, app, threaded=True,
                         request_handler=_NoDelayHandler)

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    print(f"http://{args.host}:{args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
