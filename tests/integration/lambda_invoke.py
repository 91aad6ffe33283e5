"""A stand-in for Lambda's Invoke API over HTTP (moto runs functions only in Docker, which is
not here): ``POST /2015-03-31/functions/NAME/invocations`` calls a handler in this process
with the request body as its event, as Lambda does for a synchronous invoke, and answers the
way Lambda does (the handler's JSON, or ``X-Amz-Function-Error`` when it raised). So the
command line's boto3 invoker runs for real, over HTTP, up to the handler.

An asynchronous invoke (``X-Amz-Invocation-Type: Event``) is answered 202 with no body, as
Lambda does once it has queued the event; the handler runs before the answer (Lambda would
run it later) and what it raises is kept in ``async_errors``, never answered."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ACCOUNT = "123456789012"  # moto's default account: the identity moto's STS answers with


@dataclass
class Context:
    """The attributes of Lambda's context object the handlers and Powertools read."""

    function_name: str
    aws_request_id: str = "00000000-0000-0000-0000-000000000001"
    memory_limit_in_mb: int = 256
    region: str = "us-east-1"  # the local stack's (reminders.local.stack.REGION)
    account: str = ACCOUNT

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:{self.region}:{self.account}:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


@dataclass
class LambdaStandIn:
    functions: dict[str, Callable[[Any, Any], Any]]
    calls: list[dict[str, Any]] = field(default_factory=list)
    async_errors: list[str] = field(default_factory=list)

    def start(self) -> str:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                parts = self.path.split("/")
                # /2015-03-31/functions/NAME/invocations
                name = parts[3] if len(parts) > 4 and parts[4] == "invocations" else ""
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                stand_in.calls.append({"function": name, "headers": dict(self.headers),
                                       "body": body})
                if name not in stand_in.functions:
                    self._answer(404, {"Type": "User", "message": f"Function not found: {name}"},
                                 {"x-amzn-ErrorType": "ResourceNotFoundException"})
                    return
                if self.headers.get("X-Amz-Invocation-Type") == "Event":
                    try:
                        stand_in.functions[name](json.loads(body), Context(name))
                    except Exception as exc:  # noqa: BLE001 (Lambda would retry, then drop)
                        stand_in.async_errors.append(f"{type(exc).__name__}: {exc}")
                    self._answer(202, None, {})
                    return
                try:
                    result = stand_in.functions[name](json.loads(body), Context(name))
                except Exception as exc:  # noqa: BLE001 (Lambda reports it as a function error)
                    self._answer(200, {"errorMessage": str(exc),
                                       "errorType": type(exc).__name__},
                                 {"X-Amz-Function-Error": "Unhandled"})
                    return
                self._answer(200, result, {"X-Amz-Executed-Version": "$LATEST"})

            def _answer(self, status: int, data: Any, headers: dict[str, str]) -> None:
                payload = b"" if data is None else json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
