"""The console off loopback: no wildcard Host list (DNS rebinding cannot reach it), and no page
without the access token printed at start (exchanged for an HttpOnly, SameSite=Strict cookie),
or, behind an authenticating proxy, without the proxy's header."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from reminders import db
from reminders.console import serve
from reminders.local import stack


def test_listening_on_every_address_answers_no_host_but_its_own_names() -> None:
    hosts = serve.allowed_hosts("0.0.0.0", ("console.internal.example",))
    assert "*" not in hosts
    assert "console.internal.example" in hosts and "attacker.example" not in hosts
    assert "*" not in serve.allowed_hosts("::")


def test_a_non_loopback_bind_needs_a_token_or_a_proxy() -> None:
    assert serve.access_for("127.0.0.1", None) == serve.Access()
    assert serve.access_for("::1", None) == serve.Access()
    token = serve.access_for("0.0.0.0", None).token
    assert token is not None and len(token) >= 40
    assert serve.access_for("10.1.2.3", None).token not in (None, token)  # fresh each start
    assert serve.access_for("0.0.0.0", "X-Forwarded-User") == serve.Access(
        proxy_header="X-Forwarded-User")


class Server:
    def __init__(self, database_url: str, access: serve.Access) -> None:
        import uvicorn

        from reminders.console.app import create_app

        ctx = serve.ConsoleContext(
            connect=lambda: db.connect(database_url, application_name="reminders-console"),
            now=lambda: datetime(2027, 3, 1, 9, tzinfo=UTC), queues=lambda: {}, actor="test")
        self.port = stack.free_port()
        app = create_app(ctx, hosts=serve.allowed_hosts("0.0.0.0"), access=access)
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                    log_level="warning", access_log=False))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "did not start"
            time.sleep(0.05)

    def get(self, path: str, headers: dict[str, str] | None = None) -> Any:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("GET", path, headers={"Host": "127.0.0.1", **(headers or {})})
            response = conn.getresponse()
            response.body = response.read()  # type: ignore[attr-defined]
            return response
        finally:
            conn.close()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def token_console(database_url: str) -> Iterator[tuple[Server, str]]:
    access = serve.Access(token="t0ken-" + "x" * 40)
    server = Server(database_url, access)
    try:
        assert access.token is not None
        yield server, access.token
    finally:
        server.stop()


def test_without_the_token_nothing_is_shown(token_console: tuple[Server, str]) -> None:
    server, _ = token_console
    for path in ("/", "/attention", "/actions/bulk", "/?access_token=wrong"):
        answer = server.get(path)
        assert answer.status == 401, path
        assert b"access token" in answer.body


def test_the_token_is_exchanged_once_for_a_strict_http_only_cookie(
        token_console: tuple[Server, str]) -> None:
    server, token = token_console
    answer = server.get(f"/attention?state=dead&access_token={token}")
    assert answer.status == 303
    assert answer.getheader("Location") == "/attention?state=dead"  # out of the address bar
    cookie = answer.getheader("Set-Cookie")
    assert cookie.startswith(f"{serve.ACCESS_COOKIE}={token};")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    page = server.get("/", headers={"Cookie": f"{serve.ACCESS_COOKIE}={token}"})
    assert page.status == 200
    forged = server.get("/", headers={"Cookie": f"{serve.ACCESS_COOKIE}=guess"})
    assert forged.status == 401


def test_a_rebound_name_is_refused_even_with_the_token(
        token_console: tuple[Server, str]) -> None:
    server, token = token_console
    answer = server.get("/", headers={"Host": "attacker.example",
                                      "Cookie": f"{serve.ACCESS_COOKIE}={token}"})
    assert answer.status == 400


def test_behind_a_proxy_only_requests_with_its_header_get_through(database_url: str) -> None:
    server = Server(database_url, serve.Access(proxy_header="X-Forwarded-User"))
    try:
        refused = server.get("/")
        assert refused.status == 403 and b"X-Forwarded-User" in refused.body
        assert server.get("/", headers={"X-Forwarded-User": "alice"}).status == 200
    finally:
        server.stop()


def test_a_busy_port_is_said_and_is_bad_input() -> None:
    import socket

    from reminders.errors import CommandFailed

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(CommandFailed, match=f"cannot listen on 127.0.0.1:{port}") as caught:
            serve.run(serve.ConsoleContext(connect=lambda: None, now=lambda: datetime.now(UTC),
                                           queues=lambda: {}, actor="t"),
                      host="127.0.0.1", port=port)
    assert caught.value.code == 2
