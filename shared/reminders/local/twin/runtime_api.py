"""A local Lambda Runtime API endpoint: the four paths the runtime interface client calls.

``GET /2018-06-01/runtime/invocation/next`` hands out the invocation :meth:`RuntimeApi.offer`
put there, with the headers Lambda sends (request id, deadline, function ARN, trace id);
``POST …/invocation/{id}/response`` and ``…/{id}/error`` end it; ``POST …/init/error``
reports a failed initialisation. Everything the runtime says becomes an event that the
instance driving it reads with :meth:`RuntimeApi.next_event` (bounded by a timeout). A
response for any other request id than the one handed out is refused with 400, as Lambda
refuses it, and so is a response over Lambda's 6 MB synchronous payload limit (413).

One endpoint per function instance, on 127.0.0.1, in a thread of the calling process
(stdlib http.server only).
"""

from __future__ import annotations

import json
import queue
import threading
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PREFIX = "/2018-06-01/runtime"
MAX_RESPONSE_BYTES = 6 * 1024 * 1024
# How long a pending `next` waits between looks at whether the endpoint is closing.
_POLL_SECONDS = 0.1


@dataclass(frozen=True)
class Invocation:
    request_id: str
    payload: bytes
    deadline_ms: int  # epoch milliseconds, as Lambda-Runtime-Deadline-Ms
    function_arn: str
    trace_id: str


@dataclass(frozen=True)
class RuntimeEvent:
    """What the runtime said: ``kind`` is ``next`` (ready for an invocation), ``response``,
    ``error`` (the invocation failed) or ``init_error``; ``body`` as posted."""

    kind: str
    request_id: str | None = None
    body: bytes = b""
    error_type: str | None = None

    def error(self) -> dict[str, Any]:
        """The posted error document (errorType, errorMessage, stackTrace), however it came."""
        try:
            document = json.loads(self.body or b"{}")
        except ValueError:
            document = {"errorMessage": self.body.decode(errors="replace")}
        if not isinstance(document, dict):
            document = {"errorMessage": str(document)}
        document.setdefault("errorType", self.error_type or "Runtime.Unknown")
        return document


class RuntimeApi:
    """The endpoint of one function instance. :attr:`address` is what
    ``AWS_LAMBDA_RUNTIME_API`` holds (``127.0.0.1:port``)."""

    def __init__(self) -> None:
        self._events: queue.Queue[RuntimeEvent] = queue.Queue()
        self._offered: queue.Queue[Invocation] = queue.Queue(maxsize=1)
        self._lock = threading.Lock()
        self._current: Invocation | None = None
        self._closed = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": _POLL_SECONDS},
                                        name="runtime-api", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def offer(self, invocation: Invocation) -> None:
        """Make ``invocation`` the one the next ``next`` call receives (one at a time: the
        instance offers another only after this one ended)."""
        self._offered.put_nowait(invocation)

    def next_event(self, timeout: float) -> RuntimeEvent | None:
        """The runtime's next event, or None when it said nothing for ``timeout`` seconds."""
        try:
            return self._events.get(timeout=timeout)
        except queue.Empty:
            return None

    def abandon(self) -> None:
        """Forget the invocation in flight (its process was killed): a late response for it
        is refused."""
        with self._lock:
            self._current = None
        while True:
            try:
                self._offered.get_nowait()
            except queue.Empty:
                return

    def close(self) -> None:
        self._closed.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # Called from the server's threads.
    def _wait_for_invocation(self) -> Invocation | None:
        self._events.put(RuntimeEvent("next"))
        while not self._closed.is_set():
            try:
                invocation = self._offered.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                continue
            with self._lock:
                self._current = invocation
            return invocation
        return None

    def _end(self, request_id: str, event: RuntimeEvent) -> bool:
        with self._lock:
            if self._current is None or self._current.request_id != request_id:
                return False
            self._current = None
        self._events.put(event)
        return True

    def _init_error(self, event: RuntimeEvent) -> None:
        self._events.put(event)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # the runtime's process was killed mid-call: nothing to report
        super().handle_error(request, client_address)


def _handler_for(api: RuntimeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return  # the runtime's calls are not the function's log

        def _answer(self, status: HTTPStatus, document: Any,
                    headers: dict[str, str] | None = None, raw: bytes | None = None) -> None:
            body = raw if raw is not None else json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def do_GET(self) -> None:
            if self.path != f"{PREFIX}/invocation/next":
                self._answer(HTTPStatus.NOT_FOUND, {"errorType": "NotFound"})
                return
            invocation = api._wait_for_invocation()
            if invocation is None:  # closing
                self._answer(HTTPStatus.INTERNAL_SERVER_ERROR, {"errorType": "Shutdown"})
                return
            self._answer(HTTPStatus.OK, None, raw=invocation.payload, headers={
                "Lambda-Runtime-Aws-Request-Id": invocation.request_id,
                "Lambda-Runtime-Deadline-Ms": str(invocation.deadline_ms),
                "Lambda-Runtime-Invoked-Function-Arn": invocation.function_arn,
                "Lambda-Runtime-Trace-Id": invocation.trace_id,
            })

        def do_POST(self) -> None:
            body = self._body()
            error_type = self.headers.get("Lambda-Runtime-Function-Error-Type")
            if self.path == f"{PREFIX}/init/error":
                api._init_error(RuntimeEvent("init_error", body=body, error_type=error_type))
                self._answer(HTTPStatus.ACCEPTED, {"status": "OK"})
                return
            parts = self.path.removeprefix(f"{PREFIX}/invocation/").split("/")
            if not self.path.startswith(f"{PREFIX}/invocation/") or len(parts) != 2 or \
                    parts[1] not in ("response", "error"):
                self._answer(HTTPStatus.NOT_FOUND, {"errorType": "NotFound"})
                return
            request_id, outcome = parts
            if outcome == "response" and len(body) > MAX_RESPONSE_BYTES:
                too_large = json.dumps({
                    "errorType": "Function.ResponseSizeTooLarge",
                    "errorMessage": f"Response payload size ({len(body)} bytes) exceeded "
                                    f"maximum allowed payload size ({MAX_RESPONSE_BYTES} "
                                    "bytes)."}).encode()
                api._end(request_id, RuntimeEvent("error", request_id, too_large,
                                                  "Function.ResponseSizeTooLarge"))
                self._answer(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                             {"errorType": "RequestEntityTooLarge"})
                return
            event = RuntimeEvent(outcome, request_id, body, error_type)
            if not api._end(request_id, event):
                self._answer(HTTPStatus.BAD_REQUEST, {
                    "errorType": "InvalidRequestID",
                    "errorMessage": f"no invocation {request_id} is in flight"})
                return
            self._answer(HTTPStatus.ACCEPTED, {"status": "OK"})

    return Handler
