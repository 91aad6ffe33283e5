"""A local webhook receiver that verifies signatures and counts effects per idempotency key.

Used in-process by tests (``WebhookReceiver(secret).start()``) and as a process by the local
stack (``python -m reminders.local.receiver --secret whsec_... --port 8787`` prints its URL once
ready and serves until SIGTERM). ``WebhookReceiver(secret, tls=context)`` serves HTTPS with a
server context the caller loaded its certificate into (the benchmarks measure TLS with it).
It answers in HTTP/1.0 and closes every connection after one answer;
``WebhookReceiver(secret, keep_alive=True)`` answers in HTTP/1.1 and keeps connections open for
further requests (``accepted_connections`` counts the connections it accepted, either way).

Endpoints are scripted by their URL, so a test can register one that misbehaves::

    /hooks/<name>?codes=500,503,200   answers in order per endpoint name; the last one repeats
                 &retry_after=30       Retry-After: 30 on 429/503 answers
                 &retry_after_date=1   ...as an HTTP-date (receiver clock + retry_after, default 60)
                 &retry_after_raw=...  ...exactly this text (an absurd value, a malformed one)
                 &delay=2.5            wait before answering (the effect is already recorded)
                 &delays=30,0          ...these waits in order per endpoint name, the last one
                                       repeating (a send that hangs once)
                 &drip_ms=50           write the answer, status line and headers included, one
                                       byte every 50 ms (a receiver that never quite times out)
                 &dedup=0              behave like a receiver that ignores the key

Every POST must carry a valid Standard Webhooks signature by one of the receiver's secrets
(several during a rotation: ``accept(secret)`` adds one, ``--secret`` may be repeated); a bad one
is answered 401, counted in ``bad_signatures`` and has no other effect. Which secrets signed each
verified request is kept (``signers(key)``), so a test sees both signatures of a rotation's
overlap present and valid, and the old one gone after it. A 2xx answer is an *effect*, recorded
once per ``webhook-id``; a later 2xx for the same id is answered 200 again but counted in
``duplicates``.

``GET /_stats`` returns the counters as JSON, ``GET /_payloads[?key=...]`` the bodies received,
``POST /_reset`` clears everything.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import signal
import socket
import ssl
import sys
import threading
from collections import Counter
from collections.abc import Sequence
from email.utils import formatdate
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType, TracebackType
from typing import Any, TypedDict
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from reminders.channels.signing import HEADER_ID, validate_secret, verify_each
from reminders.clock import Clock, SystemClock
from reminders.errors import InvalidInput

MAX_BODY_BYTES = 1024 * 1024
DEFAULT_RETRY_AFTER_SECONDS = 60
POLL_INTERVAL = 0.05  # how soon stop() takes effect
_RETRY_AFTER_STATUSES = frozenset({429, 503})


class ReceiverStats(TypedDict):
    effects: dict[str, int]
    requests: dict[str, int]
    ok_answers: dict[str, int]
    duplicates: int
    bad_signatures: int
    by_endpoint: dict[str, int]


class _Script:
    """What an endpoint URL asks the receiver to do."""

    def __init__(self, query: str) -> None:
        params = {name: values[-1] for name, values in parse_qs(query).items()}
        try:
            codes = [int(c) for c in params.get("codes", "200").split(",") if c.strip()]
            self.retry_after = float(params["retry_after"]) if "retry_after" in params else None
            self.delay = float(params.get("delay", "0"))
            self.delays = [float(d) for d in params.get("delays", "").split(",") if d.strip()]
            self.drip = float(params.get("drip_ms", "0")) / 1000
        except ValueError as exc:
            raise InvalidInput(f"bad endpoint script {query!r}: {exc}") from None
        if not codes or any(not 200 <= c <= 599 for c in codes):
            raise InvalidInput(f"codes must be HTTP statuses 200-599, got {params.get('codes')!r}")
        if self.delay < 0 or self.drip < 0 or any(d < 0 for d in self.delays) or (
            self.retry_after is not None and self.retry_after < 0
        ):
            raise InvalidInput("delay, delays, drip_ms and retry_after must not be negative")
        self.codes = codes
        self.retry_after_date = params.get("retry_after_date", "0") not in ("0", "", "false")
        self.retry_after_raw = params.get("retry_after_raw")
        if self.retry_after_raw is not None and not self.retry_after_raw.isprintable():
            raise InvalidInput("retry_after_raw must be printable text")
        self.dedup = params.get("dedup", "1") not in ("0", "false")

    def code_for(self, index: int) -> int:
        return self.codes[min(index, len(self.codes) - 1)]

    def delay_for(self, index: int) -> float:
        if not self.delays:
            return self.delay
        return self.delays[min(index, len(self.delays) - 1)]


class _Server(ThreadingHTTPServer):
    # A consumer sends a whole batch at once (up to REMINDERS_SEND_CONCURRENCY's 500
    # connections together); the default listen backlog of 5 refuses some of them, and a
    # refused connection is retried by the client's kernel a second later.
    request_queue_size = 1024
    daemon_threads = True
    tls: ssl.SSLContext | None = None
    receiver: WebhookReceiver

    def finish_request(self, request: Any, client_address: Any) -> None:
        """With TLS, the handshake runs here, in the connection's own thread: in the accepting
        thread it would make a batch's connections wait on each other's handshakes."""
        self.receiver._opened(request)
        try:
            if self.tls is not None:
                try:
                    request = self.receiver._wrapped(
                        request, self.tls.wrap_socket(request, server_side=True))
                except (OSError, ssl.SSLError):
                    request.close()
                    return
            super().finish_request(request, client_address)
        finally:
            self.receiver._closed(request)


class WebhookReceiver:
    """A threaded HTTP server standing in for an application's webhook endpoint."""

    def __init__(
        self,
        secret: str,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        also_accept: Sequence[str] = (),
        clock: Clock | None = None,
        tolerance_seconds: int | None = None,
        verbose: bool = False,
        tls: ssl.SSLContext | None = None,
        keep_alive: bool = False,
    ) -> None:
        for one in (secret, *also_accept):
            validate_secret(one)
        self.secret = secret  # the first secret; ``secrets`` holds every one accepted
        self.secrets: list[str] = [secret, *also_accept]
        self.host = host
        self._requested_port = port
        self.clock: Clock = clock or SystemClock()
        self.tolerance_seconds = tolerance_seconds
        self.verbose = verbose
        self.tls = tls  # serve HTTPS with this context (its certificate and key loaded)
        self.keep_alive = keep_alive  # HTTP/1.1, connections kept open between requests
        self._accepted = 0
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._clear()

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> WebhookReceiver:
        if self._server is not None:
            return self
        self._stopping.clear()
        server = _Server((self.host, self._requested_port), _make_handler(self))
        server.tls = self.tls
        server.receiver = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": POLL_INTERVAL},
            name="webhook-receiver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None:
            return
        self._stopping.set()  # wakes handlers sleeping on a scripted delay
        server.shutdown()
        server.server_close()
        if self.keep_alive:
            # Connections kept open wait for their next request: end them.
            with self._lock:
                still_open = list(self._open)
            for conn in still_open:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        if thread is not None:
            thread.join()
        self._server = self._thread = None

    def __enter__(self) -> WebhookReceiver:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the receiver is not running; call start() first")
        return int(self._server.server_address[1])

    @property
    def accepted_connections(self) -> int:
        """How many connections the receiver has accepted since it started."""
        with self._lock:
            return self._accepted

    def _opened(self, conn: socket.socket) -> None:
        with self._lock:
            self._accepted += 1
            self._open.add(conn)

    def _wrapped(self, conn: socket.socket, tls: ssl.SSLSocket) -> ssl.SSLSocket:
        with self._lock:
            self._open.discard(conn)
            self._open.add(tls)
        return tls

    def _closed(self, conn: socket.socket) -> None:
        with self._lock:
            self._open.discard(conn)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    def hook_url(
        self,
        name: str,
        *,
        codes: Sequence[int] = (),
        retry_after: float | None = None,
        retry_after_date: bool = False,
        retry_after_raw: str | None = None,
        delay: float | None = None,
        delays: Sequence[float] = (),
        drip_ms: float | None = None,
        dedup: bool = True,
    ) -> str:
        """The URL of a scripted endpoint (see the module docstring)."""
        params: dict[str, str] = {}
        if codes:
            params["codes"] = ",".join(str(c) for c in codes)
        if retry_after is not None:
            params["retry_after"] = f"{retry_after:g}"
        if retry_after_date:
            params["retry_after_date"] = "1"
        if retry_after_raw is not None:
            params["retry_after_raw"] = retry_after_raw
        if delay is not None:
            params["delay"] = f"{delay:g}"
        if delays:
            params["delays"] = ",".join(f"{d:g}" for d in delays)
        if drip_ms is not None:
            params["drip_ms"] = f"{drip_ms:g}"
        if not dedup:
            params["dedup"] = "0"
        query = f"?{urlencode(params, safe=',')}" if params else ""
        return f"{self.url}/hooks/{quote(name, safe='')}{query}"

    def accept(self, secret: str) -> int:
        """Accept signatures by another secret too (a rotation); returns its position."""
        validate_secret(secret)
        with self._lock:
            self.secrets = [*self.secrets, secret]
            return len(self.secrets) - 1

    # --- state -----------------------------------------------------------------------------

    def _clear(self) -> None:
        self._effects: Counter[str] = Counter()
        self._requests: Counter[str] = Counter()
        self._ok_answers: Counter[str] = Counter()
        self._by_endpoint: Counter[str] = Counter()
        self._payloads: dict[str, list[Any]] = {}
        self._signers: dict[str, list[tuple[int, ...]]] = {}
        self._duplicates = 0
        self._bad_signatures = 0

    def reset(self) -> None:
        with self._lock:
            self._clear()

    def stats(self) -> ReceiverStats:
        with self._lock:
            return ReceiverStats(
                effects=dict(self._effects),
                requests=dict(self._requests),
                ok_answers=dict(self._ok_answers),
                duplicates=self._duplicates,
                bad_signatures=self._bad_signatures,
                by_endpoint=dict(self._by_endpoint),
            )

    def payloads(self, key: str | None = None) -> dict[str, list[Any]]:
        """Bodies received with a valid signature, per webhook-id (all, or one key)."""
        with self._lock:
            chosen = self._payloads if key is None else {key: self._payloads.get(key, [])}
            return {k: list(v) for k, v in chosen.items()}

    def signers(self, key: str) -> list[tuple[int, ...]]:
        """For each verified request with this webhook-id, in order: the positions in
        ``secrets`` of the secrets whose signature it carried, valid."""
        with self._lock:
            return list(self._signers.get(key, []))

    def _record_bad_signature(self) -> None:
        with self._lock:
            self._bad_signatures += 1

    def _record(self, endpoint: str, key: str, body: bytes, script: _Script,
                signers: tuple[int, ...] = ()) -> tuple[int, float]:
        """Count a verified request and decide its answer and how long to wait before it; a
        2xx answer is the effect."""
        try:
            payload: Any = json.loads(body)
        except ValueError:
            payload = body.decode("utf-8", "replace")
        with self._lock:
            index = self._by_endpoint[endpoint]
            code, delay = script.code_for(index), script.delay_for(index)
            self._by_endpoint[endpoint] += 1
            self._requests[key] += 1
            self._payloads.setdefault(key, []).append(payload)
            self._signers.setdefault(key, []).append(signers)
            if 200 <= code < 300:
                self._ok_answers[key] += 1
                if script.dedup and self._effects[key] > 0:
                    self._duplicates += 1
                else:
                    self._effects[key] += 1
            return code, delay

    def _retry_after_header(self, script: _Script) -> str | None:
        if script.retry_after_raw is not None:
            return script.retry_after_raw
        if script.retry_after_date:
            seconds = (
                script.retry_after
                if script.retry_after is not None
                else DEFAULT_RETRY_AFTER_SECONDS
            )
            return formatdate(self.clock.now().timestamp() + seconds, usegmt=True)
        if script.retry_after is not None:
            return str(int(script.retry_after))
        return None


def _make_handler(receiver: WebhookReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "reminders-webhook-receiver"
        protocol_version = "HTTP/1.1" if receiver.keep_alive else "HTTP/1.0"
        # An answer sent before the request's body was read ends a kept connection: the body's
        # bytes would be taken for the next request.
        unread_body = False

        def log_message(self, format: str, *args: Any) -> None:
            if receiver.verbose:
                super().log_message(format, *args)

        def _answer(
            self,
            status: int,
            document: Any,
            headers: dict[str, str] | None = None,
            drip: float = 0.0,
        ) -> None:
            body = json.dumps(document, separators=(",", ":")).encode()
            # The whole answer is composed first, so a drip can write it byte by byte.
            buffer = io.BytesIO()
            wire, self.wfile = self.wfile, buffer
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                if receiver.keep_alive and self.unread_body:
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)
                answer = buffer.getvalue()
            finally:
                self.wfile = wire
            try:
                if not drip:
                    wire.write(answer)
                    return
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for index in range(len(answer)):
                    wire.write(answer[index:index + 1])
                    if receiver._stopping.wait(drip):
                        return
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up waiting (a read-timeout test): nothing to tell it

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            if parts.path == "/_stats":
                self._answer(200, receiver.stats())
            elif parts.path == "/_payloads":
                key = parse_qs(parts.query).get("key", [None])[-1]
                self._answer(200, receiver.payloads(key))
            else:
                self._answer(404, {"error": f"no such page {parts.path}"})

        def do_POST(self) -> None:
            self.unread_body = True
            parts = urlsplit(self.path)
            if parts.path == "/_reset":
                receiver.reset()
                self._answer(200, {"reset": True})
                return
            if not parts.path.startswith("/hooks/") or parts.path == "/hooks/":
                self._answer(404, {"error": f"no such endpoint {parts.path}"})
                return
            endpoint = unquote(parts.path[len("/hooks/"):])
            length_text = self.headers.get("Content-Length")
            if length_text is None or not length_text.isdigit():
                self._answer(411, {"error": "Content-Length required"})
                return
            length = int(length_text)
            if length > MAX_BODY_BYTES:
                self._answer(413, {"error": f"body over {MAX_BODY_BYTES} bytes"})
                return
            body = self.rfile.read(length)
            self.unread_body = False
            headers = {name.lower(): value for name, value in self.headers.items()}
            with receiver._lock:
                secrets = list(receiver.secrets)
            try:
                signers = verify_each(
                    secrets,
                    headers,
                    body,
                    receiver.tolerance_seconds,
                    receiver.clock.now() if receiver.tolerance_seconds is not None else None,
                )
            except InvalidInput as exc:
                receiver._record_bad_signature()
                self._answer(401, {"error": str(exc)})
                return
            try:
                script = _Script(parts.query)
            except InvalidInput as exc:
                self._answer(400, {"error": str(exc)})
                return
            code, delay = receiver._record(endpoint, headers[HEADER_ID], body, script, signers)
            if delay:
                receiver._stopping.wait(delay)
            extra: dict[str, str] = {}
            retry_after = receiver._retry_after_header(script)
            if code in _RETRY_AFTER_STATUSES and retry_after is not None:
                extra["Retry-After"] = retry_after
            if 300 <= code < 400:
                extra["Location"] = parts.path
            try:
                phrase = HTTPStatus(code).phrase
            except ValueError:
                phrase = ""
            self._answer(code, {"status": code, "message": phrase}, extra, script.drip)

    return Handler


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m reminders.local.receiver",
        description="Local webhook receiver: verifies signatures, counts effects per key.",
    )
    parser.add_argument("--secret", required=True, action="append",
                        help="signing secret (whsec_...); repeat it to accept several")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument(
        "--tolerance", type=int, default=None, help="reject timestamps further off (seconds)"
    )
    parser.add_argument("--verbose", action="store_true", help="log each request to stderr")
    args = parser.parse_args(argv)
    try:
        receiver = WebhookReceiver(
            args.secret[0],
            args.host,
            args.port,
            also_accept=args.secret[1:],
            tolerance_seconds=args.tolerance,
            verbose=args.verbose,
        )
    except InvalidInput as exc:
        parser.error(str(exc))
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    receiver.start()
    print(receiver.url, flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        receiver.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
