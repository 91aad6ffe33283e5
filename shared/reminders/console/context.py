"""What the console's app and its server share: the context it reads through, the hosts it
answers to, and how a request proves it may use it."""

from __future__ import annotations

import time
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
    # Seconds on a clock that only goes forward: how old the overview's shared figures are
    # (live.SharedFigures), never an instant a page shows (those are ``now``'s).
    monotonic: Callable[[], float] = time.monotonic


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
