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
    # The alarms in ALARM (the local stack's board, as `reminders status` reads it); None: the
    # overview shows no alarms section.
    alarms: Callable[[], dict[str, Any]] | None = None


# The console's libraries (the `console` extra), each imported before anything starts.
PACKAGES = ("starlette", "jinja2", "uvicorn", "python_multipart", "pygal")
INSTALL_HINT = "`make console`, or `pip install 'reminders[console]'` in this environment"


def require_packages() -> None:
    """Say how to install the console's libraries (exit status 2) when one is missing, instead
    of an unexpected ModuleNotFoundError."""
    import importlib

    from reminders.errors import CommandFailed

    for name in PACKAGES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            missing = exc.name or name
            raise CommandFailed(f"console: its web libraries are not installed (no module "
                                f"named {missing!r}): {INSTALL_HINT}", code=2) from None


LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
WILDCARD_HOSTS = ("0.0.0.0", "::", "")
# The cookie an access token is exchanged for (HttpOnly, SameSite=Strict), and the query
# parameter of the one URL printed at start.
ACCESS_COOKIE = "reminders_console_access"
ACCESS_PARAMETER = "access_token"


def is_loopback(host: str) -> bool:
    import ipaddress

    if host in LOCAL_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts(host: str, extra: tuple[str, ...] = ()) -> list[str]:
    """Host headers the console answers: this machine's names, the concrete address it was
    told to listen on, and the names given with --allowed-host; never a wildcard (a page from
    elsewhere that rebinds its name to this address is refused). Listening on every address,
    only --allowed-host names reach it from elsewhere."""
    named = () if host in WILDCARD_HOSTS else (f"[{host}]" if ":" in host else host,)
    return sorted({*LOCAL_HOSTS, "[::1]", *named, *extra})


@dataclass(frozen=True)
class Access:
    """How a request proves it may use the console: nothing more on loopback (only this
    machine reaches it); else the secret token printed at start (exchanged for a cookie), or
    the header an authenticating proxy in front sets."""

    token: str | None = None
    proxy_header: str | None = None


def access_for(host: str, behind_proxy: str | None) -> Access:
    import secrets

    if behind_proxy:
        return Access(proxy_header=behind_proxy)
    if is_loopback(host):
        return Access()
    return Access(token=secrets.token_urlsafe(32))


def _refuse_a_busy_port(host: str, port: int) -> None:
    """Say so (exit status 2) when the port is taken, before announcing anything."""
    import socket

    from reminders.errors import CommandFailed

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise CommandFailed(f"console: cannot listen on {host}:{port}: {exc.strerror} "
                                "(give another --port)", code=2) from None


def run(ctx: ConsoleContext, *, host: str, port: int, extra_hosts: tuple[str, ...] = (),
        behind_proxy: str | None = None) -> None:
    import uvicorn

    from reminders.console.app import create_app

    _refuse_a_busy_port(host, port)
    access = access_for(host, behind_proxy)
    app = create_app(ctx, hosts=allowed_hosts(host, extra_hosts), access=access)
    shown = f"[{host}]" if ":" in host else host
    if access.token is not None:
        sys.stderr.write(f"reminders: console: listening on {host}, not only this machine: "
                         "open it once with this URL (its token is shown only now):\n"
                         f"  http://{shown}:{port}/?{ACCESS_PARAMETER}={access.token}\n")
    elif access.proxy_header is not None:
        sys.stderr.write(f"reminders: console: every request must carry {access.proxy_header}, "
                         "set by the authenticating proxy in front of it\n")
    sys.stderr.write(f"reminders: console on http://{shown}:{port}/ (Ctrl-C stops it)\n")
    sys.stderr.flush()
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False,
                server_header=False)
