"""The webhook channel keeps connections alive, and reuses one only when that is safe: against
real HTTP/1.1 servers on 127.0.0.1 that count the connections they accept."""

from __future__ import annotations

import contextlib
import dataclasses
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from reminders.channels.base import Message, Outcome
from reminders.channels.signing import HEADER_ID, new_secret
from reminders.channels.webhook import WebhookChannel
from reminders.clock import FixedClock
from reminders.errors import InvalidInput
from reminders.local.receiver import WebhookReceiver
from tests.certs import self_signed

NOW = datetime(2025, 3, 30, 1, 30, tzinfo=UTC)
SECRET = new_secret()
BIG_BODY = 1000
# What a server that times out an idle keep-alive connection (nginx, Apache) sends before
# closing it.
IDLE_TIMEOUT_ANSWER = (b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n"
                       b"Connection: close\r\n\r\n")


def message(url: str, key: str = "k1") -> Message:
    return Message(
        delivery_key=key, tenant="acme", kind="balance_due", recipient="r1", destination=url,
        payload={"amount": "12.50"}, revision="1", occurrence_at=NOW, attempt=1,
        secrets=(SECRET,),
    )


class Scripted(ThreadingHTTPServer):
    """An HTTP/1.1 server answering each POST as the next step of its script says (the last
    step repeats); it counts the connections it accepts and records, per request, the connection
    it came on and its webhook-id. Steps:

    ``ok``          200 with a short body, the connection kept
    ``drop``        read the request, then close the connection without answering
    ``drop_unread`` close the connection without reading the request's body
    ``say_close``   200 with ``Connection: close``, but keep the connection open all the same
    ``big``         200 with a body of ``BIG_BODY`` bytes, the connection kept
    ``trailing``    200, then bytes nobody asked for on the same connection
    ``http10``      an HTTP/1.0 answer, then close
    ``slow``        wait ``slow_seconds`` (the request already recorded), then 200
    ``chunked``     200 with a chunked body of ``BIG_BODY`` bytes, the connection kept
    ``minus_one``   200 chunked, a chunk size of -1, then megabytes until the client stops
                    reading (or 5 s)
    ``minus_two``   200 chunked, a chunk size of -2, then a short body
    ``late_204``    204 saying ``Content-Length: 2``; the 2 bytes follow once the next request
                    on the connection has arrived
    ``late_both``   200 saying both ``Content-Length: 5`` and ``Transfer-Encoding: gzip,
                    chunked``; 5 bytes of the chunked body, the rest once the next request
                    has arrived
    ``interim``     102 Processing and 103 Early Hints, then 200; the connection kept
    ``interims``    eleven 103 Early Hints, then 200
    ``late_lengths`` 200 saying ``Content-Length: 2`` and ``Content-Length: 5``; 2 bytes, the
                    other 3 once the next request has arrived
    """

    daemon_threads = True
    allow_reuse_address = False

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__((host, port), _ScriptedHandler)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.script = ["ok"]
        self.slow_seconds = 3.0
        self.keep_alive: str | None = None  # a Keep-Alive header sent with every plain answer
        self.accepted = 0
        self.seen = 0
        self.requests: list[tuple[int, str]] = []  # (connection number, webhook-id)
        self.open: dict[int, socket.socket] = {}
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def url(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}/hook"

    def opened(self, conn: socket.socket) -> int:
        with self.lock:
            self.accepted += 1
            self.open[self.accepted] = conn
            return self.accepted

    def closed(self, number: int) -> None:
        with self.lock:
            self.open.pop(number, None)

    def step(self) -> str:
        with self.lock:
            self.seen += 1
            return self.script[min(self.seen, len(self.script)) - 1]

    def record(self, number: int, key: str) -> None:
        with self.lock:
            self.requests.append((number, key))

    def drop_idle(self, say: bytes = b"", close: bool = True) -> None:
        """Send ``say`` on every open connection (none is in the middle of a request), then
        close it unless ``close`` is false."""
        with self.lock:
            conns = list(self.open.values())
        for conn in conns:
            with contextlib.suppress(OSError):
                if say:
                    conn.sendall(say)
                if close:
                    conn.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.stop.set()
        self.shutdown()
        self.server_close()
        self.drop_idle()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away: expected here


class _ScriptedHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Scripted

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.number = self.server.opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.closed(self.number)

    def do_POST(self) -> None:
        server = self.server
        step = server.step()
        key = self.headers.get(HEADER_ID, "")
        if step == "drop_unread":
            server.record(self.number, key)
            self.close_connection = True
            return
        self.rfile.read(int(self.headers["Content-Length"]))
        server.record(self.number, key)
        if step == "drop":
            self.close_connection = True
            return
        if step == "slow" and server.stop.wait(server.slow_seconds):
            return
        if step in RAW_ANSWERS:
            self.raw_answer(step)
            return
        body = b"x" * BIG_BODY if step == "big" else b'{"ok":true}'
        if step == "http10":
            self.protocol_version = "HTTP/1.0"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        if step == "say_close":
            self.send_header("Connection", "close")
        if server.keep_alive is not None:
            self.send_header("Keep-Alive", server.keep_alive)
        self.end_headers()
        self.close_connection = step == "http10"
        self.wfile.write(body + (b"HTTP/1.1 200 OK\r\n" if step == "trailing" else b""))


    def raw_answer(self, step: str) -> None:
        head, late = RAW_ANSWERS[step]
        self.wfile.write(head)
        self.wfile.flush()
        if step == "minus_one":
            # Until the client stops reading, or for longer than any send deadline in these tests.
            until, blob = time.monotonic() + 5.0, b"x" * (1024 * 1024)
            with contextlib.suppress(OSError):
                while time.monotonic() < until and not self.server.stop.is_set():
                    self.wfile.write(blob)
            self.close_connection = True
        elif late:
            # The rest of this answer arrives after the next request on the connection has:
            # a client that kept the connection reads it as the start of the next answer.
            readable, _, _ = select.select([self.connection], [], [], 2.0)
            if readable:
                with contextlib.suppress(OSError):
                    self.wfile.write(late)


# For the raw steps: what is written at once, and what follows the next request.
RAW_ANSWERS: dict[str, tuple[bytes, bytes]] = {
    "chunked": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                + f"{BIG_BODY:x}\r\n".encode() + b"x" * BIG_BODY + b"\r\n0\r\n\r\n", b""),
    "minus_one": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n", b""),
    "minus_two": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-2\r\nxx\r\n0\r\n\r\n",
                  b""),
    "interim": (b"HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 103 Early Hints\r\n"
                b"Link: </style.css>; rel=preload\r\n\r\n"
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", b""),
    "interims": (b"HTTP/1.1 103 Early Hints\r\n\r\n" * 11
                 + b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", b""),
    "late_204": (b"HTTP/1.1 204 No Content\r\nContent-Length: 2\r\n\r\n", b"{}"),
    "late_both": (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
                  b"Transfer-Encoding: gzip, chunked\r\n\r\n5\r\nhe", b"llo\r\n0\r\n\r\n"),
    "late_lengths": (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\nhe",
                     b"llo"),
}


@pytest.fixture
def server() -> Iterator[Scripted]:
    scripted = Scripted()
    yield scripted
    scripted.close()


@pytest.fixture
def channel() -> Iterator[WebhookChannel]:
    made = WebhookChannel(allow=["127.0.0.1/32"], connect_timeout=1.0, read_timeout=1.0)
    yield made
    made.close()


def keys(server: Scripted) -> list[str]:
    return [key for _, key in server.requests]


# --- reuse ------------------------------------------------------------------------------------


def test_consecutive_sends_share_one_connection(server: Scripted, channel: WebhookChannel) -> None:
    results = [channel.send(message(server.url(), key=f"k{i}"), NOW) for i in range(3)]
    assert [r.outcome for r in results] == [Outcome.SENT] * 3
    assert server.accepted == 1
    assert server.requests == [(1, "k0"), (1, "k1"), (1, "k2")]
    assert channel.idle_connections == 1


def test_the_receiver_keeps_connections_only_when_asked(channel: WebhookChannel) -> None:
    with WebhookReceiver(SECRET, clock=FixedClock(NOW), keep_alive=True) as kept, \
            WebhookReceiver(SECRET, clock=FixedClock(NOW)) as closing:
        sent = [channel.send(message(rcv.hook_url("a"), key=f"k{i}"), NOW)
                for rcv in (kept, closing) for i in (1, 2)]
        assert [r.outcome for r in sent] == [Outcome.SENT] * 4
        # HTTP/1.0 answers (the receiver's default) close their connection.
        assert (kept.accepted_connections, closing.accepted_connections) == (1, 2)
        assert kept.stats()["effects"] == closing.stats()["effects"] == {"k1": 1, "k2": 1}


def test_https_connections_are_reused(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path, "hooks.example.test")
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    channel = WebhookChannel(
        allow=["127.0.0.1"], resolver=lambda host, port: ["127.0.0.1"],
        ssl_context=ssl.create_default_context(cafile=cert),
    )
    with WebhookReceiver(SECRET, clock=FixedClock(NOW), tls=server_tls, keep_alive=True) as rcv:
        url = f"https://hooks.example.test:{rcv.port}/hooks/a"
        sent = [channel.send(message(url, key=f"k{i}"), NOW) for i in range(3)]
        accepted = rcv.accepted_connections
    channel.close()
    assert [(r.outcome, r.status_code) for r in sent] == [(Outcome.SENT, 200)] * 3
    assert accepted == 1


def test_consecutive_batches_from_many_threads_reuse_the_kept_connections(
        channel: WebhookChannel) -> None:
    with WebhookReceiver(SECRET, clock=FixedClock(NOW), keep_alive=True) as rcv, \
            ThreadPoolExecutor(max_workers=10) as pool:
        def batch(name: str) -> list[Outcome]:
            return list(pool.map(
                lambda i: channel.send(message(rcv.hook_url("a"), key=f"{name}{i}"), NOW).outcome,
                range(30)))

        first = batch("first")
        after_first = rcv.accepted_connections
        second = batch("second")
        after_second = rcv.accepted_connections
    assert first == second == [Outcome.SENT] * 30
    assert 1 <= after_first <= 10
    assert after_second == after_first  # the second batch opened no connection


# --- what is never reused ---------------------------------------------------------------------


def test_a_connection_closed_while_idle_is_not_used(
        server: Scripted, channel: WebhookChannel) -> None:
    assert channel.send(message(server.url(), key="k1"), NOW).outcome is Outcome.SENT
    server.drop_idle()
    after = channel.send(message(server.url(), key="k2"), NOW)
    assert (after.outcome, after.status_code) == (Outcome.SENT, 200)
    assert channel.send(message(server.url(), key="k3"), NOW).outcome is Outcome.SENT
    assert server.accepted == 2  # the second send opened a new one, the third reused it
    assert keys(server) == ["k1", "k2", "k3"]


@pytest.mark.parametrize("close", [True, False], ids=["then-closed", "left-open"])
def test_a_connection_that_became_readable_while_idle_is_not_used(
        server: Scripted, channel: WebhookChannel, close: bool) -> None:
    # Read as the answer to the next request, the server's idle-timeout 408 would make a
    # delivered webhook look like a refused one.
    assert channel.send(message(server.url(), key="k1"), NOW).outcome is Outcome.SENT
    server.drop_idle(say=IDLE_TIMEOUT_ANSWER, close=close)
    after = channel.send(message(server.url(), key="k2"), NOW)
    assert (after.outcome, after.status_code) == (Outcome.SENT, 200)
    assert channel.send(message(server.url(), key="k3"), NOW).outcome is Outcome.SENT
    assert server.accepted == 2
    assert keys(server) == ["k1", "k2", "k3"]


def test_a_connection_idle_longer_than_the_keep_alive_is_not_reused(server: Scripted) -> None:
    ticks = [100.0]
    channel = WebhookChannel(allow=["127.0.0.1/32"], read_timeout=1.0, keep_alive_seconds=4.0,
                             monotonic=lambda: ticks[0])
    try:
        outcomes = [channel.send(message(server.url(), key="k1"), NOW).outcome]
        ticks[0] += 3.9
        outcomes.append(channel.send(message(server.url(), key="k2"), NOW).outcome)
        assert server.accepted == 1  # within the limit: reused
        ticks[0] += 4.1
        outcomes.append(channel.send(message(server.url(), key="k3"), NOW).outcome)
    finally:
        channel.close()
    assert outcomes == [Outcome.SENT] * 3
    assert server.accepted == 2
    assert [number for number, _ in server.requests] == [1, 1, 2]


def test_a_changed_dns_answer_means_a_new_connection_to_the_new_address() -> None:
    first = Scripted("127.0.0.1")
    second = None
    for _ in range(5):  # the same port on another loopback address; rarely taken
        try:
            second = Scripted("127.0.0.2", first.port)
            break
        except OSError:
            first.close()
            first = Scripted("127.0.0.1")
    assert second is not None
    answers = iter([["127.0.0.1"], ["127.0.0.2"], ["127.0.0.1"]])
    channel = WebhookChannel(allow=["127.0.0.0/8"], read_timeout=1.0,
                             resolver=lambda host, port: next(answers))
    url = f"http://hooks.example.test:{first.port}/hook"
    try:
        outcomes = [channel.send(message(url, key=f"k{i}"), NOW).outcome for i in range(3)]
    finally:
        channel.close()
        first.close()
        second.close()
    assert outcomes == [Outcome.SENT] * 3
    assert (first.requests, second.requests) == ([(1, "k0"), (1, "k2")], [(1, "k1")])
    assert (first.accepted, second.accepted) == (1, 1)


def test_another_host_name_for_the_same_address_gets_its_own_connection(
        server: Scripted) -> None:
    channel = WebhookChannel(allow=["127.0.0.1/32"], read_timeout=1.0,
                             resolver=lambda host, port: ["127.0.0.1"])
    try:
        outcomes = [channel.send(message(server.url(host), key=host), NOW).outcome
                    for host in ("a.example.test", "b.example.test", "a.example.test")]
    finally:
        channel.close()
    assert outcomes == [Outcome.SENT] * 3
    assert server.requests == [(1, "a.example.test"), (2, "b.example.test"),
                               (1, "a.example.test")]


def test_the_address_guard_is_asked_before_a_kept_connection_is_used(server: Scripted) -> None:
    answers = iter([["127.0.0.1"], ["127.0.0.1", "10.0.0.1"]])
    channel = WebhookChannel(allow=["127.0.0.1/32"], read_timeout=1.0,
                             resolver=lambda host, port: next(answers))
    url = f"http://hooks.example.test:{server.port}/hook"
    try:
        sent = channel.send(message(url, key="k1"), NOW)
        refused = channel.send(message(url, key="k2"), NOW)
    finally:
        channel.close()
    assert sent.outcome is Outcome.SENT
    assert refused.outcome is Outcome.PERMANENT
    assert refused.detail.startswith("destination 10.0.0.1 is private")
    assert keys(server) == ["k1"]


@pytest.mark.parametrize(
    "step", ["say_close", "big", "trailing", "http10"],
    ids=["connection-close", "body-over-the-cap", "bytes-after-the-answer", "http-1.0"])
def test_an_answer_that_is_not_clean_leaves_nothing_kept(server: Scripted, step: str) -> None:
    channel = WebhookChannel(allow=["127.0.0.1/32"], read_timeout=1.0,
                             max_response_bytes=BIG_BODY // 2)
    server.script = ["ok", step, "ok"]
    try:
        results = [channel.send(message(server.url(), key=f"k{i}"), NOW) for i in range(3)]
        idle_after_each = channel.idle_connections
    finally:
        channel.close()
    assert [(r.outcome, r.status_code) for r in results] == [(Outcome.SENT, 200)] * 3
    # The first connection carried the second request, then was closed; the third opened anew.
    assert [number for number, _ in server.requests] == [1, 1, 2]
    assert idle_after_each == 1


def test_a_body_that_fits_the_cap_is_read_and_the_connection_kept(server: Scripted) -> None:
    channel = WebhookChannel(allow=["127.0.0.1/32"], read_timeout=1.0,
                             max_response_bytes=BIG_BODY)
    server.script = ["big"]
    try:
        results = [channel.send(message(server.url(), key=f"k{i}"), NOW) for i in range(2)]
    finally:
        channel.close()
    assert [r.outcome for r in results] == [Outcome.SENT] * 2
    assert server.accepted == 1


def test_a_chunked_body_exactly_at_the_cap_is_read_to_its_end_and_the_connection_kept(
        server: Scripted) -> None:
    channel = WebhookChannel(allow=["127.0.0.1/32"], read_timeout=1.0,
                             max_response_bytes=BIG_BODY)
    server.script = ["chunked"]
    try:
        results = [channel.send(message(server.url(), key=f"k{i}"), NOW) for i in range(2)]
    finally:
        channel.close()
    assert [r.outcome for r in results] == [Outcome.SENT] * 2
    assert server.requests == [(1, "k0"), (1, "k1")]


@pytest.mark.parametrize("step", ["minus_one", "minus_two"])
def test_a_negative_chunk_size_ends_the_read_and_the_status_stands(
        server: Scripted, step: str) -> None:
    # -1 would have http.client read to the end of the stream, past any cap, until the deadline;
    # -2 would make it raise a ValueError out of the send.
    channel = WebhookChannel(allow=["127.0.0.1/32"], read_timeout=1.0, send_timeout=2.0,
                             max_response_bytes=BIG_BODY)
    server.script = [step, "ok"]
    try:
        broken = channel.send(message(server.url(), key="k1"), NOW)
        idle = channel.idle_connections
        after = channel.send(message(server.url(), key="k2"), NOW)
    finally:
        channel.close()
    assert (broken.outcome, broken.status_code, broken.detail) == (Outcome.SENT, 200, "HTTP 200 OK")
    assert idle == 0
    assert after.outcome is Outcome.SENT
    assert server.requests == [(1, "k1"), (2, "k2")]


def test_informational_answers_are_skipped_to_the_final_one(
        server: Scripted, channel: WebhookChannel) -> None:
    server.script = ["interim"]
    results = [channel.send(message(server.url(), key=f"k{i}"), NOW) for i in range(2)]
    assert [(r.outcome, r.status_code, r.detail) for r in results] == [
        (Outcome.SENT, 200, "HTTP 200 OK")] * 2
    assert server.requests == [(1, "k0"), (1, "k1")]


def test_informational_answers_are_skipped_only_up_to_a_limit(
        server: Scripted, channel: WebhookChannel) -> None:
    server.script = ["interims", "ok"]
    results = [channel.send(message(server.url(), key=f"k{i}"), NOW) for i in range(2)]
    assert [(r.outcome, r.status_code) for r in results] == [
        (Outcome.UNKNOWN, 103), (Outcome.SENT, 200)]
    assert results[0].detail == "HTTP 103 Early Hints: unexpected status"
    assert server.requests == [(1, "k0"), (2, "k1")]


@pytest.mark.parametrize("step", ["late_204", "late_both", "late_lengths"])
def test_an_answer_with_ambiguous_framing_leaves_nothing_kept(
        server: Scripted, channel: WebhookChannel, step: str) -> None:
    # A 204 may not announce a body; an answer may not carry both Content-Length and
    # Transfer-Encoding, nor two lengths: where it ends is not known, so what follows may be
    # part of it.
    server.script = [step, "ok"]
    first = channel.send(message(server.url(), key="k1"), NOW)
    second = channel.send(message(server.url(), key="k2"), NOW)
    assert first.outcome is Outcome.SENT
    assert (second.outcome, second.status_code) == (Outcome.SENT, 200)
    assert server.requests == [(1, "k1"), (2, "k2")]


def test_a_read_timeout_on_a_kept_connection_is_unknown_and_not_retried(
        server: Scripted) -> None:
    channel = WebhookChannel(allow=["127.0.0.1/32"], read_timeout=0.3)
    server.script = ["ok", "slow", "ok"]
    try:
        sent = channel.send(message(server.url(), key="k1"), NOW)
        slow = channel.send(message(server.url(), key="k2"), NOW)
        idle = channel.idle_connections
        again = channel.send(message(server.url(), key="k3"), NOW)
    finally:
        channel.close()
    assert (sent.outcome, again.outcome) == (Outcome.SENT, Outcome.SENT)
    assert slow.outcome is Outcome.UNKNOWN
    assert slow.detail == "no response within 0.3s (read timeout); the request was sent"
    assert idle == 0
    assert server.requests == [(1, "k1"), (1, "k2"), (2, "k3")]


def test_the_deadline_bounds_a_send_on_a_kept_connection(server: Scripted) -> None:
    channel = WebhookChannel(allow=["127.0.0.1/32"], read_timeout=2.0, send_timeout=1.0)
    server.script = ["ok", "slow"]
    try:
        sent = channel.send(message(server.url(), key="k1"), NOW)
        late = channel.send(message(server.url(), key="k2"), NOW)
        idle = channel.idle_connections
    finally:
        channel.close()
    assert sent.outcome is Outcome.SENT
    assert (late.outcome, late.detail) == (
        Outcome.UNKNOWN,
        "send deadline of 1.0s hit while waiting for the response; the request was sent")
    assert idle == 0
    assert server.requests == [(1, "k1"), (1, "k2")]


# --- a kept connection closed as the request arrives --------------------------------------------


@pytest.mark.parametrize("step", ["drop", "drop_unread"])
def test_a_kept_connection_closed_as_the_request_arrives_is_retried_on_a_new_one(
        server: Scripted, channel: WebhookChannel, step: str) -> None:
    server.script = ["ok", step, "ok"]
    big = {"blob": "x" * (16 * 1024 * 1024)} if step == "drop_unread" else {"amount": "1"}
    first = channel.send(message(server.url(), key="k1"), NOW)
    second = channel.send(dataclasses.replace(message(server.url(), key="k2"), payload=big), NOW)
    assert (first.outcome, second.outcome, second.status_code) == (Outcome.SENT, Outcome.SENT, 200)
    # The receiver saw the second request twice, with one webhook-id: its dedupe contract.
    assert server.requests == [(1, "k1"), (1, "k2"), (2, "k2")]


def test_a_new_connection_closed_without_an_answer_is_unknown_and_not_retried(
        server: Scripted, channel: WebhookChannel) -> None:
    server.script = ["drop", "ok"]
    result = channel.send(message(server.url(), key="k1"), NOW)
    assert result.outcome is Outcome.UNKNOWN
    assert result.detail.startswith(
        "connection lost after the request was sent (RemoteDisconnected")
    assert server.requests == [(1, "k1")]


def test_when_the_retry_cannot_connect_the_first_request_may_have_arrived(
        server: Scripted, channel: WebhookChannel) -> None:
    server.script = ["ok", "drop"]
    assert channel.send(message(server.url(), key="k1"), NOW).outcome is Outcome.SENT
    server.shutdown()
    server.server_close()  # the kept connection still reaches its handler; nothing new does
    result = channel.send(message(server.url(), key="k2"), NOW)
    assert result.outcome is Outcome.UNKNOWN
    assert result.detail == (
        f"connection refused by 127.0.0.1:{server.port}; the request was written on a kept "
        "connection before the receiver closed it, and may have been received")
    assert server.requests == [(1, "k1"), (1, "k2")]


# --- bounds -----------------------------------------------------------------------------------


def overlapping_sends(channel: WebhookChannel, urls: list[str]) -> list[Outcome]:
    """Send to each URL at once, each on its own connection (the server answers slowly)."""
    with ThreadPoolExecutor(max_workers=len(urls)) as pool:
        def send(pair: tuple[int, str]) -> Outcome:
            return channel.send(message(pair[1], key=f"k{pair[0]}"), NOW).outcome

        return list(pool.map(send, enumerate(urls)))


def test_idle_connections_are_bounded_per_destination_and_in_all(server: Scripted) -> None:
    server.script = ["slow"]
    server.slow_seconds = 0.3
    channel = WebhookChannel(allow=["127.0.0.1/32"], read_timeout=2.0,
                             resolver=lambda host, port: ["127.0.0.1"],
                             max_idle_per_destination=2, max_idle=3)
    try:
        outcomes = overlapping_sends(channel, [server.url("a.example.test")] * 4)
        per_destination = channel.idle_connections
        outcomes += overlapping_sends(channel, [server.url("b.example.test")] * 4)
        in_all = channel.idle_connections
        accepted = server.accepted
        # The pool made room for b's connections by closing a's, idle longer: both are kept.
        outcomes += overlapping_sends(channel, [server.url("b.example.test")] * 2)
    finally:
        channel.close()
    assert outcomes == [Outcome.SENT] * 10
    assert (accepted, server.accepted) == (8, 8)
    assert (per_destination, in_all) == (2, 3)


def test_close_closes_the_kept_connections(server: Scripted, channel: WebhookChannel) -> None:
    assert channel.send(message(server.url(), key="k1"), NOW).outcome is Outcome.SENT
    assert channel.idle_connections == 1
    channel.close()
    assert channel.idle_connections == 0
    assert channel.send(message(server.url(), key="k2"), NOW).outcome is Outcome.SENT
    assert server.accepted == 2


def test_no_connection_is_kept_with_a_keep_alive_of_zero(server: Scripted) -> None:
    channel = WebhookChannel(allow=["127.0.0.1/32"], keep_alive_seconds=0)
    outcomes = [channel.send(message(server.url(), key=f"k{i}"), NOW).outcome for i in range(2)]
    assert outcomes == [Outcome.SENT] * 2
    assert (server.accepted, channel.idle_connections) == (2, 0)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"keep_alive_seconds": -1}, "keep_alive_seconds must not be negative"),
        ({"max_idle": -1}, "max_idle_per_destination and max_idle must not be negative"),
        ({"max_idle_per_destination": -1},
         "max_idle_per_destination and max_idle must not be negative"),
    ],
)
def test_the_keep_alive_settings_are_validated(kwargs: dict[str, Any], error: str) -> None:
    with pytest.raises(InvalidInput, match=error):
        WebhookChannel(**kwargs)


def test_connections_idle_too_long_are_closed_while_others_are_kept(server: Scripted) -> None:
    ticks = [100.0]
    channel = WebhookChannel(allow=["127.0.0.1/32"], read_timeout=1.0, keep_alive_seconds=4.0,
                             resolver=lambda host, port: ["127.0.0.1"],
                             monotonic=lambda: ticks[0])
    try:
        sent = [channel.send(message(server.url("a.example.test"), key="k1"), NOW).outcome]
        ticks[0] += 5.0
        sent.append(channel.send(message(server.url("b.example.test"), key="k2"), NOW).outcome)
        idle = channel.idle_connections
    finally:
        channel.close()
    assert sent == [Outcome.SENT] * 2
    assert idle == 1  # b's; a's, idle too long, was closed rather than left open


# --- the receiver's Keep-Alive header ---------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "kept_for"),
    [
        (None, 4.0),
        ("timeout=2", 1.0),  # gunicorn's default: kept 1 s less than the receiver keeps it
        ("timeout=5, max=100", 4.0),  # the channel's own limit is the shorter
        ("timeout=3", 2.0),
        ("  TimeOut = 3 ,MAX=50  ", 2.0),
        ('timeout="3"', 2.0),
        ("max=2", 4.0),
        ("timeout=abc", 4.0),  # malformed: the channel's own limit
        ("timeout=-3", 4.0),
        ("timeout=2.5", 4.0),
        ("timeout=" + "9" * 5000, 4.0),
        ("timeout", 4.0),
        (",,=,timeout==2", 4.0),
        ("timeout=\u00b3", 4.0),  # a digit to str.isdigit, not to int()
        ("timeout=3, timeout=9", 2.0),  # two values: the shorter
    ],
)
def test_a_connection_is_kept_no_longer_than_the_receiver_says(
        server: Scripted, header: str | None, kept_for: float) -> None:
    ticks = [100.0]
    server.keep_alive = header
    channel = WebhookChannel(allow=["127.0.0.1/32"], read_timeout=1.0, keep_alive_seconds=4.0,
                             monotonic=lambda: ticks[0])
    try:
        outcomes = [channel.send(message(server.url(), key="k1"), NOW).outcome]
        ticks[0] += kept_for - 0.05
        outcomes.append(channel.send(message(server.url(), key="k2"), NOW).outcome)
        ticks[0] += kept_for + 0.05
        outcomes.append(channel.send(message(server.url(), key="k3"), NOW).outcome)
    finally:
        channel.close()
    assert outcomes == [Outcome.SENT] * 3
    # Reused just within the limit, not just after it.
    assert [number for number, _ in server.requests] == [1, 1, 2]


@pytest.mark.parametrize("header", ["timeout=1", "timeout=0", "timeout=1, max=9", "max=1",
                                    "timeout=30, MAX = 0", "max=1, max=50"])
def test_a_connection_the_receiver_will_close_at_once_is_not_kept(
        server: Scripted, header: str) -> None:
    server.keep_alive = header
    channel = WebhookChannel(allow=["127.0.0.1/32"], read_timeout=1.0, keep_alive_seconds=4.0,
                             monotonic=lambda: 100.0)
    try:
        outcomes = [channel.send(message(server.url(), key=f"k{i}"), NOW).outcome
                    for i in range(2)]
        idle = channel.idle_connections
    finally:
        channel.close()
    assert outcomes == [Outcome.SENT] * 2
    assert idle == 0
    assert [number for number, _ in server.requests] == [1, 2]


def test_a_shorter_keep_alive_does_not_expire_longer_ones_kept_before_it(
        server: Scripted) -> None:
    # Two connections to one destination: the older may stay 4 s, the newer only 1 s. After
    # 2 s the newer is gone and the older is still used.
    ticks = [100.0]
    server.script = ["slow"]
    server.slow_seconds = 0.3
    channel = WebhookChannel(allow=["127.0.0.1/32"], read_timeout=2.0, keep_alive_seconds=4.0,
                             monotonic=lambda: ticks[0])
    try:
        server.keep_alive = None
        outcomes = overlapping_sends(channel, [server.url()] * 2)
        assert channel.idle_connections == 2
        # Take the newest (reuse order) and give it back under a shorter limit.
        server.keep_alive = "timeout=2"
        outcomes.append(channel.send(message(server.url(), key="k9"), NOW).outcome)
        reused = server.requests[-1][0]
        ticks[0] += 2.0
        outcomes.append(channel.send(message(server.url(), key="k10"), NOW).outcome)
        last = server.requests[-1][0]
    finally:
        channel.close()
    assert outcomes == [Outcome.SENT] * 4
    assert server.accepted == 2
    assert last != reused  # the 1-s one expired; the other, kept for 4 s, carried the request
