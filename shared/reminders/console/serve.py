"""Run the console with uvicorn. What the app shares with it (the context, the hosts, access)
is in ``context``, so the app never imports its server."""

from __future__ import annotations

import sys

from reminders.console.context import (
    ACCESS_COOKIE,
    ACCESS_PARAMETER,
    LOCAL_HOSTS,
    WILDCARD_HOSTS,
    Access,
    ConsoleContext,
    access_for,
    allowed_hosts,
    is_loopback,
)

# Its own and, for its callers, the context's.
__all__ = ["ACCESS_COOKIE", "ACCESS_PARAMETER", "INSTALL_HINT", "LOCAL_HOSTS", "PACKAGES",
           "WILDCARD_HOSTS", "Access", "ConsoleContext", "access_for", "allowed_hosts",
           "is_loopback", "require_packages", "run"]

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
