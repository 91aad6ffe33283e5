"""moto in server mode (AWS APIs over HTTP on loopback), with Nagle's algorithm off.

werkzeug writes a response's headers and body in separate small writes; with Nagle on, each
waits for the client's delayed ACK (~40 ms a call). ``python -m reminders.local.moto_server
--port N`` serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any
from urllib.parse import parse_qs

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server


class _NoDelayHandler(MotoRequestHandler):
    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_request(self, *args: object, **kwargs: object) -> None:
        return None


def presigned_as_signed(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """moto routes a request by its Authorization header, so a presigned one (its signature in
    the query, as the operations function's identity proof is) would reach S3. Give such a
    request the header its query stands for; moto checks no signature either way."""

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reminders-moto")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    app = presigned_as_signed(DomainDispatcherApplication(create_backend_app))
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
