"""The console's overview is live: its counts, throughput and charts change in place (its own
static script fetches its /live region; no reload, nothing from elsewhere) when a delivery is
sent or a schedule paused, and the charts' figures are `reminders throughput --json`'s for
the same window. Every page (tests/console_pages.py, the screenshots' list) says things in
words: never None, {} or null, never an instant with microseconds."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from reminders import db, endpoints, schedules
from reminders.clock import FixedClock, iso
from reminders.local import pipeline, stack
from reminders.local.receiver import WebhookReceiver
from reminders.runtime import Runtime
from tests import console_traffic
from tests.conftest import PgCluster, make_runtime
from tests.console_pages import PAGES
from tests.integration.cli_helpers import Cli, base_env
from tests.integration.test_console import CHROMIUM, CHROMIUM_ARGS, browser_or_skip

REFRESH = 2  # seconds: the console's --refresh, its least


@dataclass
class Live:
    url: str
    cli: Cli
    now: str
    rt: Runtime
    conn: db.Connection
    clock: FixedClock
    receiver: Any


@pytest.fixture(scope="module")
def live(pg_server: str, pg_cluster: PgCluster, moto_endpoint: str,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    from reminders.channels.signing import new_secret

    browser_or_skip()
    tmp = tmp_path_factory.mktemp("console_live")
    name = f"console_live_{os.getpid()}"
    db.drop_database(pg_server, name)
    url = pg_cluster.new_database(name)
    urls = stack.prepare_aws(moto_endpoint, prefix=f"live{os.getpid()}",
                             visibility_timeout_override=1, max_receive_count_override=2)
    receiver = WebhookReceiver(secret=new_secret()).start()
    clock = FixedClock(console_traffic.T0)
    rt = make_runtime(url, urls, moto_endpoint, clock)
    conn = db.connect(url)
    end = console_traffic.build(rt, conn, clock, receiver)
    admin = stack.credentials_env(stack.administrator(moto_endpoint))
    env = {**base_env(tmp), **stack.AWS_TEST_ENV, **admin, "DATABASE_URL": url,
           "AWS_ENDPOINT_URL": moto_endpoint, "REMINDERS_QUEUE_URL": urls.deliveries,
           "REMINDERS_DLQ_URL": urls.dlq, "REMINDERS_PARKING_QUEUE_URL": urls.parking}
    port = stack.free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "reminders.cli", "console", "--port", str(port),
         "--refresh", str(REFRESH)],
        env={**env, "REMINDERS_NOW": iso(end)}, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        stack.wait_http(f"{base}/static/console.css")
        yield Live(base, Cli(env), iso(end), rt, conn, clock, receiver)
    finally:
        server.terminate()
        server.wait(10)
        conn.close()
        rt.close()
        receiver.stop()
        db.drop_database(pg_server, name)


@pytest.fixture(scope="module")
def browser(live: Live) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(20_000)
    yield tab
    context.close()


def send_one(live: Live, key: str) -> None:
    """A webhook delivery due now, sent through the real scanner and consumer on the
    console's own instant."""
    now = live.clock.now()
    assert live.rt.secret_box is not None
    with db.transaction(live.conn):
        url = f"{live.receiver.url}/hooks/live"
        endpoints.register(live.conn, live.rt.secret_box, tenant=None, url=url,
                           secret=live.receiver.secret, now=now)
        schedules.schedule(live.conn, tenant="acme", key=key, channel="webhook", to=url,
                           recipients=["zed"], at=now, now=now)
    pipeline.run(live.rt, max_seconds=30)
    state = live.conn.execute("select d.state from deliveries d join schedules s"
                              " on s.id = d.schedule_id where s.schedule_key = %s",
                              (key,)).fetchone()
    assert state == {"state": "sent"}


def number(page: Any, selector: str) -> int:
    return int(page.inner_text(selector).strip())


def wait_for_text(page: Any, selector: str, text: str) -> None:
    page.wait_for_function(
        "([s, t]) => { const e = document.querySelector(s);"
        " return e !== null && e.textContent.trim() === t; }", arg=[selector, text],
        timeout=20_000)


def test_a_send_changes_the_counts_and_charts_in_place_without_a_reload(
        live: Live, page: Any) -> None:
    page.goto(live.url + "/")
    assert page.locator('script[src="/static/live.js"]').count() == 1
    assert page.locator("script:not([src])").count() == 0  # nothing inline (CSP: 'self')
    sent = number(page, "#count-sent")
    attempts_sent = number(page, "#throughput-sent")
    webhook_sent = number(page, "#throughput-webhook-sent")
    page.evaluate("window.notReloaded = true")

    send_one(live, "live-1")

    wait_for_text(page, "#count-sent", str(sent + 1))
    wait_for_text(page, "#throughput-sent", str(attempts_sent + 1))
    assert number(page, "#throughput-webhook-sent") == webhook_sent + 1
    assert page.evaluate("window.notReloaded") is True  # the same document: no reload
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
    assert page.inner_text("#live-state") == "(live)"

    # The charts' figures are the command line's for the same window.
    data = live.cli("throughput", "--json", now=live.now).json()
    assert data["by_outcome"] == {o: number(page, f"#throughput-{o}")
                                  for o in ("sent", "transient", "permanent", "unknown")}
    charted = {}
    for figure in page.locator("svg.throughput").all():
        channel = figure.get_attribute("data-channel")
        bars = figure.locator("rect.bar").all()
        minutes: dict[str, dict[str, int]] = {}
        for bar in bars:
            minute = bar.get_attribute("data-minute")
            minutes.setdefault(minute, {"minute": minute})[bar.get_attribute(
                "data-series")] = int(bar.get_attribute("data-n"))
        charted[channel] = list(minutes.values())
    busy = {c for c, counts in data["by_channel"].items() if any(counts.values())}
    assert set(charted) == busy and "webhook" in busy
    for channel in busy:
        assert charted[channel] == data["per_minute"][channel]
        assert len(charted[channel]) == data["minutes"] == 60
    assert data["per_minute"]["webhook"][-1]["sent"] >= 1  # this minute's send, the last bar
    text = live.cli("throughput", now=live.now)
    assert text.code == 0 and f"({', '.join(f'{o} {n}' for o, n in data['by_outcome'].items())})" \
        in text.out


def test_pausing_a_schedule_shows_as_paused_in_place(live: Live, page: Any) -> None:
    page.goto(live.url + "/")
    assert number(page, "#count-paused") == 0
    page.evaluate("window.notReloaded = true")
    got = live.cli("schedules", "pause", "weekly-digest", "--tenant", "globex",
                   "--reason", "holiday week", now=live.now)
    assert got.code == 0, got.err
    status = live.cli("status", "--json", now=live.now).json()
    held = status["paused_schedules"]
    assert (held["schedules"], held["held"]) == (1, 1)
    wait_for_text(page, "#count-paused", "1")
    assert number(page, "#paused-schedule-count") == held["schedules"]
    assert number(page, "#paused-held") == held["held"]
    assert number(page, "#paused-held-due") == held["held_due"]
    assert page.evaluate("window.notReloaded") is True
    got = live.cli("schedules", "resume", "weekly-digest", "--tenant", "globex",
                   "--reason", "back", now=live.now)
    assert got.code == 0, got.err
    wait_for_text(page, "#count-paused", "0")


def test_a_paced_channel_shows_with_its_waits_and_throttles_in_place(
        live: Live, page: Any) -> None:
    # The traffic paces e-mail (the demo's paced burst): the test starts with none paced and
    # puts it back as it was.
    before = live.cli("status", "--json", now=live.now).json()["pacing"]
    assert [p["key"] for p in before] == ["email"], before
    got = live.cli("channels", "set", "email", "--rate", "off", now=live.now)
    assert got.code == 0, got.err
    page.goto(live.url + "/")
    assert page.inner_text("#pacing-none").startswith("no channel or endpoint is paced")
    page.evaluate("window.notReloaded = true")
    got = live.cli("channels", "set", "email", "--rate", "14/s", "--reason", "SES quota",
                   now=live.now)
    assert got.code == 0, got.err
    try:
        (email,) = live.cli("status", "--json", now=live.now).json()["pacing"]
        wait_for_text(page, "#pacing-email .pacing-in-force", "14/s")
        assert page.inner_text("#pacing-email .pacing-waiting").strip() == str(
            email["waiting_for_token"]) == "0"
        assert page.inner_text("#pacing-email .pacing-throttles").strip() == "none"
        assert page.evaluate("window.notReloaded") is True
    finally:
        got = live.cli("channels", "set", "email", "--rate", "off", now=live.now)
        assert got.code == 0, got.err
    wait_for_text(page, "#pacing-none", "no channel or endpoint is paced")
    (email,) = before
    got = live.cli("channels", "set", "email", "--rate", f"{email['rate_per_second']:g}/s",
                   "--burst", f"{email['burst']:g}", now=live.now)
    assert got.code == 0, got.err


def test_a_provider_throttle_shows_in_the_throttle_column_in_place(
        live: Live, page: Any) -> None:
    # A paced endpoint whose receiver answers 429 once: the overview's row for it shows the
    # throttle counted, its instant, and the rate in force halved, as `status --json` has them.
    url = live.receiver.hook_url("throttled-once", codes=[429, 200])
    key = f"webhook {url}"
    now = live.clock.now()
    assert live.rt.secret_box is not None
    with db.transaction(live.conn):
        endpoints.register(live.conn, live.rt.secret_box, tenant=None, url=url,
                           secret=live.receiver.secret, now=now)
    got = live.cli("endpoints", "set", url, "--rate", "10/s", "--reason", "partner's limit",
                   now=live.now)
    assert got.code == 0, got.err
    try:
        page.goto(live.url + "/")
        selector = f'tr[id="pacing-{key.replace(" ", "-")}"]'  # the key has spaces, a URL
        row = page.locator(selector)
        assert row.locator(".pacing-throttles").inner_text().strip() == "none"
        assert row.locator(".pacing-in-force").inner_text().strip() == "10/s"
        page.evaluate("window.notReloaded = true")
        with db.transaction(live.conn):
            schedules.schedule(live.conn, tenant="acme", key="throttled-once", channel="webhook",
                               to=url, recipients=["zed"], at=now, now=now)
        pipeline.run(live.rt, max_seconds=30)
        stats = live.receiver.stats()
        assert stats["by_endpoint"]["throttled-once"] == 1  # the one send, answered 429
        (shown,) = [p for p in live.cli("status", "--json", now=live.now).json()["pacing"]
                    if p["key"] == key]
        assert shown["throttles_last_hour"] == 1, shown
        assert shown["rate_in_force_per_second"] == 5, shown
        page.wait_for_function(
            "([s, t]) => { const e = document.querySelector(s);"
            " return e !== null && e.textContent.trim().startsWith(t); }",
            arg=[f"{selector} .pacing-throttles", "1 "],
            timeout=20_000)
        cell = row.locator(".pacing-throttles").inner_text().strip()
        assert re.fullmatch(r"1 the last .+", cell), cell
        assert row.locator(".pacing-in-force").inner_text().strip() == "5/s"
        assert "bad" in (row.get_attribute("class") or "").split()  # throttled: marked
        assert page.evaluate("window.notReloaded") is True
    finally:
        got = live.cli("endpoints", "set", url, "--rate", "off", now=live.now)
        assert got.code == 0, got.err


NEVER = {
    "None": re.compile(r"\bNone\b"),
    "{}": re.compile(r"\{\s*\}"),
    "null": re.compile(r"\bnull\b"),
    "microseconds": re.compile(r"\d{2}:\d{2}:\d{2}\.\d"),
    "undefined": re.compile(r"\bundefined\b"),
}


@pytest.mark.parametrize("shown", PAGES, ids=[p.name for p in PAGES])
def test_every_page_says_it_in_words(live: Live, page: Any, shown: Any) -> None:
    answer = page.goto(live.url + shown.path)
    assert answer is not None and answer.status == 200, shown.path
    if shown.then is not None:
        shown.then(page)
    # Verbatim JSON (a payload, a request's body in <pre>) is shown as it is, `{}` included:
    # everything else is the console's own words.
    text = page.evaluate("""() => { const b = document.body.cloneNode(true);
        b.querySelectorAll('pre').forEach(e => e.remove()); return b.innerText; }""")
    found = {what: rx.findall(text) for what, rx in NEVER.items() if rx.search(text)}
    assert found == {}, (shown.path, found)
    # (A confirmation and the kinds' policies have no instant to show.)
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", text) or shown.name in (
        "bulk-confirm", "tenant-confirm", "kinds"), "an instant, to the second"
    # every absolute instant in a <time> element has its relative form beside it
    for stamp in page.locator("time").all()[:20]:
        beside = stamp.evaluate("e => e.nextElementSibling && e.nextElementSibling.textContent")
        assert beside and re.fullmatch(r"\((now|in \S+|\S+ ago)\)", beside), beside
