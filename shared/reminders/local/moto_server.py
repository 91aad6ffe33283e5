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
from types import FrameType

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reminders-moto")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    app = DomainDispatcherApplication(create_backend_app)
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
