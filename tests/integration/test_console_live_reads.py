"""What the overview's live refresh costs the database: every open overview fetches its live
region (/live) every --refresh seconds, and each fetch re-ran the whole of the overview's reads
(`status`, both lateness windows, the throughput, recent actions, the queues' counts). Now the
figures are read once a refresh period for each tenant filter and shared by every open page:
counted here as the named statements the console runs (db.before_statement) and its calls for
the queues' counts, on the console's own clock for how old its figures are (no sleeps)."""

from __future__ import annotations

import http.client
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from reminders import db, operator
from reminders.console import serve
from reminders.local import stack
from tests.conftest import Harness
from tests.integration.pipeline_helpers import schedule_webhook

REFRESH = 10
PAGES = 5  # overviews open at once


@dataclass
class Console:
    port: int
    ticks: list[float]  # the console's monotonic clock, moved by the test
    statements: Counter[str]
    queue_reads: list[int]

    def get(self, path: str) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", path, headers={"Host": "127.0.0.1"})
            answer = conn.getresponse()
            return answer.status, answer.read().decode()
        finally:
            conn.close()

    def refresh_all(self, path: str = "/live") -> list[str]:
        """Every open page's refresh at once; each page's region."""
        with ThreadPoolExecutor(PAGES) as pool:
            got = list(pool.map(lambda _: self.get(path), range(PAGES)))
        assert [status for status, _ in got] == [200] * PAGES, got
        return [body for _, body in got]

    def cost(self) -> dict[str, int]:
        """The statements run since the last call, by name, and forget them."""
        spent = dict(self.statements)
        self.statements.clear()
        return spent


@pytest.fixture
def console(harness: Harness, database_url: str,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Console]:
    import uvicorn

    from reminders.console.app import create_app

    h = harness
    schedule_webhook(h, "sent-one", recipients=["ann", "ben"])
    ticks = [1000.0]
    statements: Counter[str] = Counter()
    queue_reads = [0]
    lock = threading.Lock()

    def queues() -> dict[str, Any]:
        with lock:
            queue_reads[0] += 1
        return {}

    def counted(name: str) -> None:
        with lock:
            statements[name] += 1

    ctx = serve.ConsoleContext(
        connect=lambda: db.connect(database_url, application_name="reminders-console"),
        now=h.clock.now, queues=queues, actor="test", refresh_seconds=REFRESH,
        read_timeout_ms=30_000, monotonic=lambda: ticks[0])
    port = stack.free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(ctx), host="127.0.0.1", port=port,
                                           log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the console did not start"
        time.sleep(0.05)
    monkeypatch.setattr(db, "before_statement", counted)
    try:
        yield Console(port, ticks, statements, queue_reads)
    finally:
        server.should_exit = True
        thread.join(10)


def one_read(console: Console, tenant: str | None = None) -> dict[str, int]:
    """What one read of the overview's figures runs, read alone."""
    console.cost()
    status, _ = console.get("/" + (f"?tenant={tenant}" if tenant else ""))
    assert status == 200
    return console.cost()


def test_every_open_overview_shares_one_read_of_its_figures_a_refresh_period(
        console: Console, harness: Harness) -> None:
    single = one_read(console)
    assert single["status_breakdown"] == 1 and single["lateness_histogram"] == 2, single
    # the overview read afresh; its figures serve every live region for the period
    console.ticks[0] += REFRESH - 0.5
    console.queue_reads[0] = 0
    regions = console.refresh_all()
    assert console.cost() == {} and console.queue_reads[0] == 0
    # the period over: five pages refreshing at once cost one read, the same statements as
    # the overview's own, each once
    console.ticks[0] += 1
    regions = console.refresh_all()
    assert console.cost() == single
    assert console.queue_reads[0] == 1
    # and they show the same figures, which are status's
    assert len(set(regions)) == 1
    counts = operator.status(harness.conn, now=harness.clock.now())["by_state"]
    for state, n in counts.items():
        assert re.search(rf'id="count-{state}">{n}<', regions[0]), state
    console.cost()  # (the test's own status read)
    # within the period nothing more is read, however many refreshes
    for _ in range(3):
        console.ticks[0] += REFRESH / 4
        console.refresh_all()
    assert console.cost() == {}
    console.ticks[0] += REFRESH / 4
    console.refresh_all()
    assert console.cost() == single
    # a tenant's overview has its own figures, read once a period for it
    for_tenant = one_read(console, "acme")
    assert for_tenant["status_breakdown"] == 1
    console.refresh_all("/live?tenant=acme")
    assert console.cost() == {}
    console.ticks[0] += REFRESH
    console.refresh_all("/live?tenant=acme")
    assert console.cost() == for_tenant
