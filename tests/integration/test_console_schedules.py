"""The console's Schedules list and a schedule's page in a real headless browser (Debian's
Chromium through Playwright), after demo-like traffic: the list is `reminders schedules list
--json`, the page is `reminders schedules show --json`, and pause, resume, trigger and
backfill from the console leave the same rows and the same operator actions (but `via`) as
the same commands from the command line on a twin schedule."""
# The fixtures come from test_console (this module gets its own console and traffic); pytest
# passes them by name, which ruff reads as a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import html
import re
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest

from reminders import operator
from tests.integration.cli_helpers import BLANK_REQUIRED
from tests.integration.test_console import (  # noqa: F401 - the module's fixtures
    Console,
    browser,
    console,
    go,
    page,
)

WEB, CLI = "hold-web", "hold-cli"  # twins: one held from the console, one from the command line
RULE = "FREQ=DAILY;BYHOUR=9;BYMINUTE=0"


def schedules_listed(console: Console, *args: str) -> list[tuple[str, str]]:
    got = console.cli("schedules", "list", *args, "--json", now=console.now).json()
    return [(r["tenant"], r["schedule_key"]) for r in got]


def schedules_shown(page: Any) -> list[tuple[str, str]]:
    rows: list[list[str]] = page.locator("tr.schedule-row").evaluate_all(
        "rs => rs.map(r => [r.dataset.tenant, r.dataset.key])")
    return [(t, k) for t, k in rows]


def shown_json(console: Console, key: str, tenant: str) -> dict[str, Any]:
    data: dict[str, Any] = console.cli("schedules", "show", key, "--tenant", tenant, "--json",
                                       now=console.now).json()
    return data


def assert_page_is_show(page: Any, data: dict[str, Any]) -> None:
    """Every fact of `schedules show --json` is on the page, as it says it."""
    assert page.inner_text("#schedule-key") == data["schedule_key"]
    assert page.inner_text("#state") == data["state"]
    assert page.inner_text("#tenant") == data["tenant"]
    assert page.inner_text("#kind") == data["kind"]
    assert page.inner_text("#revision") == str(data["revision"])
    assert page.inner_text("#generation") == str(data["generation"])
    if data["rule"]:
        assert page.inner_text("#rule") == data["rule"]
        assert page.inner_text("#zone") == data["tz"]
        assert page.inner_text("#local-start") == data["local_start"]
        assert page.inner_text("#dst") == (f"gap: {data['dst']['gap']}, "
                                           f"overlap: {data['dst']['overlap']}")
    else:
        assert page.inner_text("#rule") == f"once, at {data['at']}"
    assert page.locator("#next li.occurrence").evaluate_all(
        "ls => ls.map(l => l.dataset.utc)") == [o["utc"] for o in data["next"]]
    assert page.locator("tr.schedule-delivery").evaluate_all(
        "rs => rs.map(r => [r.dataset.generation, r.dataset.key])") == [
        [str(g["generation"]), d["delivery_key"]]
        for g in data["deliveries"] for d in g["deliveries"]]
    rows = page.locator("#timeline tr.action")
    assert [(rows.nth(i).locator(".who").inner_text(), rows.nth(i).locator(".via").inner_text(),
             rows.nth(i).locator(".what").inner_text(), rows.nth(i).locator(".why").inner_text())
            for i in range(rows.count())] == [
        (a["who"], a["via"], a["action"], a["reason"] or "no reason given")
        for a in data["timeline"]]
    body = page.inner_text("main")
    assert "None" not in body and "{}" not in body


def test_the_schedules_page_lists_what_schedules_list_json_lists(console: Console,
                                                                 page: Any) -> None:
    for filters in ({}, {"tenant": "globex"}, {"state": "finished"}, {"state": "active"},
                    {"tenant": "initech", "state": "active"}):
        page.goto(console.url + "/schedules?" + urllib.parse.urlencode(filters))
        args = [a for k, v in filters.items() for a in (f"--{k}", v)]
        expected = schedules_listed(console, *args)
        assert schedules_shown(page) == expected, filters
        assert page.inner_text("#shown").startswith(f"{len(expected)} shown"), filters
    everything = schedules_listed(console)
    assert len(everything) > 4 and ("globex", "weekly-digest") in everything
    # a page at a time, by keyset, as `--after TENANT/KEY` continues
    page.goto(console.url + "/schedules?limit=2")
    seen = schedules_shown(page)
    while page.locator("#next-page").count():
        go(page, "#next-page")
        seen += schedules_shown(page)
    assert seen == everything
    page.select_option("#schedule-filters select[name=state]", "finished")
    go(page, "#schedule-filters button")
    assert schedules_shown(page) == schedules_listed(console, "--state", "finished")


def test_a_schedules_page_says_what_schedules_show_json_says(console: Console,
                                                             page: Any) -> None:
    for tenant, key in (("globex", "weekly-digest"), ("globex", "invoice-8"),
                        ("initech", "reminder-1")):
        page.goto(console.url + "/schedules?" + urllib.parse.urlencode({"tenant": tenant}))
        go(page, f"tr.schedule-row[data-key='{key}'] a")
        data = shown_json(console, key, tenant)
        assert_page_is_show(page, data)
    digest = shown_json(console, "weekly-digest", "globex")
    assert digest["rule"] == "FREQ=WEEKLY;BYDAY=MO;BYHOUR=10" and len(digest["next"]) == 5
    # from one of its deliveries' pages to the schedule's
    sent = digest["deliveries"][-1]["deliveries"][-1]["delivery_key"]
    page.goto(console.url + "/delivery?" + urllib.parse.urlencode(
        {"tenant": "globex", "key": sent}))
    go(page, "#schedule-page-link")
    assert page.inner_text("#schedule-key") == "weekly-digest"
    answer = page.goto(console.url + "/schedule?tenant=globex&key=nope<b>")
    assert answer.status == 404
    refused = console.cli("schedules", "show", "nope<b>", "--tenant", "globex", "--json",
                          now=console.now)
    assert refused.code == 3
    assert f"reminders: error: {page.inner_text('#error')}\n" == refused.err
    assert page.inner_text("#error") == "no schedule with key 'nope<b>' for tenant 'globex'"


def normalizer(console: Console, key: str) -> Any:
    """Writes the schedule's key as KEY and its id (in its delivery keys) as ID."""
    with console.conn() as conn:
        row = conn.execute("select id from schedules where tenant = 'acme' and"
                           " schedule_key = %s", (key,)).fetchone()
    assert row is not None, key
    ident = f"schedule:{row['id']}/"

    def norm(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace(key, "KEY").replace(ident, "schedule:ID/")
        if isinstance(value, dict):
            return {k: norm(v) for k, v in value.items()}
        if isinstance(value, list):
            return [norm(v) for v in value]
        return value

    return norm


def snapshot(console: Console, key: str) -> dict[str, Any]:
    """The rows a schedule's holding touches and its operator actions, normalised (KEY, ID)
    and `via` apart (the console's say console, the command line's cli)."""
    norm = normalizer(console, key)
    with console.conn() as conn:
        schedule = conn.execute(
            "select state, paused, revision, generation, updated_at from schedules"
            " where tenant = 'acme' and schedule_key = %s", (key,)).fetchone()
        deliveries = conn.execute(
            "select d.delivery_key, d.origin, d.recipient, d.occurrence_at, d.due_at, d.state,"
            " d.generation, d.revision, d.attempts_made, d.updated_at"
            " from deliveries d join schedules s on s.id = d.schedule_id"
            " where s.tenant = 'acme' and s.schedule_key = %s"
            " order by d.occurrence_at, d.recipient, d.delivery_key", (key,)).fetchall()
        due = conn.execute(
            "select q.* from due_queue q join deliveries d on d.id = q.id"
            " join schedules s on s.id = d.schedule_id where s.schedule_key = %s"
            " order by d.occurrence_at, d.recipient", (key,)).fetchall()
        actions = conn.execute(
            "select at, who, via, action, object, tenant, name, reason, detail"
            " from operator_actions where object = 'schedule' and name = %s order by id",
            (key,)).fetchall()
    for row in due:
        row.pop("id", None)
    vias = [a.pop("via") for a in actions]
    return {"schedule": norm(schedule), "deliveries": norm(deliveries), "due": norm(due),
            "actions": norm(actions), "vias": vias}


def twins_alike(console: Console) -> None:
    web, cli = snapshot(console, WEB), snapshot(console, CLI)
    assert set(web.pop("vias")) <= {"console"} and set(cli.pop("vias")) <= {"cli"}
    assert web == cli


def confirm(page: Any, console: Console, link: str, reason: str) -> str:
    page.goto(console.url + "/schedule?" + urllib.parse.urlencode(
        {"tenant": "acme", "key": WEB}))
    go(page, link)
    page.fill("input[name=reason]", reason)
    go(page, "#confirm")
    text: str = page.inner_text("#done")
    return text


def test_holding_from_the_console_leaves_what_the_command_line_leaves(console: Console,
                                                                      page: Any) -> None:
    for key in (WEB, CLI):
        console.cli("schedule", "--tenant", "acme", "--channel", "email", "--recipients",
                    "a@hold.example,b@hold.example", "--rrule", RULE, "--tz", "UTC",
                    "--start", "2027-02-20T09:00", "--key", key, "--json",
                    now=console.now).json()
    twins_alike(console)

    def cli(*argv: str) -> Any:
        return console.cli("schedules", *argv, "--tenant", "acme", "--json",
                           now=console.now).json()

    assert confirm(page, console, "#pause-link", "INC-9: hold it") == f"{WEB} paused"
    assert cli("pause", CLI, "--reason", "INC-9: hold it")["changed"] is True
    twins_alike(console)
    assert shown_json(console, WEB, "acme")["state"] == "paused"
    assert confirm(page, console, "#resume-link", "INC-9: over") == f"{WEB} resumed"
    cli("resume", CLI, "--reason", "INC-9: over")
    twins_alike(console)

    assert confirm(page, console, "#trigger-link", "sent early on request").startswith(
        f"triggered {WEB}: 2 deliveries due now")
    made = page.locator("#made li.made").evaluate_all("ls => ls.map(l => l.dataset.key)")
    triggered = cli("trigger", CLI, "--reason", "sent early on request")["triggered"]
    web_key, cli_key = normalizer(console, WEB), normalizer(console, CLI)
    assert [web_key(k) for k in made] == [cli_key(t["delivery_key"]) for t in triggered]
    assert all(":trigger:" in k for k in made)
    twins_alike(console)

    # backfill: the console's list first is the command line's --dry-run
    window = {"from": "2027-02-25T00:00:00Z", "to": "2027-02-28T12:00:00Z", "limit": "3"}
    page.goto(console.url + "/schedule?" + urllib.parse.urlencode(
        {"tenant": "acme", "key": WEB}))
    for name, value in window.items():
        page.fill(f"#backfill-form input[name={name}]", value)
    go(page, "#backfill-form button")
    would = page.locator("tr.would-make").evaluate_all(
        "rs => rs.map(r => [r.dataset.occurrence, r.dataset.recipient])")
    flags = ["--from", window["from"], "--to", window["to"], "--limit", window["limit"]]
    dry = console.cli("schedules", "backfill", CLI, "--tenant", "acme", *flags, "--dry-run",
                      "--json", now=console.now)
    assert dry.code == 0, dry.err
    import json

    dry_data = json.loads(dry.out)
    assert would == [[m["occurrence_at"], m["recipient"]] for m in dry_data["would_make"]]
    assert len(would) == 6 and dry_data["more"] is True  # 4 days in the window, 3 at most
    assert int(page.inner_text("#occurrences")) == dry_data["occurrences"] == 3
    twins_alike(console)  # a dry run changes nothing
    page.fill("input[name=reason]", "INC-9: the outage's days")
    go(page, "#confirm")
    assert page.inner_text("#done").startswith(f"backfilled {WEB}: 6 deliveries made")
    done = console.cli("schedules", "backfill", CLI, "--tenant", "acme", *flags, "--reason",
                       "INC-9: the outage's days", "--json", now=console.now)
    assert done.code == 0, done.err
    made = page.locator("#made li.made").evaluate_all("ls => ls.map(l => l.dataset.key)")
    assert [web_key(k) for k in made] == [cli_key(m["delivery_key"])
                                          for m in json.loads(done.out)["made"]]
    twins_alike(console)
    # again: nothing is made twice, from either
    page.goto(console.url + "/actions/schedule/backfill?" + urllib.parse.urlencode(
        {"tenant": "acme", "key": WEB, **window}))
    assert int(page.inner_text("#count")) == 0 and page.locator("#confirm").count() == 0

    web = snapshot(console, WEB)
    assert [a["action"] for a in web["actions"]] == [
        "paused", "resumed", "triggered", "backfilled"]
    assert {a["who"] for a in web["actions"]} == {operator.current_user()}
    assert [a["reason"] for a in web["actions"]] == [
        "INC-9: hold it", "INC-9: over", "sent early on request", "INC-9: the outage's days"]
    page.goto(console.url + "/schedule?" + urllib.parse.urlencode(
        {"tenant": "acme", "key": WEB}))
    assert_page_is_show(page, shown_json(console, WEB, "acme"))


def _token(console: Console) -> str:
    with urllib.request.urlopen(console.url + "/actions/tenant?tenant=initech&pause=0",
                                timeout=10) as answer:
        found = re.search(r'name="csrf" value="([^"]+)"', answer.read().decode())
    assert found is not None
    return found.group(1)


@pytest.mark.parametrize("path,fields", [
    ("/actions/schedule", {"tenant": "globex", "key": "weekly-digest", "do": "pause"}),
    ("/actions/schedule", {"tenant": "globex", "key": "weekly-digest", "do": "trigger"}),
    ("/actions/schedule/backfill", {"tenant": "globex", "key": "weekly-digest",
                                    "from": "2027-02-01T00:00:00Z",
                                    "to": "2027-02-28T00:00:00Z"}),
])
def test_a_schedule_action_without_a_reason_changes_nothing(console: Console, path: str,
                                                            fields: dict[str, str]) -> None:
    before = shown_json(console, "weekly-digest", "globex")
    request = urllib.request.Request(
        console.url + path, data=urllib.parse.urlencode(
            {**fields, "csrf": _token(console), "reason": " "}).encode(), method="POST",
        headers={"Content-Type": "application/x-www-form-urlencoded"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    shown = re.search(r'id="error">(.*?)</p>', refused.value.read().decode(), re.S)
    assert shown is not None
    assert (refused.value.code, html.unescape(shown.group(1))) == (400, BLANK_REQUIRED)
    assert shown_json(console, "weekly-digest", "globex") == before
