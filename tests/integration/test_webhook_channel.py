"""The webhook channel against a real receiver over HTTP on 127.0.0.1, on fixed instants."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from reminders import __version__, config
from reminders.channels.base import Message, Outcome
from reminders.channels.signing import new_secret, verify
from reminders.channels.webhook import (
    MAX_RETRY_AFTER,
    RESPONSE_SNIPPET_CHARS,
    WebhookChannel,
    parse_retry_after,
)
from reminders.clock import FixedClock
from reminders.errors import InvalidInput
from reminders.local.receiver import WebhookReceiver
from reminders.retry import Policy, next_try
from tests.certs import self_signed

NOW = datetime(2025, 3, 30, 1, 30, tzinfo=UTC)  # the night Europe's clocks go forward
SECRET = new_secret()


def message(url: str, key: str = "schedule:7:2025-03-30T01:30:00Z:r1:webhook",
            secret: str | None = SECRET, attempt: int = 1,
            also: tuple[str, ...] = ()) -> Message:
    return Message(
        delivery_key=key,
        tenant="acme",
        kind="balance_due",
        recipient="r1",
        destination=url,
        payload={"amount": "12.50", "note": "Grüße"},
        revision="3",
        occurrence_at=NOW,
        attempt=attempt,
        secrets=(*(() if secret is None else (secret,)), *also),
    )


@pytest.fixture
def hooks() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(SECRET, clock=FixedClock(NOW)) as rcv:
        yield rcv


@pytest.fixture
def channel() -> WebhookChannel:
    return WebhookChannel(allow=["127.0.0.1/32"], connect_timeout=1.0, read_timeout=0.5)


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


# --- the happy path and the key --------------------------------------------------------------


def test_success_is_sent_and_counted_once(hooks: WebhookReceiver, channel: WebhookChannel) -> None:
    msg = message(hooks.hook_url("ok"))
    result = channel.send(msg, NOW)
    assert (result.outcome, result.detail, result.status_code) == (Outcome.SENT, "HTTP 200 OK", 200)
    stats = hooks.stats()
    assert stats["effects"] == {msg.delivery_key: 1}
    assert stats["bad_signatures"] == 0
    assert hooks.payloads(msg.delivery_key)[msg.delivery_key] == [
        {
            "type": "reminder.due",
            "delivery_key": msg.delivery_key,
            "tenant": "acme",
            "kind": "balance_due",
            "recipient": "r1",
            "revision": "3",
            "occurrence_at": "2025-03-30T01:30:00Z",
            "attempt": 1,
            "payload": {"amount": "12.50", "note": "Grüße"},
        }
    ]


def test_a_resend_with_the_same_key_has_no_second_effect(
    hooks: WebhookReceiver, channel: WebhookChannel
) -> None:
    url = hooks.hook_url("ok")
    first = channel.send(message(url, attempt=1), NOW)
    second = channel.send(message(url, attempt=2), NOW + timedelta(minutes=5))
    assert first.outcome is second.outcome is Outcome.SENT
    stats = hooks.stats()
    key = message(url).delivery_key
    assert stats["effects"] == {key: 1}
    assert stats["ok_answers"] == {key: 2}
    assert stats["duplicates"] == 1


def test_scripted_codes_answer_in_order(hooks: WebhookReceiver, channel: WebhookChannel) -> None:
    url = hooks.hook_url("flaky", codes=[500, 200])
    outcomes = [channel.send(message(url), NOW).outcome for _ in range(3)]
    assert outcomes == [Outcome.TRANSIENT, Outcome.SENT, Outcome.SENT]
    stats = hooks.stats()
    assert stats["by_endpoint"] == {"flaky": 3}
    assert stats["effects"] == {message(url).delivery_key: 1}


# --- classification -------------------------------------------------------------------------


def test_429_with_retry_after_seconds(hooks: WebhookReceiver, channel: WebhookChannel) -> None:
    result = channel.send(message(hooks.hook_url("busy", codes=[429], retry_after=30)), NOW)
    assert result.outcome is Outcome.TRANSIENT
    assert result.detail == "HTTP 429 Too Many Requests"
    assert result.retry_after == NOW + timedelta(seconds=30)
    assert hooks.stats()["effects"] == {}


def test_429_with_retry_after_http_date(hooks: WebhookReceiver, channel: WebhookChannel) -> None:
    url = hooks.hook_url("busy", codes=[429], retry_after=120, retry_after_date=True)
    result = channel.send(message(url), NOW)
    assert result.outcome is Outcome.TRANSIENT
    assert result.retry_after == NOW + timedelta(seconds=120)
    assert result.retry_after.tzinfo is not None


def test_429_without_retry_after(hooks: WebhookReceiver, channel: WebhookChannel) -> None:
    result = channel.send(message(hooks.hook_url("busy", codes=[429])), NOW)
    assert (result.outcome, result.retry_after) == (Outcome.TRANSIENT, None)


def test_503_honours_retry_after(hooks: WebhookReceiver, channel: WebhookChannel) -> None:
    result = channel.send(message(hooks.hook_url("down", codes=[503], retry_after=90)), NOW)
    assert result.outcome is Outcome.TRANSIENT
    assert result.detail == "HTTP 503 Service Unavailable"
    assert result.status_code == 503
    assert result.retry_after == NOW + timedelta(seconds=90)


def test_retry_after_is_ignored_on_other_statuses(
    hooks: WebhookReceiver, channel: WebhookChannel
) -> None:
    # The receiver only adds the header to 429/503; a 500 never carries a retry time.
    result = channel.send(message(hooks.hook_url("err", codes=[500], retry_after=90)), NOW)
    assert (result.outcome, result.retry_after) == (Outcome.TRANSIENT, None)


@pytest.mark.parametrize(
    ("status", "outcome", "detail"),
    [
        (500, Outcome.TRANSIENT, "HTTP 500 Internal Server Error"),
        (502, Outcome.TRANSIENT, "HTTP 502 Bad Gateway"),
        (408, Outcome.TRANSIENT, "HTTP 408 Request Timeout"),
        (425, Outcome.TRANSIENT, "HTTP 425 Too Early"),
        (410, Outcome.PERMANENT, "HTTP 410 Gone"),
        (400, Outcome.PERMANENT, "HTTP 400 Bad Request"),
        (404, Outcome.PERMANENT, "HTTP 404 Not Found"),
        (204, Outcome.SENT, "HTTP 204 No Content"),
    ],
)
def test_status_classification(
    hooks: WebhookReceiver, channel: WebhookChannel, status: int, outcome: Outcome, detail: str
) -> None:
    result = channel.send(message(hooks.hook_url(f"s{status}", codes=[status])), NOW)
    assert (result.outcome, result.detail, result.status_code) == (outcome, detail, status)


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_redirect_is_not_followed(
    hooks: WebhookReceiver, channel: WebhookChannel, status: int
) -> None:
    result = channel.send(message(hooks.hook_url("moved", codes=[status])), NOW)
    assert result.outcome is Outcome.PERMANENT
    assert result.detail.endswith("redirect not followed")
    assert result.status_code == status
    assert hooks.stats()["by_endpoint"] == {"moved": 1}


def test_connection_refused_is_transient(channel: WebhookChannel) -> None:
    port = unused_port()
    result = channel.send(message(f"http://127.0.0.1:{port}/hooks/x"), NOW)
    assert result.outcome is Outcome.TRANSIENT
    assert result.detail == f"connection refused by 127.0.0.1:{port}"


def test_read_timeout_after_the_request_was_written_is_unknown(
    hooks: WebhookReceiver, channel: WebhookChannel
) -> None:
    slow = message(hooks.hook_url("slow", delay=2))
    result = channel.send(slow, NOW)
    assert result.outcome is Outcome.UNKNOWN
    assert result.detail == "no response within 0.5s (read timeout); the request was sent"
    # The receiver did act: that is exactly why the outcome cannot be "transient".
    assert hooks.stats()["effects"] == {slow.delivery_key: 1}
    # The receiver honours the key, so the resend the consumer may make is harmless.
    again = channel.send(message(hooks.hook_url("fast"), attempt=2), NOW)
    assert again.outcome is Outcome.SENT
    stats = hooks.stats()
    assert stats["effects"] == {slow.delivery_key: 1}
    assert stats["duplicates"] == 1


# --- one deadline for the whole send ----------------------------------------------------------

# The receiver's drip answer: status line, Content-Type, Content-Length, the blank line and the
# JSON body alone are 100 bytes; Server and Date headers come on top.
DRIP_ANSWER_MIN_BYTES = 100


def test_the_send_timeout_is_public_and_validated() -> None:
    assert WebhookChannel().send_timeout == 15.0
    assert WebhookChannel(send_timeout=2.5).send_timeout == 2.5
    with pytest.raises(InvalidInput, match="webhook timeouts must be positive"):
        WebhookChannel(send_timeout=0)


def test_a_drip_fed_answer_is_cut_off_at_the_send_deadline(hooks: WebhookReceiver) -> None:
    # Every byte arrives well within the 1 s read timeout, so only the overall deadline can stop
    # the send; without it the exchange lasts as long as the receiver keeps dripping.
    drip_ms = 50
    drip_seconds = DRIP_ANSWER_MIN_BYTES * drip_ms / 1000  # 5 s at the very least
    channel = WebhookChannel(
        allow=["127.0.0.1/32"], connect_timeout=1.0, read_timeout=1.0, send_timeout=2.0
    )
    msg = message(hooks.hook_url("drip", drip_ms=drip_ms))
    started = time.monotonic()
    result = channel.send(msg, NOW)
    took = time.monotonic() - started
    assert result.outcome is Outcome.UNKNOWN
    assert result.detail == (
        "send deadline of 2.0s hit while waiting for the response; the request was sent"
    )
    assert took < 0.6 * drip_seconds
    assert hooks.stats()["effects"] == {msg.delivery_key: 1}  # why it cannot be "transient"


def test_a_drip_that_ends_within_the_deadline_is_read_in_full(hooks: WebhookReceiver) -> None:
    channel = WebhookChannel(
        allow=["127.0.0.1/32"], connect_timeout=1.0, read_timeout=1.0, send_timeout=10.0
    )
    result = channel.send(message(hooks.hook_url("drip", codes=[503], retry_after=30,
                                                 drip_ms=1)), NOW)
    assert (result.outcome, result.detail) == (Outcome.TRANSIENT, "HTTP 503 Service Unavailable")
    assert result.retry_after == NOW + timedelta(seconds=30)
    assert result.extra["response_body"] == '{"status":503,"message":"Service Unavailable"}'


@dataclass
class BodyServer:
    server: ThreadingHTTPServer
    written: list[int]  # body bytes written, per request, until done or the client went away

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def body_server(
    length: int, chunk: int, every: float, tls: ssl.SSLContext | None = None
) -> BodyServer:
    """Answers 200 with its headers at once, then ``length`` body bytes, ``chunk`` bytes every
    ``every`` seconds."""
    stop = threading.Event()
    written: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", str(length))
            self.end_headers()
            done = 0
            try:
                while done < length and not stop.wait(every):
                    piece = b"x" * min(chunk, length - done)
                    self.wfile.write(piece)
                    done += len(piece)
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                written.append(done)

    class Server(ThreadingHTTPServer):
        def shutdown(self) -> None:
            stop.set()
            super().shutdown()

    server = Server(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return BodyServer(server, written)


def test_a_status_that_arrived_stands_when_the_body_is_cut_off() -> None:
    slow = body_server(length=1000, chunk=1, every=0.02)  # 20 s of body
    channel = WebhookChannel(
        allow=["127.0.0.1/32"], connect_timeout=1.0, read_timeout=1.0, send_timeout=1.0
    )
    try:
        started = time.monotonic()
        result = channel.send(message(f"http://127.0.0.1:{slow.port}/h"), NOW)
        took = time.monotonic() - started
    finally:
        slow.close()
    assert (result.outcome, result.status_code) == (Outcome.SENT, 200)
    assert result.detail == "HTTP 200 OK; response body cut off at the 1.0s send deadline"
    assert took < 5.0


def test_the_deadline_holds_over_https(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path, "hooks.example.test")
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    slow = body_server(length=1000, chunk=1, every=0.02, tls=server_tls)
    channel = WebhookChannel(
        allow=["127.0.0.1"], connect_timeout=1.0, read_timeout=1.0, send_timeout=1.0,
        resolver=lambda host, p: ["127.0.0.1"],
        ssl_context=ssl.create_default_context(cafile=cert),
    )
    try:
        started = time.monotonic()
        result = channel.send(message(f"https://hooks.example.test:{slow.port}/h"), NOW)
        took = time.monotonic() - started
    finally:
        slow.close()
    assert (result.outcome, result.status_code) == (Outcome.SENT, 200)
    assert result.detail == "HTTP 200 OK; response body cut off at the 1.0s send deadline"
    assert took < 5.0


def test_a_huge_answer_is_read_only_up_to_the_cap() -> None:
    length = 256 * 1024 * 1024
    flood = body_server(length=length, chunk=64 * 1024, every=0)
    channel = WebhookChannel(allow=["127.0.0.1/32"], read_timeout=1.0, send_timeout=5.0)
    try:
        result = channel.send(message(f"http://127.0.0.1:{flood.port}/h"), NOW)
        for _ in range(100):  # the handler notices the closed connection on its next writes
            if flood.written:
                break
            time.sleep(0.05)
    finally:
        flood.close()
    assert (result.outcome, result.detail) == (Outcome.SENT, "HTTP 200 OK")
    assert result.extra["response_body"] == "x" * RESPONSE_SNIPPET_CHARS
    [written] = flood.written
    assert written < length // 4


def test_a_request_the_receiver_never_reads_is_cut_off_while_writing() -> None:
    # A listener that never accepts: the kernel takes the first few kilobytes, then the write
    # blocks. The 10 s read timeout would allow far longer than the 1 s deadline.
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        channel = WebhookChannel(
            allow=["127.0.0.1/32"], connect_timeout=1.0, read_timeout=10.0, send_timeout=1.0
        )
        big = dataclasses.replace(message(f"http://127.0.0.1:{port}/h"),
                                  payload={"blob": "x" * (16 * 1024 * 1024)})
        started = time.monotonic()
        result = channel.send(big, NOW)
        took = time.monotonic() - started
    assert result.outcome is Outcome.TRANSIENT
    assert result.detail == (
        "send deadline of 1.0s hit while writing the request; it was not completely sent"
    )
    assert took < 5.0


def test_a_deadline_spent_before_connecting_sends_nothing(hooks: WebhookReceiver) -> None:
    ticks = [100.0]

    def slow_resolver(host: str, port: int) -> list[str]:
        ticks[0] += 3.0  # the lookup took 3 s of a 2 s deadline
        return ["127.0.0.1"]

    channel = WebhookChannel(allow=["127.0.0.1/32"], send_timeout=2.0, resolver=slow_resolver,
                             monotonic=lambda: ticks[0])
    result = channel.send(message(hooks.hook_url("late")), NOW)
    assert result.outcome is Outcome.TRANSIENT
    assert result.detail == (
        "send deadline of 2.0s hit before a connection was made; nothing was sent"
    )
    assert hooks.stats()["by_endpoint"] == {}


def test_the_connect_timeout_is_shortened_to_what_is_left_of_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ticks = [100.0]
    asked: list[float] = []

    def slow_resolver(host: str, port: int) -> list[str]:
        ticks[0] += 1.5
        return ["93.184.215.14", "93.184.215.15"]

    def never_connects(address: tuple[str, int], timeout: float) -> socket.socket:
        asked.append(timeout)
        ticks[0] += timeout
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", never_connects)
    channel = WebhookChannel(connect_timeout=3.0, send_timeout=2.0, resolver=slow_resolver,
                             monotonic=lambda: ticks[0])
    result = channel.send(message("https://hooks.example.com/h"), NOW)
    assert asked == [0.5]  # and the second address is not tried
    assert result.outcome is Outcome.TRANSIENT
    assert result.detail == (
        "send deadline of 2.0s hit while connecting to 93.184.215.14:443; nothing was sent"
    )


def test_wrong_secret_is_refused_and_counted(
    hooks: WebhookReceiver, channel: WebhookChannel
) -> None:
    result = channel.send(message(hooks.hook_url("ok"), secret=new_secret()), NOW)
    assert (result.outcome, result.status_code) == (Outcome.PERMANENT, 401)
    stats = hooks.stats()
    assert stats["bad_signatures"] == 1
    assert stats["effects"] == stats["requests"] == stats["by_endpoint"] == {}


# --- destination guard ----------------------------------------------------------------------


def test_loopback_is_refused_without_an_allow_list(hooks: WebhookReceiver) -> None:
    result = WebhookChannel().send(message(hooks.hook_url("ok")), NOW)
    assert result.outcome is Outcome.PERMANENT
    assert result.detail == (
        "destination 127.0.0.1 is loopback; add it to REMINDERS_WEBHOOK_ALLOW to permit"
    )
    assert hooks.stats()["by_endpoint"] == {}


def test_loopback_is_reached_when_allowed(hooks: WebhookReceiver) -> None:
    channel = WebhookChannel(allow=["127.0.0.1/32"])
    assert channel.send(message(hooks.hook_url("ok")), NOW).outcome is Outcome.SENT


def test_metadata_address_is_refused_even_by_name() -> None:
    channel = WebhookChannel(resolver=lambda host, port: ["169.254.169.254"])
    result = channel.send(message("http://metadata.example.test/latest"), NOW)
    assert result.outcome is Outcome.PERMANENT
    assert result.detail.startswith("destination 169.254.169.254 is link-local")


def test_dns_failure_is_transient() -> None:
    def no_such_host(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    result = WebhookChannel(resolver=no_such_host).send(message("https://nowhere.test/h"), NOW)
    assert result.outcome is Outcome.TRANSIENT
    assert result.detail.startswith("cannot resolve nowhere.test")


def test_connect_timeout_detail(monkeypatch: pytest.MonkeyPatch) -> None:
    def never_connects(address: tuple[str, int], timeout: float) -> socket.socket:
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", never_connects)
    channel = WebhookChannel(resolver=lambda host, port: ["93.184.215.14"])
    result = channel.send(message("https://hooks.example.com/h"), NOW)
    assert result.outcome is Outcome.TRANSIENT
    assert result.detail == "connect timeout after 3.0s to 93.184.215.14:443"


@pytest.mark.parametrize(
    ("url", "secret", "detail"),
    [
        ("ftp://hooks.example.com/x", SECRET, "unsupported URL scheme 'ftp': only http and https"),
        ("hooks.example.com/x", SECRET, "unsupported URL scheme '(none)': only http and https"),
        ("http://user:pw@hooks.example.com/", SECRET, "credentials in the webhook URL"),
        ("http://hooks.example.com:99999/", SECRET, "invalid webhook URL"),
        ("https://hooks.example.com/", None, "no signing secret for this webhook endpoint"),
        ("https://hooks.example.com/", "whsec_c2hvcnQ=", "webhook secret: key is 5 bytes"),
    ],
    # The same ids in every process (the secret is new each run): the suite's workers must
    # collect the same tests.
    ids=["ftp", "no-scheme", "credentials", "bad-port", "no-secret", "short-secret"],
)
def test_unusable_destination_is_permanent(url: str, secret: str | None, detail: str) -> None:
    result = WebhookChannel().send(message(url, secret=secret), NOW)
    assert result.outcome is Outcome.PERMANENT
    assert result.detail.startswith(detail)


# --- the bytes on the wire, over HTTP and HTTPS ----------------------------------------------


@dataclass
class Captured:
    requests: list[dict[str, Any]] = field(default_factory=list)


def capture_server(tls: ssl.SSLContext | None = None) -> tuple[ThreadingHTTPServer, Captured]:
    captured = Captured()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            captured.requests.append(
                {"path": self.path, "headers": dict(self.headers.items()), "body": body}
            )
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server, captured


def test_headers_and_body_on_the_wire() -> None:
    server, captured = capture_server()
    port = server.server_address[1]
    # A name that DNS cannot resolve: the channel must connect to the vetted address itself.
    channel = WebhookChannel(allow=["127.0.0.1/32"], resolver=lambda host, p: ["127.0.0.1"])
    msg = message(f"http://hooks.example.test:{port}/in/bound?tenant=acme")
    try:
        result = channel.send(msg, NOW)
    finally:
        server.shutdown()
        server.server_close()
    assert (result.outcome, result.status_code) == (Outcome.SENT, 202)
    [request] = captured.requests
    headers, body = request["headers"], request["body"]
    assert request["path"] == "/in/bound?tenant=acme"
    assert headers["Host"] == f"hooks.example.test:{port}"
    assert headers["webhook-id"] == headers["Idempotency-Key"] == msg.delivery_key
    assert headers["webhook-timestamp"] == str(int(NOW.timestamp())) == "1743298200"
    assert headers["Content-Type"] == "application/json"
    assert headers["User-Agent"] == f"reminders/{__version__}"
    assert "Connection" not in headers  # HTTP/1.1 keeps the connection for the next send
    assert headers["webhook-signature"].startswith("v1,")
    verify(SECRET, headers, body)  # the signed bytes are the sent bytes
    assert b": " not in body and b", " not in body  # compact separators
    assert json.loads(body)["occurrence_at"] == "2025-03-30T01:30:00Z"


def test_https_verifies_the_certificate_for_the_host_name(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path, "hooks.example.test")
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    server, captured = capture_server(server_tls)
    port = server.server_address[1]
    url = f"https://hooks.example.test:{port}/in"
    resolve = lambda host, p: ["127.0.0.1"]  # noqa: E731
    trusting = WebhookChannel(
        allow=["127.0.0.1"], resolver=resolve, ssl_context=ssl.create_default_context(cafile=cert)
    )
    untrusting = WebhookChannel(allow=["127.0.0.1"], resolver=resolve)
    try:
        sent = trusting.send(message(url), NOW)
        refused = untrusting.send(message(url), NOW)
    finally:
        server.shutdown()
        server.server_close()
    assert (sent.outcome, sent.status_code) == (Outcome.SENT, 202)
    assert captured.requests[0]["headers"]["Host"] == f"hooks.example.test:{port}"
    assert refused.outcome is Outcome.TRANSIENT
    assert refused.detail.startswith(f"TLS handshake with 127.0.0.1:{port} failed")
    assert len(captured.requests) == 1


def test_the_receiver_serves_https_and_survives_a_failed_handshake(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path, "hooks.example.test")
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    resolve = lambda host, p: ["127.0.0.1"]  # noqa: E731
    trusting = WebhookChannel(
        allow=["127.0.0.1"], resolver=resolve, ssl_context=ssl.create_default_context(cafile=cert)
    )
    plain = WebhookChannel(allow=["127.0.0.1"], connect_timeout=1.0, read_timeout=1.0,
                           send_timeout=2.0)
    with WebhookReceiver(SECRET, clock=FixedClock(NOW), tls=server_tls) as rcv:
        assert rcv.url == f"https://127.0.0.1:{rcv.port}"
        # Plain HTTP to the TLS port: the handshake fails in that connection's thread only.
        refused = plain.send(message(f"http://127.0.0.1:{rcv.port}/hooks/a", key="k0"), NOW)
        sent = [trusting.send(message(f"https://hooks.example.test:{rcv.port}/hooks/a",
                                      key=f"k{i}"), NOW) for i in (1, 2)]
        stats = rcv.stats()
    assert refused.outcome in (Outcome.UNKNOWN, Outcome.TRANSIENT), refused
    assert [(r.outcome, r.status_code) for r in sent] == [(Outcome.SENT, 200)] * 2
    assert stats["effects"] == {"k1": 1, "k2": 1}


# --- Retry-After parsing --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", NOW),
        ("120", NOW + timedelta(seconds=120)),
        (" 7 ", NOW + timedelta(seconds=7)),
        ("Sun, 30 Mar 2025 01:32:00 GMT", NOW + timedelta(minutes=2)),
        ("Sun, 30 Mar 2025 03:32:00 +0200", NOW + timedelta(minutes=2)),
        ("Sun, 30 Mar 2025 01:32:00 -0000", NOW + timedelta(minutes=2)),
        (None, None),
        ("", None),
        ("-5", None),
        ("1.5", None),
        ("soon", None),
        ("\u0661\u0662\u0660", None),  # Arabic-Indic digits are not HTTP's DIGIT
        ("Sun, 30 Mar 2025 01:00:00 GMT", NOW),  # a time already past means now
        # Absurdly far answers are held at a year: far enough that the retry policy still sees
        # (and caps) them, near enough that nothing overflows.
        ("31535999", NOW + timedelta(seconds=31_535_999)),
        ("31536001", NOW + MAX_RETRY_AFTER),
        ("99999999999", NOW + MAX_RETRY_AFTER),
        ("99999999999999999", NOW + MAX_RETRY_AFTER),
        ("9" * 5000, NOW + MAX_RETRY_AFTER),
        ("Fri, 31 Dec 9999 23:59:59 GMT", NOW + MAX_RETRY_AFTER),
        ("Fri, 31 Dec 9999 23:59:59 -1200", NOW + MAX_RETRY_AFTER),
    ],
)
def test_parse_retry_after(value: str | None, expected: datetime | None) -> None:
    assert parse_retry_after(value, NOW) == expected


def test_the_retry_after_limit_is_beyond_any_configurable_maximum_delay() -> None:
    assert timedelta(seconds=config.MAX_RETRY_DELAY_RANGE[1]) < MAX_RETRY_AFTER


@pytest.mark.parametrize(
    "header",
    ["99999999999", "Fri, 31 Dec 9999 23:59:59 -0100", "Fri, 31 Dec 9999 23:59:59 GMT"],
)
def test_503_with_an_absurd_retry_after_is_retried_within_a_day(
    hooks: WebhookReceiver, channel: WebhookChannel, header: str
) -> None:
    url = hooks.hook_url("down", codes=[503], retry_after_raw=header)
    result = channel.send(message(url), NOW)
    assert (result.outcome, result.status_code) == (Outcome.TRANSIENT, 503)
    assert result.retry_after == NOW + MAX_RETRY_AFTER
    policy = Policy(max_attempts=5, backoff_base=timedelta(seconds=30),
                    backoff_cap=timedelta(hours=1), stale_after=None)
    nxt = next_try(policy, attempts_made=1, occurrence_at=NOW, now=NOW,
                   retry_after=result.retry_after, rng=random.Random(1))
    assert (nxt.state, nxt.due_at) == ("retrying", NOW + timedelta(days=1))
    assert nxt.reason == (
        "will retry; Retry-After 2026-03-30T01:30:00+00:00 capped at the maximum delay of 86400s"
    )


# --- the receiver's own surface -------------------------------------------------------------


def test_receiver_stats_and_reset_over_http(
    hooks: WebhookReceiver, channel: WebhookChannel
) -> None:
    channel.send(message(hooks.hook_url("ok")), NOW)
    with urllib.request.urlopen(f"{hooks.url}/_stats", timeout=5) as response:
        assert json.load(response) == hooks.stats()
    request = urllib.request.Request(f"{hooks.url}/_reset", method="POST", data=b"")
    with urllib.request.urlopen(request, timeout=5):
        pass
    assert hooks.stats() == {
        "effects": {}, "requests": {}, "ok_answers": {}, "duplicates": 0,
        "bad_signatures": 0, "by_endpoint": {},
    }


def test_receiver_runs_as_a_process_until_sigterm() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "reminders.local.receiver", "--secret", SECRET, "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        channel = WebhookChannel(allow=["127.0.0.1/32"])
        assert channel.send(message(f"{url}/hooks/proc"), NOW).outcome is Outcome.SENT
        with urllib.request.urlopen(f"{url}/_stats", timeout=5) as response:
            assert json.load(response)["by_endpoint"] == {"proc": 1}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_payload_that_is_not_json_is_permanent(
    hooks: WebhookReceiver, channel: WebhookChannel
) -> None:
    msg = dataclasses.replace(message(hooks.hook_url("ok")), payload={"ratio": float("nan")})
    result = channel.send(msg, NOW)
    assert result.outcome is Outcome.PERMANENT
    assert result.detail.startswith("payload is not JSON")
    assert hooks.stats()["by_endpoint"] == {}


# --- TLS refused before a byte is sent --------------------------------------------------------


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("host", ["a" * 64 + ".example.test", "a..example.test"],
                         ids=["label-over-63", "empty-label"])
def test_a_host_name_tls_cannot_carry_is_permanent_and_leaves_no_socket(host: str) -> None:
    # ssl refuses the server name (SNI) only after taking over the connected socket; the
    # send must not raise, nor leave that socket open.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        channel = WebhookChannel(allow=["127.0.0.1/32"], connect_timeout=1.0,
                                 read_timeout=0.5, resolver=lambda h, p: ["127.0.0.1"])
        before = open_descriptors()
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            result = channel.send(message(f"https://{host}:{port}/hook"), NOW)
        after = open_descriptors()
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):  # refused before connecting at all
            listener.accept()
    assert result.outcome is Outcome.PERMANENT
    assert result.detail.startswith(f"TLS: the host name {host} cannot be sent as the server "
                                    "name:")
    assert after == before



# --- control characters and whitespace in a stored URL ----------------------------------------


@pytest.mark.parametrize(
    ("url", "detail"),
    [
        # getaddrinfo stops at the NUL: this would reach 127.0.0.1 with the raw host as Host.
        ("http://127.0.0.1\x00.evil:{port}/hooks/a", "the host contains a control character "
                                                 "(U+0000)"),
        # urlsplit drops tabs and line breaks: these would reach 127.0.0.1 as if typed so.
        ("http://127.0.0.1\t:{port}/hooks/a", "the host contains a control character (U+0009)"),
        ("http://127.0.0.1:{port}/hoo\nks/a", "the path contains a control character (U+000A)"),
        ("http://127.0.0.1:{port}/hooks/a?\rx", "the query contains a control character (U+000D)"),
        ("http://127.0.0.1:{port}/hooks/a?x=\x7f1", "the query contains a control character "
                                                 "(U+007F)"),
        ("http://127.0.0.1:{port}/hooks/a#\x851", "the fragment contains a control character "
                                               "(U+0085)"),
        ("http://127.0.0.1:{port}/a b", "the path contains whitespace (U+0020)"),
        ("http://127.0.0.1:{port}/a\u00a0b", "the path contains whitespace (U+00A0)"),
        ("\x01http://127.0.0.1:{port}/hooks/a", "the URL begins with a control character "
                                             "(U+0001)"),
        ("http://127.0.0.1:{port}/hooks/a\x00", "the URL ends with a control character "
                                              "(U+0000)"),
    ],
    ids=["nul-in-host", "tab-in-host", "lf-in-path", "cr-in-query", "del", "c1", "space",
         "no-break-space", "leading-c0", "trailing-nul"],
)
def test_a_stored_url_with_a_control_character_or_whitespace_is_permanent_and_sends_nothing(
        hooks: WebhookReceiver, channel: WebhookChannel, url: str, detail: str) -> None:
    # A row stored before URLs were checked when registered: refused when sent, never sent.
    result = channel.send(message(url.format(port=hooks.port)), NOW)
    assert (result.outcome, result.detail) == (Outcome.PERMANENT, f"webhook URL: {detail}")
    assert (hooks.accepted_connections, hooks.stats()["requests"]) == (0, {})


@pytest.mark.parametrize("around", [" {}", "{}\n", "\t{} "], ids=["leading-space", "trailing-lf",
                                                                "tab-and-space"])
def test_a_stored_url_with_whitespace_around_it_still_sends(
        hooks: WebhookReceiver, channel: WebhookChannel, around: str) -> None:
    # Stored before URLs were checked when registered; the channel stripped such whitespace
    # then, and still does: those rows went on sending, and do.
    url = around.format(f"http://127.0.0.1:{hooks.port}/hooks/a")
    assert channel.send(message(url), NOW).outcome is Outcome.SENT
