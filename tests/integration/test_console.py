"""`reminders console` in a real headless browser (Debian's Chromium through Playwright) against
a local stack after demo-like traffic: the overview says what `status --json` says, the
attention list shows the parked deliveries with their reasons, a delivery's page shows its
attempts and schedule, and the actions change exactly what they showed, recorded with the
reason; a form from elsewhere changes nothing."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from reminders import db, operator
from reminders.clock import FixedClock, iso
from reminders.local import stack
from reminders.local.receiver import WebhookReceiver
from tests import console_traffic
from tests.aws_principals import direct_operator
from tests.conftest import PgCluster, make_runtime
from tests.integration.cli_helpers import BAD_REASONS, BLANK_REQUIRED, Cli, base_env

CHROMIUM = Path(os.environ.get("REMINDERS_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def browser_or_skip() -> None:
    """CI must run these (it installs chromium from apt); a developer without it is told."""
    if CHROMIUM.exists():
        return
    why = (f"{CHROMIUM} is missing: `apt-get install -y chromium` (the console's browser "
           "tests drive Debian's Chromium; never `playwright install`)")
    if os.environ.get("CI"):
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


@dataclass
class Console:
    url: str
    cli: Cli
    database_url: str
    now: str

    def conn(self) -> db.Connection:
        return db.connect(self.database_url)


@pytest.fixture(scope="module")
def console(pg_server: str, pg_cluster: PgCluster, moto_endpoint: str,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    browser_or_skip()
    tmp = tmp_path_factory.mktemp("console")
    name = f"console_{os.getpid()}"
    db.drop_database(pg_server, name)
    url = pg_cluster.new_database(name)
    urls = stack.prepare_aws(moto_endpoint, prefix=f"console{os.getpid()}",
                             visibility_timeout_override=1, max_receive_count_override=2)
    receiver = WebhookReceiver(secret=_secret()).start()
    clock = FixedClock(console_traffic.T0)
    rt = make_runtime(url, urls, moto_endpoint, clock)
    with db.connect(url) as conn:
        end = console_traffic.build(rt, conn, clock, receiver)
    rt.close()
    # As an operator holding the documented operator-direct policy on these queues, as the
    # command line's fixture runs (and the local stack's console).
    operator = stack.credentials_env(direct_operator(moto_endpoint, urls))
    env = {**base_env(tmp), **stack.AWS_TEST_ENV, **operator, "DATABASE_URL": url,
           "AWS_ENDPOINT_URL": moto_endpoint, "REMINDERS_QUEUE_URL": urls.deliveries,
           "REMINDERS_DLQ_URL": urls.dlq, "REMINDERS_PARKING_QUEUE_URL": urls.parking}
    now = iso(end)
    port = stack.free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "reminders.cli", "console", "--port", str(port)],
        env={**env, "REMINDERS_NOW": now}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        stack.wait_http(f"{base}/static/console.css")
        yield Console(base, Cli(env), url, now)
    finally:
        server.terminate()
        server.wait(10)
        receiver.stop()
        db.drop_database(pg_server, name)


def _secret() -> str:
    from reminders.channels.signing import new_secret

    return new_secret()


@pytest.fixture(scope="module")
def browser(console: Console) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(15_000)
    yield tab
    context.close()


def go(page: Any, selector: str) -> None:
    """Click what submits a form or follows a link, and wait for the page it leads to."""
    with page.expect_navigation():
        page.click(selector)


def status(console: Console) -> dict[str, Any]:
    got = console.cli("status", "--json", now=console.now)
    data: dict[str, Any] = got.json()
    return data


def parked(console: Console, **filters: str) -> list[dict[str, Any]]:
    args = [arg for k, v in filters.items() for arg in (f"--{k}", v)]
    got = console.cli("list", "--attention", *args, "--limit", "500", "--json", now=console.now)
    rows: list[dict[str, Any]] = got.json()
    return rows


def test_the_overview_says_what_status_json_says(console: Console, page: Any) -> None:
    page.goto(console.url + "/")
    expected = status(console)
    shown = {s: int(page.inner_text(f"#count-{s}")) for s in operator.STATES}
    assert shown == expected["by_state"]
    assert int(page.inner_text("#total")) == expected["total"]
    assert int(page.inner_text("#expired-leases")) == expected["expired_leases"]
    assert int(page.inner_text("#pending-leases")) == expected["pending_leases"]
    assert expected["by_state"]["sent"] > 0 and expected["by_state"]["dead"] == 4
    assert page.locator("#paused-tenants li").all_inner_texts() == [
        f"{t} resume…" for t in expected["paused_tenants"]] == ["initech resume…"]
    oldest = expected["oldest_overdue_delivery"]
    assert oldest is not None and oldest["tenant"] == "initech"
    assert oldest["delivery_key"] in page.inner_text("#oldest-overdue")
    for name, counts in expected["queues"].items():
        assert int(page.inner_text(f"#queue-{name}-visible")) == counts["visible"]
    # every send of the traffic was within the last day of the clock: the day's histogram
    # counts each of them once
    day = page.locator("#lateness-2 .sent").inner_text()
    assert int(day) == expected["by_state"]["sent"]
    assert page.locator("#lateness-2 svg").count() == 1
    # Live in place (static/live.js fetches /live); a page reload only without script.
    assert page.locator("#live[data-src]").count() == 1
    assert page.locator('head > meta[http-equiv="refresh"]').count() == 0
    # No command evaluated the alarms on this home yet: the overview says so, as status does.
    assert expected["alarms"]["available"] is False
    assert page.inner_text("#alarms-unavailable") == expected["alarms"]["why"]


def test_the_attention_list_shows_the_parked_deliveries_with_reasons(console: Console,
                                                                      page: Any) -> None:
    page.goto(console.url + "/attention")
    rows = page.locator("tr.parked-row")
    shown = {(r.get_attribute("data-key"), r.locator(".reason").inner_text())
             for r in rows.all()}
    expected = {(r["delivery_key"], r["reason"]) for r in parked(console)}
    assert shown == expected
    states = {r["state"] for r in parked(console)}
    assert states == {"dead", "failed", "stale"}
    assert all(reason for _, reason in shown)
    page.select_option("select[name=state]", "dead")
    page.fill("input[name=tenant]", "globex")
    go(page, "form.filters >> text=Filter")
    keys = page.locator("tr.parked-row").evaluate_all("rs => rs.map(r => r.dataset.key)")
    assert keys == [r["delivery_key"] for r in parked(console, state="dead", tenant="globex")]
    assert len(keys) == 4
    # a page at a time: two per page, the cursor continues where the first page ended
    page.goto(console.url + "/attention?tenant=globex&state=dead&limit=2")
    first = page.locator("tr.parked-row").evaluate_all("rs => rs.map(r => r.dataset.key)")
    go(page, "#next-page")
    second = page.locator("tr.parked-row").evaluate_all("rs => rs.map(r => r.dataset.key)")
    assert first + second == keys


def test_a_deliverys_page_shows_its_schedule_attempts_and_timeline(console: Console,
                                                                    page: Any) -> None:
    page.goto(console.url + "/attention?tenant=globex&state=dead")
    with page.expect_navigation():
        page.locator("tr.parked-row a").first.click()
    assert page.inner_text("#state") == "dead"
    attempts = page.locator("tr.attempt")
    assert attempts.count() == 2
    assert attempts.locator(".status-code").all_inner_texts() == ["500", "500"]
    assert page.inner_text("#rule") == "once, at 2027-03-01T09:03:00Z"
    key = urllib.parse.parse_qs(urllib.parse.urlsplit(page.url).query)["key"][0]
    shown = console.cli("show", key, "--tenant", "globex", "--json").json()
    assert [a["status_code"] for a in shown["attempts"]] == [500, 500]
    assert page.locator("#timeline tr.event").count() == len(shown["events"])
    # a recurring one: its rule, zone, local time and DST policy
    sent = console.cli("list", "--tenant", "globex", "--state", "sent", "--json").json()
    page.goto(console.url + "/delivery?" + urllib.parse.urlencode(
        {"tenant": "globex", "key": sent[0]["delivery_key"]}))
    assert page.inner_text("#rule") == "FREQ=WEEKLY;BYDAY=MO;BYHOUR=10"
    assert page.inner_text("#zone") == "Europe/Berlin"
    assert page.inner_text("#dst") == "gap: shift, overlap: first"
    assert "2027-03-01T10:00:00 Europe/Berlin" in page.inner_text("#occurrence")
    assert page.locator("tr.attempt .status-code").all_inner_texts() == ["200"]


def test_a_bulk_retry_changes_exactly_the_rows_it_counted(console: Console, page: Any) -> None:
    page.goto(console.url + "/attention?tenant=globex")
    page.select_option("#bulk-form select[name=state]", "dead")
    page.select_option("#bulk-form select[name=as]", "retry")
    go(page, "#bulk-form button")
    counted = page.locator("tr.counted-row td.key").all_inner_texts()
    assert int(page.inner_text("#count")) == len(counted) == 4
    # between the count and the confirmation another delivery comes to match the filter
    late = parked(console, state="failed", tenant="globex")[0]["delivery_key"]
    with console.conn() as conn:
        operator.reconcile(conn, key=late, tenant="globex", target="dead",
                           reason="given up", now=console_traffic.T0)
    page.fill("input[name=reason]", "endpoint fixed by globex")
    go(page, "#confirm")
    assert "reconciled 4 of the 4 counted dead deliveries as retry" in page.inner_text("#done")
    with console.conn() as conn:
        rows = {r["delivery_key"]: r for r in conn.execute(
            "select delivery_key, state from deliveries where delivery_key = any(%s)",
            ([*counted, late],)).fetchall()}
        events = conn.execute(
            "select d.delivery_key, e.event, e.detail from delivery_events e"
            " join deliveries d on d.id = e.delivery_id"
            " where e.actor = 'operator' and e.event = 'reconciled as retry'").fetchall()
        actions = conn.execute("select who, via, action, tenant, reason, detail"
                               " from operator_actions where object = 'deliveries'").fetchall()
    assert {k: rows[k]["state"] for k in counted} == dict.fromkeys(counted, "retrying")
    assert rows[late]["state"] == "dead"  # it matched only after the count: left alone
    assert sorted(e["delivery_key"] for e in events) == sorted(counted)
    assert {e["detail"] for e in events} == {
        f"endpoint fixed by globex (bulk in the console, by {operator.current_user()})"}
    assert [(a["via"], a["action"], a["tenant"], a["reason"], a["detail"]["reconciled"])
            for a in actions] == [("console", "reconciled as retry", "globex",
                                   "endpoint fixed by globex", 4)]


def test_reconciling_one_and_pausing_a_tenant_need_a_reason(console: Console,
                                                            page: Any) -> None:
    target = parked(console, state="stale")[0]
    page.goto(console.url + "/delivery?" + urllib.parse.urlencode(
        {"tenant": target["tenant"], "key": target["delivery_key"]}))
    page.select_option("#reconcile-form select[name=as]", "failed")
    go(page, "#reconcile-form button")
    page.click("#confirm")  # no reason: the browser will not send the form
    assert page.url.endswith("/actions/reconcile?" + urllib.parse.urlencode(
        {"tenant": target["tenant"], "key": target["delivery_key"], "as": "failed"}))
    page.fill("input[name=reason]", "trip is over")
    go(page, "#confirm")
    assert "reconciled" in page.inner_text("#done")
    shown = console.cli("show", target["delivery_key"], "--tenant", target["tenant"],
                        "--json").json()
    assert shown["state"] == "failed"
    assert shown["events"][-1]["detail"] == f"trip is over (console, by {operator.current_user()})"
    page.goto(console.url + "/delivery?" + urllib.parse.urlencode(
        {"tenant": target["tenant"], "key": target["delivery_key"]}))
    assert [t.split("\t", 1)[1] for t in page.locator(
        "#timeline tr.event.operator").all_inner_texts()] == [
        f"operator {operator.current_user()}\treconciled as failed\t"
        f"trip is over (console, by {operator.current_user()})"]
    assert page.locator("#timeline tr.event.operator time").inner_text() == (
        shown["events"][-1]["at"].split(".")[0].removesuffix("Z") + "Z")

    page.goto(console.url + "/")
    page.fill("input[name=tenant]", "acme")
    go(page, "text=Pause…")
    page.fill("input[name=reason]", "acme asked us to hold everything")
    go(page, "#confirm")
    assert page.inner_text("#done") == "tenant acme paused"
    assert status(console)["paused_tenants"] == ["acme", "initech"]
    page.goto(console.url + "/")
    assert "acme asked us to hold everything" in page.inner_text("#actions")


def _post(url: str, fields: dict[str, str], headers: dict[str, str]) -> int:
    body = urllib.parse.urlencode(fields).encode()
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/x-www-form-urlencoded", **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_form_from_elsewhere_changes_nothing(console: Console, page: Any) -> None:
    page.goto(console.url + "/actions/tenant?tenant=initech&pause=0")
    token = page.get_attribute("input[name=csrf]", "value")
    fields = {"tenant": "initech", "pause": "0", "reason": "sneaky"}
    url = console.url + "/actions/tenant"
    assert _post(url, fields, {}) == 403  # no token
    assert _post(url, {**fields, "csrf": "x" * 43}, {}) == 403  # a guessed one
    assert _post(url, {**fields, "csrf": token}, {"Origin": "http://evil.example"}) == 403
    assert _post(url, {**fields, "csrf": token}, {"Host": "evil.example"}) == 400
    assert "initech" in status(console)["paused_tenants"]
    page.goto(console.url + "/actions/tenant?tenant=initech&pause=0")
    assert page.get_attribute("input[name=csrf]", "value") == token
    headers = page.goto(console.url + "/").headers
    assert headers["x-frame-options"] == "DENY"
    assert "script-src 'self'" in headers["content-security-policy"]


def test_a_reason_is_refused_by_the_same_rule_as_the_command_line(console: Console) -> None:
    with urllib.request.urlopen(console.url + "/actions/tenant?tenant=initech&pause=0",
                                timeout=10) as answer:
        found = re.search(r'name="csrf" value="([^"]+)"', answer.read().decode())
    assert found is not None
    token = found.group(1)
    target = parked(console)[0]
    actions = {
        "/actions/tenant": {"tenant": "initech", "pause": "0"},
        "/actions/reconcile": {"tenant": target["tenant"], "key": target["delivery_key"],
                               "as": "failed"},
        "/actions/bulk": {"state": "dead", "tenant": "globex", "as": "retry"},
    }
    with console.conn() as conn:
        before = conn.execute("select count(*) as n from operator_actions").fetchone()
    cases = [*BAD_REASONS.values(), (" ", BLANK_REQUIRED), (None, BLANK_REQUIRED)]
    for path, fields in actions.items():
        for reason, line in cases:
            sent = {**fields, "csrf": token} | ({} if reason is None else {"reason": reason})
            request = urllib.request.Request(
                console.url + path, data=urllib.parse.urlencode(sent).encode(), method="POST",
                headers={"Content-Type": "application/x-www-form-urlencoded"})
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            body = refused.value.read().decode()
            shown = re.search(r'id="error">(.*?)</p>', body, re.S)
            assert (refused.value.code, html.unescape(shown.group(1)) if shown else body) == (
                400, line), (path, reason)
    with console.conn() as conn:
        assert conn.execute("select count(*) as n from operator_actions").fetchone() == before
    assert "initech" in status(console)["paused_tenants"]
    assert parked(console)[0] == target


def test_bad_input_is_one_line_on_the_page(console: Console, page: Any) -> None:
    answer = page.goto(console.url + "/attention?due_from=yesterday")
    assert answer.status == 400
    assert page.inner_text("#error") == (
        "due from: not an ISO-8601 instant: 'yesterday' (e.g. 2027-03-01T09:00:00Z)")
    answer = page.goto(console.url + "/delivery?tenant=acme&key=nope")
    assert answer.status == 404
    assert page.inner_text("#error") == "no delivery or schedule with key 'nope' for tenant 'acme'"


def test_queues_that_do_not_answer_are_unreachable_beside_postgres_counts(
        console: Console, page: Any) -> None:
    port = stack.free_port()
    env = {**console.cli.env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{stack.free_port()}",
           "REMINDERS_NOW": console.now}
    server = subprocess.Popen(
        [sys.executable, "-m", "reminders.cli", "console", "--port", str(port)], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        stack.wait_http(f"http://127.0.0.1:{port}/static/console.css")
        page.goto(f"http://127.0.0.1:{port}/")
        assert page.inner_text("#queues-unreachable").startswith("unreachable (AWS: ")
        assert int(page.inner_text("#total")) == status(console)["total"]
    finally:
        server.terminate()
        server.wait(10)
