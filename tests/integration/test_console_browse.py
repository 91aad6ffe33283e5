"""The console's Deliveries page in a real headless browser (Debian's Chromium through
Playwright) after demo-like traffic: every delivery in any state, filtered, sorted and paged
exactly as `reminders list --json` lists them; the "go to" box; rows ticked for a bulk action
change exactly those rows."""
# The fixtures come from test_console (this module gets its own console and traffic); pytest
# passes them by name, which ruff reads as a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import urllib.parse
from typing import Any

from reminders import operator
from reminders.channels.signing import message_id
from tests.integration.test_console import (  # noqa: F401 - the module's fixtures
    Console,
    browser,
    console,
    go,
    page,
)


def listed(console: Console, *args: str) -> list[str]:
    got = console.cli("list", *args, "--json", now=console.now)
    return [r["delivery_key"] for r in got.json()]


def shown(page: Any) -> list[str]:
    keys: list[str] = page.locator("tr.delivery-row").evaluate_all(
        "rs => rs.map(r => r.dataset.key)")
    return keys


FILTERS: list[dict[str, str]] = [
    {},
    {"state": "sent"},
    {"state": "dead", "tenant": "globex"},
    {"tenant": "globex", "sort": "updated"},
    {"channel": "webhook", "kind": "digest"},
    {"due_from": "2027-03-01T09:02:00Z", "due_to": "2027-03-01T09:04:00Z"},
    {"tenant": "initech", "state": "scheduled"},
    {"schedule": "invoice-8", "tenant": "globex"},
]


def test_the_deliveries_page_lists_what_list_json_lists(console: Console, page: Any) -> None:
    for filters in FILTERS:
        page.goto(console.url + "/deliveries?" + urllib.parse.urlencode(
            {**filters, "limit": "200"}))
        args = [a for k, v in filters.items() for a in (f"--{k.replace('_', '-')}", v)]
        expected = listed(console, *args, "--limit", "200")
        assert shown(page) == expected, filters
        assert page.inner_text("#shown").startswith(f"{len(expected)} shown"), filters
    assert len(listed(console, "--limit", "200")) > 10
    assert set(listed(console, "--limit", "200")) >= set(listed(console, "--attention"))


def test_the_deliveries_page_pages_by_keyset_as_the_command_line(console: Console,
                                                                 page: Any) -> None:
    for sort in ("due", "updated"):
        everything = listed(console, "--sort", sort, "--limit", "1000")
        page.goto(console.url + f"/deliveries?sort={sort}&limit=25")
        seen = shown(page)
        while page.locator("#next-page").count():
            go(page, "#next-page")
            seen += shown(page)
        assert seen == everything, sort
        assert len(everything) > 25


def test_the_filter_form_and_relative_times(console: Console, page: Any) -> None:
    page.goto(console.url + "/deliveries")
    page.select_option("#browse-filters select[name=state]", "failed")
    page.fill("#browse-filters input[name=tenant]", "globex")
    go(page, "#browse-filters button")
    assert shown(page) == listed(console, "--state", "failed", "--tenant", "globex")
    body = page.inner_text("main")
    assert " ago)" in body
    assert "None" not in body and "{}" not in body
    assert "+00:00" not in body and not any(
        "." in t for t in page.locator("tr.delivery-row time").all_inner_texts())


def test_go_to_takes_a_delivery_key_a_schedule_key_or_a_webhook_id(console: Console,
                                                                   page: Any) -> None:
    dead = console.cli("list", "--state", "dead", "--tenant", "globex", "--json").json()[0]
    page.goto(console.url + "/deliveries")
    page.fill("#goto-form input[name=q]", dead["delivery_key"])
    go(page, "#goto-form button")
    assert page.inner_text("#state") == "dead"
    assert dead["delivery_key"] in page.inner_text("h1")
    # a schedule key opens the schedule's page, whose "all of them" lists its deliveries
    page.fill("#goto-form input[name=q]", "invoice-8")
    go(page, "#goto-form button")
    assert page.inner_text("#schedule-key") == "invoice-8"
    assert page.inner_text("#tenant") == "globex"
    go(page, "#all-deliveries")
    assert shown(page) == listed(console, "--schedule", "invoice-8", "--tenant", "globex")
    assert len(shown(page)) == 4
    # a webhook-id: the key itself, or its percent-encoded form for a key that is not ASCII
    weird = next((r for r in console.cli("list", "--limit", "1000", "--json").json()
                  if message_id(r["delivery_key"]) != r["delivery_key"]), None)
    target = weird or dead
    page.fill("#goto-form input[name=q]", message_id(target["delivery_key"]))
    go(page, "#goto-form button")
    assert target["delivery_key"] in page.inner_text("h1")
    answer = page.goto(console.url + "/go?q=" + urllib.parse.quote("no-such-thing<b>"))
    assert answer.status == 404
    assert page.inner_text("#error") == "no delivery, schedule or webhook-id 'no-such-thing<b>'"


def test_a_bulk_action_on_selected_rows_changes_exactly_those(console: Console,
                                                              page: Any) -> None:
    page.goto(console.url + "/deliveries?tenant=globex&state=failed")
    rows = shown(page)
    assert len(rows) == 3
    chosen = rows[:2]
    for key in chosen:
        page.check(f"input.select[value='{key}']")
    page.select_option("#select-form select[name=as]", "dead")
    go(page, "#act-on-selected")
    assert page.locator("tr.counted-row td.key").all_inner_texts() == chosen
    assert int(page.inner_text("#count")) == 2
    page.fill("input[name=reason]", "globex says the endpoint is gone for good")
    go(page, "#confirm")
    assert "reconciled 2 of the 2 counted failed deliveries as dead" in page.inner_text("#done")
    states = {r["delivery_key"]: r["state"] for r in console.cli(
        "list", "--tenant", "globex", "--limit", "1000", "--json").json()}
    assert [states[k] for k in rows] == ["dead", "dead", "failed"]


def test_a_selected_row_that_changed_before_the_confirmation_is_named(console: Console,
                                                                      page: Any) -> None:
    page.goto(console.url + "/deliveries?tenant=globex&state=dead")
    rows = shown(page)
    for key in rows[:2]:
        page.check(f"input.select[value='{key}']")
    with console.conn() as conn:  # meanwhile, someone else retries the first one
        operator.reconcile(conn, key=rows[0], tenant="globex", target="retry",
                           reason="elsewhere", now=operator_now(console))
    go(page, "#act-on-selected")
    assert page.locator("tr.counted-row td.key").all_inner_texts() == [rows[1]]
    assert page.locator("li.not-acted-on").all_inner_texts() == [
        f"{rows[0]}: it is retrying now, not dead"]


def operator_now(console: Console) -> Any:
    from reminders.clock import parse_instant

    return parse_instant(console.now, "now")


def test_a_deliverys_page_shows_its_payload_request_times_and_links(console: Console,
                                                                    page: Any) -> None:
    dead = console.cli("list", "--state", "dead", "--tenant", "globex", "--schedule",
                       "invoice-8", "--json").json()[0]  # 500 twice: two attempts
    key = dead["delivery_key"]
    page.goto(console.url + "/delivery?" + urllib.parse.urlencode(
        {"tenant": "globex", "key": key}))
    # never None or {} for a value (the rebuilt request body is the JSON it sent, verbatim)
    for part in ("#facts", "#schedule", "#attempts", "#timeline", "#payload-empty"):
        text = page.inner_text(part)
        assert "None" not in text and "{}" not in text and "+00:00" not in text, part
    assert "whsec_" not in page.content()
    # the request of each attempt, rebuilt, headers but the signature
    assert page.locator("details.request").count() == 2
    request = page.inner_text("#request-2 pre")
    assert request.splitlines()[0] == "POST /hooks/globex-down?codes=500 HTTP/1.1"
    assert f"webhook-id: {message_id(key)}" in request
    assert f"Idempotency-Key: {message_id(key)}" in request
    assert "webhook-signature: v1,… (made from the endpoint's secret: never shown)" in request
    assert '"attempt": 2' in request and f'"delivery_key": "{key}"' in request
    assert "not recorded" in page.inner_text("#request-note")
    # relative beside absolute, to the second
    due = page.inner_text("#due")
    assert due.startswith(dead["due_at"].split(".")[0].rstrip("Z") + "Z (") and "ago)" in due
    assert not any("." in t for t in page.locator("time").all_inner_texts())
    # its schedule's, its tenant's and its recipient's other deliveries
    go(page, "#schedule-link")
    assert shown(page) == listed(console, "--schedule", "invoice-8", "--tenant", "globex")
    page.go_back()
    go(page, "#tenant a")
    assert shown(page) == listed(console, "--tenant", "globex", "--limit", "50")


def test_a_payload_is_escaped_pretty_and_whole_on_request(console: Console, page: Any) -> None:
    import json

    hostile = {"note": "<script>alert(1)</script>&amp;", "lines": ["x" * 120] * 40}
    made = console.cli("schedule", "--tenant", "hostile", "--channel", "email", "--at",
                       "2027-03-02T09:00:00Z", "--recipient", "h@x.example", "--payload",
                       json.dumps(hostile), "--json", now=console.now).json()
    key = made["deliveries"][0]["delivery_key"]
    page.goto(console.url + "/delivery?" + urllib.parse.urlencode(
        {"tenant": "hostile", "key": key}))
    assert page.locator("script").count() == 0
    preview = page.inner_text("#payload-preview")
    assert preview.endswith("…") and len(preview) <= 2001
    assert not page.is_visible("#payload")
    page.click("#payload-whole summary")
    assert json.loads(page.inner_text("#payload")) == hostile
    assert page.locator("details.request").count() == 0  # e-mail: no webhook request
    empty = console.cli("schedule", "--tenant", "hostile", "--channel", "email", "--at",
                        "2027-03-02T09:00:00Z", "--recipient", "e@x.example", "--json",
                        now=console.now).json()["deliveries"][0]["delivery_key"]
    page.goto(console.url + "/delivery?" + urllib.parse.urlencode(
        {"tenant": "hostile", "key": empty}))
    assert page.inner_text("#payload-empty") == "no payload (the schedule carries none)"
    assert page.inner_text("#reason") == "no reason given"


def test_tenants_endpoints_and_opt_outs_as_the_command_line_lists_them(console: Console,
                                                                       page: Any) -> None:
    page.goto(console.url + "/tenants")
    tenants = console.cli("tenants", "list", "--json").json()
    assert page.locator("tr.tenant-row").evaluate_all(
        "rs => rs.map(r => r.dataset.tenant)") == [t["tenant"] for t in tenants]
    assert [int(x) for x in page.locator("tr.tenant-row .pending").all_inner_texts()] == [
        t["pending"] for t in tenants]
    endpoints = console.cli("endpoints", "list", "--json").json()
    assert page.locator("tr.endpoint-row td.key").all_inner_texts() == [
        e["url"] for e in endpoints]
    assert "whsec_" not in page.content()
    opt_outs = console.cli("opt-outs", "list", "--json").json()
    assert page.locator("tr.opt-out-row").count() == len(opt_outs)
    # pausing from here is the overview's confirmed action, with a reason
    go(page, "tr.tenant-row[data-tenant='initech'] >> text=resume…")
    assert page.url.endswith("/actions/tenant?tenant=initech&pause=0")


def test_go_to_a_name_of_several_things_lists_each_with_its_own_page(console: Console,
                                                                     page: Any) -> None:
    # a value that is a delivery key of globex's and the schedule key of two other tenants'
    # schedules: the go-to box cannot pick, so it lists the three, each linked to its own page
    dead = console.cli("list", "--state", "dead", "--tenant", "globex", "--json").json()[0]
    name = dead["delivery_key"]
    for tenant, channel in (("pick-a", "email"), ("pick-b", "sms")):
        console.cli("schedule", "--tenant", tenant, "--channel", channel, "--at",
                    "2027-03-02T09:00:00Z", "--recipient", f"{tenant}@x.example"
                    if channel == "email" else "+15550100", "--key", name, "--json",
                    now=console.now)
    page.goto(console.url + "/deliveries")
    page.fill("#goto-form input[name=q]", name)
    go(page, "#goto-form button")
    assert urllib.parse.urlsplit(page.url).path == "/go"
    assert page.inner_text("h1") == f"Go to {name}"
    candidates = page.locator("#found li.found a")
    listed_here = [(a.inner_text(), a.get_attribute("href")) for a in candidates.all()]
    expected = [(f"delivery {name}", "/delivery?" + urllib.parse.urlencode(
                    {"tenant": "globex", "key": name})),
                (f"schedule {name}", "/schedule?" + urllib.parse.urlencode(
                    {"tenant": "pick-a", "key": name})),
                (f"schedule {name}", "/schedule?" + urllib.parse.urlencode(
                    {"tenant": "pick-b", "key": name}))]
    assert sorted(listed_here) == sorted(expected)
    assert sorted(page.locator("#found li.found").all_inner_texts()) == sorted([
        f"delivery {name} of tenant globex", f"schedule {name} of tenant pick-a",
        f"schedule {name} of tenant pick-b"])
    # each link, followed, lands on the page of what it names
    for text, href in listed_here:
        page.goto(console.url + "/go?" + urllib.parse.urlencode({"q": name}))
        go(page, f"#found a[href='{href}']")
        tenant = urllib.parse.parse_qs(urllib.parse.urlsplit(href).query)["tenant"][0]
        assert page.inner_text("#tenant").split()[0] == tenant, href
        if text.startswith("delivery "):
            assert urllib.parse.urlsplit(page.url).path == "/delivery"
            assert page.inner_text("h1") == f"Delivery {name}"
            assert page.inner_text("#state") == "dead"
        else:
            assert urllib.parse.urlsplit(page.url).path == "/schedule"
            assert page.inner_text("#schedule-key") == name
            shown_schedule = console.cli("schedules", "show", name, "--tenant", tenant,
                                         "--json", now=console.now).json()
            assert page.inner_text("#channel") == shown_schedule["channel"], href
    # the tenant given narrows it to one, which opens directly
    page.goto(console.url + "/go?" + urllib.parse.urlencode({"q": name, "tenant": "pick-b"}))
    assert urllib.parse.urlsplit(page.url).path == "/schedule"
    assert page.inner_text("#tenant") == "pick-b"
