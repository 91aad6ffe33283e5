"""Run the console with uvicorn: the context it reads through, and the server."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class ConsoleContext:
    """What the console reads and acts through: a database connection per request (the
    command line's settings), the command line's clock, the queues' counts, and the user its
    actions are recorded for."""

    connect: Callable[[], Any]
    now: Callable[[], datetime]
    queues: Callable[[], dict[str, Any]]
    actor: str
    refresh_seconds: int = 10
    # A page's reads run in one transaction with this statement timeout (SET LOCAL: nothing
    # outlives the transaction, so a pooler's connection is not pinned); None: the login's.
    read_timeout_ms: int | None = None


LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def allowed_hosts(host: str) -> list[str]:
    """Host headers the console answers: this machine's names, and the address it was told to
    listen on (a page from elsewhere that rebinds its name to 127.0.0.1 is refused)."""
    if host in ("0.0.0.0", "::"):
        return ["*"]
    return sorted({*LOCAL_HOSTS, "[::1]", host})


def run(ctx: ConsoleContext, *, host: str, port: int) -> None:
    import uvicorn

    from reminders.console.app import create_app

    app = create_app(ctx, hosts=allowed_hosts(host))
    if host not in LOCAL_HOSTS:
        sys.stderr.write(f"reminders: console: warning: listening on {host}, not only this "
                         "machine; anyone who can reach it can act as you\n")
    shown = f"[{host}]" if ":" in host else host
    sys.stderr.write(f"reminders: console on http://{shown}:{port}/ (Ctrl-C stops it)\n")
    sys.stderr.flush()
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False,
                server_header=False)
