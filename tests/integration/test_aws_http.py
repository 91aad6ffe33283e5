"""The SigV4 clients the Lambda functions call AWS through (reminders.aws_http): signatures equal
botocore's, answers and error codes equal boto3's against moto's server over HTTP, retries and
kept connections against a real HTTP server that fails on command, and no boto3 at cold start."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from reminders import aws_http
from reminders.aws_http import AwsError, Credentials, Limits
from reminders.local import stack

NOW = datetime(2026, 12, 1, 9, 30, 15, tzinfo=UTC)
CREDS = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "session//token=")


def botocore_authorization(method: str, url: str, headers: dict[str, str], body: bytes,
                           service: str, region: str, creds: Credentials,
                           at: datetime = NOW) -> dict[str, str]:
    """What botocore's own SigV4 signer puts on the same request at the same instant."""
    from unittest import mock

    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials as BotoCredentials

    request = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
    # botocore reads the time itself; it is given the test's instant.
    with mock.patch("botocore.auth.get_current_datetime", return_value=at.replace(tzinfo=None)):
        SigV4Auth(BotoCredentials(creds.access_key, creds.secret_key, creds.token),
                  service, region).add_auth(request)
    return {k: v for k, v in request.headers.items()}


@pytest.mark.parametrize(("service", "url", "headers", "body"), [
    ("sqs", "https://sqs.eu-west-1.amazonaws.com/",
     {"Content-Type": "application/x-amz-json-1.0", "x-amzn-query-mode": "true",
      "X-Amz-Target": "AmazonSQS.SendMessageBatch"}, b'{"QueueUrl":"q","Entries":[]}'),
    # An ARN in the path: percent-encoded once in the URL, once more when signed.
    ("lambda", "https://lambda.eu-west-1.amazonaws.com/2015-03-31/functions/"
     "arn%3Aaws%3Alambda%3Aeu-west-1%3A123456789012%3Afunction%3Apublisher/invocations",
     {"Content-Type": "application/octet-stream", "X-Amz-Invocation-Type": "Event"},
     b'[{"delivery_id": 1}]'),
])
def test_the_signature_is_botocores(service: str, url: str, headers: dict[str, str],
                                    body: bytes) -> None:
    ours = aws_http.sign("POST", url, headers, body, service=service, region="eu-west-1",
                         credentials=CREDS, now=NOW)
    theirs = botocore_authorization("POST", url, headers, body, service, "eu-west-1", CREDS)
    assert ours["X-Amz-Date"] == theirs["X-Amz-Date"] == "20261201T093015Z"
    assert ours["X-Amz-Security-Token"] == theirs["X-Amz-Security-Token"]
    assert ours["Authorization"] == theirs["Authorization"]


def test_the_host_sent_is_the_host_signed(scripted: Any) -> None:
    """An endpoint that names its default port: http.client alone would send the Host without
    it, and AWS would compute another signature."""
    port = scripted.server_address[1]
    signed = aws_http.sign("POST", f"http://127.0.0.1:{port}/", {}, b"", service="sqs",
                           region="us-east-1", credentials=CREDS, now=NOW)
    assert signed["Host"] == f"127.0.0.1:{port}"
    https = aws_http.sign("POST", "https://sqs.eu-west-1.amazonaws.com:443/", {}, b"",
                          service="sqs", region="eu-west-1", credentials=CREDS, now=NOW)
    assert https["Host"] == "sqs.eu-west-1.amazonaws.com:443"
    service = scripted.keep(aws_http.Service("sqs", f"http://127.0.0.1:{port}", "us-east-1",
                                             Limits(attempts=1), lambda: CREDS))
    aws_http.JsonClient(service, "AmazonSQS", "1.0").call("SendMessageBatch", {})
    assert scripted.hosts == [f"127.0.0.1:{port}"]
    assert scripted.agents == [aws_http.USER_AGENT]


def signed_names(authorization: str) -> list[str]:
    return authorization.partition("SignedHeaders=")[2].partition(",")[0].split(";")


def test_sqs_calls_send_the_query_mode_header_signed_as_botocore_signs_it(
        scripted: Any) -> None:
    """boto3 tells SQS it wants the query protocol's error codes (``x-amzn-query-mode``) and
    signs the header; the SigV4 client sends the same header, and botocore's signer, given the
    request as it arrived, computes the same signature."""
    url = f"http://127.0.0.1:{scripted.server_address[1]}"
    scripted.keep(stack.aws_client("sqs", url, credentials=CREDS)).send_message_batch(
        QueueUrl="q", Entries=[])
    sqs = scripted.keep(aws_http.client("sqs", ONE_ATTEMPT, env={"AWS_ENDPOINT_URL": url,
                                                                 "AWS_REGION": "us-east-1"},
                                        credentials=lambda: CREDS))
    sqs.send_message_batch(QueueUrl="q", Entries=[])
    boto3s, ours = ({k.lower(): v for k, v in sent.items()} for sent, _ in scripted.sent)
    assert boto3s["x-amzn-query-mode"] == ours["x-amzn-query-mode"] == "true"
    assert "x-amzn-query-mode" in signed_names(boto3s["authorization"])
    names = signed_names(ours["authorization"])
    assert "x-amzn-query-mode" in names
    given = {k: v for k, v in ours.items()
             if k in names and k not in ("host", "x-amz-date", "x-amz-security-token")}
    at = datetime.strptime(ours["x-amz-date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    theirs = botocore_authorization("POST", url + "/", given, scripted.sent[1][1], "sqs",
                                    "us-east-1", CREDS, at=at)
    assert theirs["Authorization"] == ours["authorization"]


def test_a_query_string_is_refused_rather_than_signed_wrongly() -> None:
    with pytest.raises(ValueError, match="no query string"):
        aws_http.sign("GET", "https://sqs.eu-west-1.amazonaws.com/?a=b", {}, b"",
                      service="sqs", region="eu-west-1", credentials=CREDS, now=NOW)


def test_the_endpoint_follows_boto3s_order() -> None:
    assert aws_http.endpoint_url("SQS", "sqs", "eu-west-1", {}) == \
        "https://sqs.eu-west-1.amazonaws.com"
    assert aws_http.endpoint_url("SQS", "sqs", "cn-north-1", {}) == \
        "https://sqs.cn-north-1.amazonaws.com.cn"
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:5000/",
           "AWS_ENDPOINT_URL_SECRETS_MANAGER": "http://127.0.0.1:6000"}
    assert aws_http.endpoint_url("SQS", "sqs", "eu-west-1", env) == "http://127.0.0.1:5000"
    assert aws_http.endpoint_url("Secrets Manager", "secretsmanager", "eu-west-1", env) == \
        "http://127.0.0.1:6000"


# ---------------------------------------------------------------- against moto's server


ONE_ATTEMPT = Limits(attempts=1)


@pytest.fixture
def lean(moto_endpoint: str) -> Iterator[Callable[[str], Any]]:
    """The SigV4 client for a service at moto's server (closed after the test)."""
    made: list[Any] = []

    def make(service: str) -> Any:
        made.append(stack.service_client(service, moto_endpoint, ONE_ATTEMPT))
        return made[-1]

    yield make
    for client in made:
        client.close()


def test_sqs_calls_answer_as_boto3s_do(moto_endpoint: str, lean: Callable[[str], Any]) -> None:
    boto = stack.aws_client("sqs", moto_endpoint)
    url = boto.create_queue(QueueName="aws-http-sqs")["QueueUrl"]
    sqs = lean("sqs")
    entries = [{"Id": str(i), "MessageBody": f'{{"n":{i}}}'} for i in range(10)]
    sent = sqs.send_message_batch(QueueUrl=url, Entries=entries)
    assert sorted(e["Id"] for e in sent["Successful"]) == sorted(str(i) for i in range(10))
    assert sent.get("Failed", []) == []
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
        "ApproximateNumberOfMessages"])
    assert attrs["Attributes"] == {"ApproximateNumberOfMessages": "10"}
    sqs.send_message(QueueUrl=url, MessageBody="x", MessageAttributes={
        "reason": {"DataType": "String", "StringValue": "why"}})
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0,
                              AttributeNames=["All"], MessageAttributeNames=["All"])
    assert len(got["Messages"]) == 10
    sqs.delete_message_batch(QueueUrl=url, Entries=[
        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
        for i, m in enumerate(got["Messages"])])
    left = boto.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert int(left["ApproximateNumberOfMessages"]) == 1


def test_an_sqs_error_has_the_code_boto3_reports(moto_endpoint: str,
                                                 lean: Callable[[str], Any]) -> None:
    from botocore.exceptions import ClientError

    gone = f"{moto_endpoint}/123456789012/no-such-queue"
    with pytest.raises(ClientError) as boto_error:
        stack.aws_client("sqs", moto_endpoint).get_queue_attributes(
            QueueUrl=gone, AttributeNames=["All"])
    with pytest.raises(AwsError) as ours:
        lean("sqs").get_queue_attributes(QueueUrl=gone, AttributeNames=["All"])
    assert ours.value.code == boto_error.value.response["Error"]["Code"] == \
        "AWS.SimpleQueueService.NonExistentQueue"
    assert ours.value.status == 400 and not ours.value.retryable
    assert ours.value.response["Error"]["Code"] == ours.value.code


def test_secrets_manager_and_kms_round_trip(moto_endpoint: str, lean: Callable[[str], Any]) -> None:
    secret = stack.aws_client("secretsmanager", moto_endpoint).create_secret(
        Name="aws-http-db", SecretString=json.dumps({"username": "u", "password": "p/ss"}))
    value = lean("secretsmanager").get_secret_value(SecretId=secret["ARN"])
    assert json.loads(value["SecretString"]) == {"username": "u", "password": "p/ss"}

    key = stack.create_secrets_key(moto_endpoint)
    kms = lean("kms")
    context = {"purpose": "test"}
    made = kms.generate_data_key(KeyId=key, KeySpec="AES_256", EncryptionContext=context)
    assert isinstance(made["Plaintext"], bytes) and len(made["Plaintext"]) == 32
    opened = kms.decrypt(CiphertextBlob=made["CiphertextBlob"], KeyId=key,
                         EncryptionContext=context)
    assert opened["Plaintext"] == made["Plaintext"]
    # boto3 opens what the SigV4 client sealed: the blobs travel the same way.
    boto_opened = stack.aws_client("kms", moto_endpoint).decrypt(
        CiphertextBlob=made["CiphertextBlob"], KeyId=key, EncryptionContext=context)
    assert boto_opened["Plaintext"] == made["Plaintext"]
    with pytest.raises(AwsError) as wrong:
        kms.decrypt(CiphertextBlob=made["CiphertextBlob"], KeyId=key,
                    EncryptionContext={"purpose": "other"})
    assert wrong.value.code == "InvalidCiphertextException"


def test_invoking_a_missing_function_names_lambdas_error(lean: Callable[[str], Any]) -> None:
    with pytest.raises(AwsError) as missing:
        lean("lambda").invoke(FunctionName="no-such-publisher",
                                             InvocationType="Event", Payload=b"[]")
    assert missing.value.code == "ResourceNotFoundException"
    assert missing.value.status == 404


# ---------------------------------------------------------------- failures on command


class Scripted(BaseHTTPRequestHandler):
    """Answers each POST with the next (status, body, close[, delay]) of the server's script;
    the last one repeats."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        server: Any = self.server
        received = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with server.lock:
            server.requests.append(self.headers.get("Authorization", ""))
            server.hosts.append(self.headers.get("Host", ""))
            server.agents.append(self.headers.get("User-Agent", ""))
            server.sent.append((dict(self.headers.items()), received))
            server.peers.append(self.client_address)
            status, body, close, *delay = server.script[
                min(len(server.requests), len(server.script)) - 1]
        if delay:
            time.sleep(delay[0])
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()
        if close:  # the server drops the kept connection without saying so
            self.close_connection = True

    def log_message(self, *args: Any) -> None:
        return None


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        return None  # a client that gave up on a slow answer: expected here


@pytest.fixture
def scripted() -> Iterator[Any]:
    """The server; ``keep(client)`` hands it a client (anything with ``close()``) to close
    after the test, before the server stops."""
    server: Any = QuietServer(("127.0.0.1", 0), Scripted)
    server.lock, server.requests, server.script = threading.Lock(), [], [(200, {}, False)]
    server.hosts, server.agents, server.sent, server.peers = [], [], [], []
    kept: list[Any] = []

    def keep(client: Any) -> Any:
        kept.append(client)
        return client

    server.keep = keep
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    for client in kept:
        client.close()
    server.shutdown()
    server.server_close()


def scripted_sqs(server: Any, limits: Limits, sleeps: list[float]) -> aws_http.SqsClient:
    service = aws_http.Service("sqs", f"http://127.0.0.1:{server.server_address[1]}",
                               "us-east-1", limits, lambda: CREDS, sleep=sleeps.append)
    sqs = aws_http.SqsClient(aws_http.JsonClient(service, "AmazonSQS", "1.0"))
    server.keep(sqs)
    return sqs


THROTTLED = (400, {"__type": "com.amazonaws.sqs#RequestThrottled", "message": "slow down"},
             False)
UNAVAILABLE = (503, {"__type": "ServiceUnavailable", "message": "try later"}, False)
OK = (200, {"Successful": [{"Id": "0"}], "Failed": []}, False)


def test_throttling_and_5xx_are_retried_with_backoff_then_succeed(scripted: Any) -> None:
    scripted.script = [UNAVAILABLE, THROTTLED, OK]
    sleeps: list[float] = []
    sqs = scripted_sqs(scripted, Limits(attempts=3), sleeps)
    answer = sqs.send_message_batch(QueueUrl="q", Entries=[{"Id": "0", "MessageBody": "b"}])
    assert answer["Successful"] == [{"Id": "0"}]
    assert len(scripted.requests) == 3
    assert len(sleeps) == 2 and 0 <= sleeps[0] <= 1.0 and 0 <= sleeps[1] <= 2.0


@pytest.mark.parametrize("answer", [
    (400, {"__type": "RequestTimeout", "message": "idle too long"}, False),
    (408, {"__type": "com.amazonaws.kms#RequestTimeoutException", "message": "slow"}, False),
    (400, {"__type": "PriorRequestNotComplete", "message": "still busy"}, False),
    (429, {}, False),  # no code at all: botocore retries a 429 by its status
])
def test_botocores_transient_codes_and_a_bare_429_are_retried(scripted: Any,
                                                               answer: Any) -> None:
    scripted.script = [answer, OK]
    sleeps: list[float] = []
    sqs = scripted_sqs(scripted, Limits(attempts=2), sleeps)
    assert sqs.send_message_batch(QueueUrl="q", Entries=[])["Successful"] == [{"Id": "0"}]
    assert len(scripted.requests) == 2 and len(sleeps) == 1


def test_a_code_botocore_does_not_retry_is_not_retried(scripted: Any) -> None:
    """SQS says "slow down" with the query code RequestThrottled; a code with SQS's
    namespace in front is no throttling code botocore knows, so it gives up at once."""
    scripted.script = [(400, {"__type": "AWS.SimpleQueueService.RequestThrottled"}, False), OK]
    with pytest.raises(AwsError) as refused:
        scripted_sqs(scripted, Limits(attempts=3), []).send_message_batch(
            QueueUrl="q", Entries=[])
    assert refused.value.code == "AWS.SimpleQueueService.RequestThrottled"
    assert len(scripted.requests) == 1


def test_the_retry_rule_is_botocores_standard_mode() -> None:
    """The same lists as botocore's standard mode, and every error the calls made here model
    with a 429 (which botocore would not retry by its status alone) is a throttling code."""
    import importlib

    import botocore.session

    standard: Any = importlib.import_module("botocore.retries.standard")
    transient = standard.TransientRetryableChecker
    assert frozenset(standard.ThrottledRetryableChecker._THROTTLED_ERROR_CODES) == \
        aws_http.THROTTLING_CODES
    assert frozenset(transient._TRANSIENT_ERROR_CODES) == aws_http.TRANSIENT_CODES
    assert frozenset(transient._TRANSIENT_STATUS_CODES) == aws_http.TRANSIENT_STATUS
    assert frozenset(standard.ThrottlingStatusCodeChecker._THROTTLING_STATUS_CODES) == \
        aws_http.THROTTLING_STATUS
    session = botocore.session.get_session()
    calls = {"sqs": ["SendMessageBatch", "SendMessage", "GetQueueAttributes",
                     "ReceiveMessage", "DeleteMessageBatch"],
             "secretsmanager": ["GetSecretValue"], "kms": ["GenerateDataKey", "Decrypt"],
             "lambda": ["Invoke"]}
    for service, operations in calls.items():
        model = session.get_service_model(service)
        for operation in operations:
            for shape in model.operation_model(operation).error_shapes:
                assert shape.metadata.get("retryable") is None, (operation, shape.name)
                if shape.metadata.get("error", {}).get("httpStatusCode") == 429:
                    code = shape.metadata["error"].get("code") or shape.name
                    assert code in aws_http.THROTTLING_CODES, (operation, code)


def test_the_attempts_are_bounded(scripted: Any) -> None:
    scripted.script = [UNAVAILABLE]
    sleeps: list[float] = []
    with pytest.raises(AwsError) as failed:
        scripted_sqs(scripted, Limits(attempts=2), sleeps).send_message_batch(
            QueueUrl="q", Entries=[])
    assert (failed.value.status, failed.value.code) == (503, "ServiceUnavailable")
    assert len(scripted.requests) == 2 and len(sleeps) == 1


def test_a_refusal_that_is_not_throttling_is_not_retried(scripted: Any) -> None:
    scripted.script = [(400, {"__type": "com.amazonaws.sqs#InvalidParameterValue",
                              "message": "bad entry"}, False)]
    with pytest.raises(AwsError) as refused:
        scripted_sqs(scripted, Limits(attempts=3), []).send_message_batch(
            QueueUrl="q", Entries=[])
    assert (refused.value.code, refused.value.message) == ("InvalidParameterValue", "bad entry")
    assert len(scripted.requests) == 1


def test_a_kept_connection_the_server_closed_is_replaced_without_spending_an_attempt(
        scripted: Any) -> None:
    # The first answer keeps the connection; the server then closes it after the second.
    scripted.script = [OK, (200, {"Successful": [], "Failed": []}, True), OK]
    sqs = scripted_sqs(scripted, Limits(attempts=1), [])
    for _ in range(3):  # the third call finds the kept connection closed, and reconnects
        time.sleep(0.05)  # (seen before it is used, once the close has arrived)
        sqs.send_message_batch(QueueUrl="q", Entries=[])
    assert len(scripted.requests) == 3
    assert all(a.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/") for a in scripted.requests)


def test_a_slow_answer_on_a_kept_connection_counts_as_an_attempt(scripted: Any) -> None:
    """Only a connection dropped while idle is tried again for free; a read timeout is not."""
    scripted.script = [OK, (*OK, 1.0)]
    sqs = scripted_sqs(scripted, Limits(attempts=1, read_timeout=0.3), [])
    sqs.send_message_batch(QueueUrl="q", Entries=[])
    with pytest.raises(AwsError) as slow:
        sqs.send_message_batch(QueueUrl="q", Entries=[])
    assert (slow.value.status, slow.value.code) == (0, "TimeoutError")
    assert len(scripted.requests) == 2


def test_a_connection_idle_longer_than_the_limit_is_closed_not_reused(scripted: Any) -> None:
    """A kept connection idle past ``max_idle_seconds`` (by the pool's monotonic clock, moved
    here) may have been forgotten by a NAT gateway on the way: a new one is opened instead.
    One idle up to the limit is reused."""
    clock = [1000.0]
    limits = Limits(attempts=1, max_idle_seconds=30)
    assert Limits().max_idle_seconds == 30
    service = aws_http.Service("sqs", f"http://127.0.0.1:{scripted.server_address[1]}",
                               "us-east-1", limits, lambda: CREDS,
                               monotonic=lambda: clock[0])
    sqs = aws_http.SqsClient(aws_http.JsonClient(service, "AmazonSQS", "1.0"))
    try:
        sqs.send_message_batch(QueueUrl="q", Entries=[])
        clock[0] += 30.0  # idle exactly the limit: reused
        sqs.send_message_batch(QueueUrl="q", Entries=[])
        clock[0] += 30.5  # idle past it: a new connection
        sqs.send_message_batch(QueueUrl="q", Entries=[])
        clock[0] += 1.0
        sqs.send_message_batch(QueueUrl="q", Entries=[])
        first, second, third, fourth = scripted.peers
        assert first == second
        assert third != first and fourth == third
    finally:
        service.close()


def test_max_idle_seconds_must_be_positive() -> None:
    with pytest.raises(Exception, match="max_idle_seconds must be more than 0"):
        aws_http.Service("sqs", "http://127.0.0.1:1", "us-east-1",
                         Limits(max_idle_seconds=0), lambda: CREDS)


class RawServer:
    """A server written against the socket, for what http.server will not do: answer the
    n-th request with ``script[n]`` (the last repeats), a function that writes whatever it
    likes to the socket and says whether the connection stays open."""

    def __init__(self, script: list[Callable[[socket.socket], bool]]) -> None:
        self.script = script
        self.requests = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        with sock:
            data = b""
            while True:
                while b"\r\n\r\n" not in data:
                    chunk = sock.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, data = data.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(data) < length:
                    data += sock.recv(65536)
                data = data[length:]
                answer = self.script[min(self.requests, len(self.script) - 1)]
                self.requests += 1
                if not answer(sock):
                    return

    def close(self) -> None:
        self.listener.close()


def ok(sock: socket.socket) -> bool:
    body = json.dumps({"Successful": [], "Failed": []}).encode()
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.0\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    return True


@contextlib.contextmanager
def raw_sqs(script: list[Callable[[socket.socket], bool]],
            ) -> Iterator[tuple[RawServer, aws_http.SqsClient]]:
    """A RawServer playing ``script``, and a one-attempt SQS client of it; both closed after."""
    server = RawServer(script)
    service = aws_http.Service("sqs", f"http://127.0.0.1:{server.port}", "us-east-1",
                               Limits(attempts=1), lambda: CREDS)
    try:
        yield server, aws_http.SqsClient(aws_http.JsonClient(service, "AmazonSQS", "1.0"))
    finally:
        service.close()
        server.close()


def reset(sock: socket.socket) -> None:
    """Close with a reset (RST), not an orderly FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def test_what_a_kept_connection_received_while_idle_is_never_read_as_an_answer() -> None:
    """A server may say something on a kept connection before it closes it (a 408 Request
    Timeout): the next call must not read that as its own answer."""
    said = threading.Event()

    def ok_then_408_while_idle(sock: socket.socket) -> bool:
        ok(sock)
        time.sleep(0.05)  # the client has its answer and has pooled the connection
        sock.sendall(b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n"
                     b"Content-Length: 0\r\n\r\n")
        said.set()
        # The close reaches the client a network's delay later: here, once it has sent its
        # next request on this connection (over loopback the reset would come first).
        sock.settimeout(1)
        # (or the client closes it unread: a reset)
        with contextlib.suppress(OSError):
            sock.recv(65536)
        return False

    with raw_sqs([ok_then_408_while_idle, ok]) as (server, sqs):
        sqs.send_message_batch(QueueUrl="q", Entries=[])
        assert said.wait(5)
        time.sleep(0.05)  # and the 408 is in the client's socket
        assert sqs.send_message_batch(QueueUrl="q", Entries=[]) == {"Successful": [],
                                                                    "Failed": []}
        assert server.requests == 2


def test_a_kept_connection_closed_as_it_is_used_is_replaced_without_spending_an_attempt(
        ) -> None:
    """The close that crosses the request (nothing was waiting when the connection was taken,
    and no answer began): sent again on a new connection, as a connection found closed is."""

    def closed_unanswered(sock: socket.socket) -> bool:
        return False

    with raw_sqs([ok, closed_unanswered, ok]) as (server, sqs):
        sqs.send_message_batch(QueueUrl="q", Entries=[])
        assert sqs.send_message_batch(QueueUrl="q", Entries=[]) == {"Successful": [],
                                                                    "Failed": []}
        assert server.requests == 3


def test_an_answer_cut_short_counts_as_an_attempt_even_on_a_kept_connection() -> None:
    """The server had the request (it began to answer) when the connection was reset: that
    is a failed attempt, never a free resend, as it would be for a connection dropped idle."""

    def headers_then_reset(sock: socket.socket) -> bool:
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"Succ")
        time.sleep(0.2)  # the client has the headers and waits for the rest of the body
        reset(sock)
        return False

    with raw_sqs([ok, headers_then_reset, ok]) as (server, sqs):
        sqs.send_message_batch(QueueUrl="q", Entries=[])
        with pytest.raises(AwsError) as cut:
            sqs.send_message_batch(QueueUrl="q", Entries=[])
        assert (cut.value.status, cut.value.code) == (0, "ConnectionResetError")
        assert server.requests == 2


def test_requests_are_signed_at_the_machines_clock_not_a_fixed_one(scripted: Any) -> None:
    service = scripted.keep(aws_http.Service(
        "sqs", f"http://127.0.0.1:{scripted.server_address[1]}", "us-east-1",
        Limits(attempts=1), lambda: CREDS))
    aws_http.JsonClient(service, "AmazonSQS", "1.0").call("SendMessageBatch", {})
    today = datetime.now(UTC).strftime("%Y%m%d")
    assert f"Credential=AKIDEXAMPLE/{today}/us-east-1/sqs/aws4_request" in scripted.requests[0]


def test_nobody_listening_is_a_connection_error_after_the_attempts() -> None:
    sleeps: list[float] = []
    service = aws_http.Service("sqs", f"http://127.0.0.1:{stack.free_port()}", "us-east-1",
                               Limits(attempts=2, connect_timeout=1), lambda: CREDS,
                               sleep=sleeps.append)
    with pytest.raises(AwsError) as gone:
        aws_http.JsonClient(service, "AmazonSQS", "1.0").call("SendMessageBatch", {})
    assert gone.value.status == 0 and gone.value.code == "ConnectionRefusedError"
    assert len(sleeps) == 1


def test_without_credentials_a_call_says_so() -> None:
    service = aws_http.Service("sqs", "http://127.0.0.1:1", "us-east-1", Limits(), lambda: None)
    with pytest.raises(Exception, match="no AWS credentials in the environment"):
        aws_http.JsonClient(service, "AmazonSQS", "1.0").call("SendMessageBatch", {})


# ---------------------------------------------------------------- cold start


@pytest.mark.parametrize("name", ["scanner", "consumer", "redrive", "publisher"])
def test_no_handler_imports_boto3_at_cold_start(name: str) -> None:
    """What Lambda runs at init: the handler with its runtime built from the environment."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("REMINDERS_", "AWS_")) and k != "DATABASE_URL"}
    env.update({"AWS_LAMBDA_FUNCTION_NAME": name, "AWS_REGION": "eu-west-1",
                "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
                "DATABASE_URL": "postgresql://x@127.0.0.1:1/x",
                "REMINDERS_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/1/d",
                "REMINDERS_DLQ_URL": "https://sqs.eu-west-1.amazonaws.com/1/q",
                "REMINDERS_PARKING_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/1/p",
                "REMINDERS_PUBLISHER_FUNCTION": "publisher"})
    # Powertools' user-agent check imports botocore's package alone (its __init__, under a
    # millisecond); no client, session or boto3.
    code = (f"import sys, functions.{name}.handler; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('boto3', 'botocore', 's3transfer') and m != 'botocore'))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("body", [b"<html>502 Bad Gateway</html>", b"\xff\xfe", b"[]"])
def test_a_success_whose_body_is_not_a_json_object_is_an_aws_error(body: bytes) -> None:
    """What a proxy in the way may answer with a 200: an AwsError (so every caller's handling
    of a failed call applies), never a JSON or Unicode error from inside the client."""

    def answer(sock: socket.socket) -> bool:
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        return True

    server = RawServer([answer])
    service = aws_http.Service("sqs", f"http://127.0.0.1:{server.port}", "us-east-1",
                               Limits(attempts=1), lambda: CREDS)
    try:
        with pytest.raises(AwsError) as malformed:
            aws_http.JsonClient(service, "AmazonSQS", "1.0").call("SendMessageBatch", {})
        assert (malformed.value.code, malformed.value.status) == ("MalformedAnswer", 200)
    finally:
        service.close()
        server.close()


def test_lambdas_error_code_comes_from_its_error_type_header() -> None:
    """Lambda's REST answers put the code in a header; the body's "Type" is only "User"."""
    answer = aws_http.Answer(429, {"x-amzn-errortype": "TooManyRequestsException:"},
                             b'{"Type": "User", "message": "Rate exceeded"}')
    error = aws_http._json_error("Invoke")(answer)
    assert (error.code, error.message, error.retryable) == (
        "TooManyRequestsException", "Rate exceeded", True)
