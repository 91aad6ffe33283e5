"""The console's Kinds, Endpoints and Opt-outs pages and a tenant's limits in a real headless
browser (Debian's Chromium through Playwright): each list is the command line's `... list
--json`; each change from the console leaves the same rows and operator actions (but `via`)
as the same command on a twin, and a bad value is refused with the command's own message."""
# The fixtures come from test_console (this module gets its own console and traffic); pytest
# passes them by name, which ruff reads as a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import urllib.parse
from typing import Any

from reminders.channels.signing import new_secret
from tests.integration.test_console import (  # noqa: F401 - the module's fixtures
    Console,
    browser,
    console,
    go,
    page,
)


def cli_json(console: Console, *argv: str) -> Any:
    return console.cli(*argv, "--json", now=console.now, **key_env(console)).json()


def key_env(console: Console) -> dict[str, str]:
    """The KMS key the traffic's endpoints were sealed with, for `endpoints add` and
    `rotate-secret` (the console fixture's command line has none of its own)."""
    with console.conn() as conn:
        row = conn.execute("select secret_key_id from endpoints where secret_key_id is not null"
                           " limit 1").fetchone()
    return {"REMINDERS_SECRETS_KEY_ID": row["secret_key_id"]} if row else {}


def cli_error(console: Console, *argv: str) -> str:
    got = console.cli(*argv, now=console.now, **key_env(console))
    assert got.code == 2 and got.out == "", got
    return got.err.removeprefix("reminders: error: ").rstrip("\n")


def actions(console: Console, obj: str, name: str) -> list[dict[str, Any]]:
    with console.conn() as conn:
        rows: list[dict[str, Any]] = conn.execute(
            "select at, who, via, action, object, tenant, name, reason, detail"
            " from operator_actions where object = %s and name = %s order by id",
            (obj, name)).fetchall()
    return rows


def alike(web: list[dict[str, Any]], cli: list[dict[str, Any]],
          swap: tuple[str, str]) -> None:
    """The console's actions are the command line's, but `via` and the twin's name."""
    def norm(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace(swap[0], "TWIN").replace(swap[1], "TWIN")
        if isinstance(value, dict):
            return {k: norm(v) for k, v in value.items() if k != "via"}
        return value

    assert [a["via"] for a in web] == ["console"] * len(web)
    assert [a["via"] for a in cli] == ["cli"] * len(cli)
    assert [norm(a) for a in web] == [norm(a) for a in cli]
    assert web


def fill_and_confirm(page: Any, fields: dict[str, str], reason: str) -> str:
    for name, value in fields.items():
        page.fill(f"[name={name}]", value)
    page.fill("input[name=reason]", reason)
    go(page, "#confirm")
    text: str = page.inner_text("main")
    return text


# ---------------------------------------------------------------- kinds


def kinds_shown(page: Any) -> list[list[str]]:
    rows: list[list[str]] = page.locator("tr.kind-row").evaluate_all(
        "rs => rs.map(r => [r.dataset.kind, r.querySelector('.max-attempts').innerText,"
        " r.querySelector('.redrive-budget').innerText, r.querySelector('.priority').innerText])")
    return rows


def kind_of(console: Console, name: str) -> dict[str, Any]:
    found = [k for k in cli_json(console, "kinds", "list") if k["name"] == name]
    assert len(found) == 1, name
    return {k: v for k, v in found[0].items() if k != "name"}


def test_the_kinds_page_lists_and_sets_kinds_as_the_command_line(console: Console,
                                                                 page: Any) -> None:
    page.goto(console.url + "/kinds")
    listed = cli_json(console, "kinds", "list")
    assert kinds_shown(page) == [[k["name"], str(k["max_attempts"]), str(k["redrive_budget"]),
                                  str(k["priority"])] for k in listed]
    assert {"default", "digest"} <= {k["name"] for k in listed}

    fields = {"stale_after": "3h", "max_attempts": "5", "backoff_base": "20s",
              "send_window": "Mon-Fri 08:00-18:00", "priority": "7"}
    page.fill("#new-kind input[name=name]", "trip-web")
    go(page, "#new-kind button")
    assert "kind trip-web set" in fill_and_confirm(page, fields, "INC-3: trips go slower")
    cli_json(console, "kinds", "set", "trip-cli", "--stale-after", "3h", "--max-attempts", "5",
             "--backoff-base", "20s", "--send-window", "Mon-Fri 08:00-18:00", "--priority",
             "7", "--reason", "INC-3: trips go slower")
    assert kind_of(console, "trip-web") == kind_of(console, "trip-cli")
    assert kind_of(console, "trip-web")["priority"] == 7
    # a change of one policy keeps the others, from either
    page.goto(console.url + "/kinds")
    go(page, "tr.kind-row[data-kind='trip-web'] a.change")
    assert "kind trip-web set" in fill_and_confirm(page, {"max_attempts": "9",
                                                          "spread": "15m"}, "more tries")
    cli_json(console, "kinds", "set", "trip-cli", "--max-attempts", "9", "--spread", "15m",
             "--reason", "more tries")
    assert kind_of(console, "trip-web") == kind_of(console, "trip-cli")
    assert kind_of(console, "trip-web")["max_attempts"] == 9
    alike(actions(console, "kind", "trip-web"), actions(console, "kind", "trip-cli"),
          ("trip-web", "trip-cli"))
    # a bad value: the command's own message, nothing changed
    before = kind_of(console, "trip-web")
    for field, flag, value in (("max_attempts", "--max-attempts", "0"),
                               ("stale_after", "--stale-after", "soon"),
                               ("send_window", "--send-window", "25:00-26:00"),
                               ("priority", "--priority", "10")):
        page.goto(console.url + "/actions/kind?name=trip-web")
        fill_and_confirm(page, {field: value}, "a bad value")
        assert page.inner_text("#error") == cli_error(
            console, "kinds", "set", "trip-web", f"{flag}={value}"), field
    assert kind_of(console, "trip-web") == before
    page.goto(console.url + "/actions/kind?name=Bad%20Name")
    fill_and_confirm(page, {}, "a bad name")
    assert page.inner_text("#error") == cli_error(console, "kinds", "set", "Bad Name")


# ---------------------------------------------------------------- endpoints


def endpoints_shown(page: Any) -> list[int]:
    ids: list[str] = page.locator("tr.endpoint-row").evaluate_all(
        "rs => rs.map(r => r.dataset.id)")
    return [int(i) for i in ids]


def endpoint_row(console: Console, url: str) -> dict[str, Any] | None:
    with console.conn() as conn:
        row: dict[str, Any] | None = conn.execute(
            "select tenant, url, updated_at, overlap_until, secret_key_id,"
            " next_secret_ciphertext is null as one_secret from endpoints where url = %s",
            (url,)).fetchone()
    return row


def test_the_endpoints_page_lists_removes_and_finishes_as_the_command_line(
        console: Console, page: Any) -> None:
    web, cli = "https://hooks.example.com/web", "https://hooks.example.com/cli"
    secrets = []
    for url in (web, cli):
        secret = new_secret()
        cli_json(console, "endpoints", "add", url, "--secret", secret, "--tenant", "globex")
        rotated = new_secret()
        cli_json(console, "endpoints", "rotate-secret", url, "--secret", rotated,
                 "--tenant", "globex")
        secrets += [secret, rotated]
    for tenant in (None, "globex"):
        page.goto(console.url + "/endpoints" + (f"?tenant={tenant}" if tenant else ""))
        listed = cli_json(console, "endpoints", "list", *(["--tenant", tenant] if tenant
                                                          else []))
        assert endpoints_shown(page) == [e["id"] for e in listed]
        content = page.content()
        assert "whsec_" not in content and not any(s in content for s in secrets)
    assert {web, cli} <= {e["url"] for e in listed}

    def twin(url: str) -> dict[str, Any] | None:
        row = endpoint_row(console, url)
        return None if row is None else {**row, "url": "TWIN"}

    page.goto(console.url + "/endpoints?tenant=globex")
    go(page, f"tr.endpoint-row:has-text('{web}') a.finish")
    assert "signs with the new secret only" in fill_and_confirm(page, {}, "rotation checked")
    cli_json(console, "endpoints", "rotate-secret", cli, "--tenant", "globex", "--finish",
             "--reason", "rotation checked")
    assert twin(web) == twin(cli)
    assert twin(web) is not None and twin(web)["one_secret"] is True  # type: ignore[index]
    # finishing again: the command's refusal, on the page as on the command line
    page.goto(console.url + "/actions/endpoint?" + urllib.parse.urlencode(
        {"url": web, "tenant": "globex", "do": "finish"}))
    fill_and_confirm(page, {}, "again")
    assert page.inner_text("#error") == cli_error(
        console, "endpoints", "rotate-secret", web, "--tenant", "globex", "--finish")

    page.goto(console.url + "/endpoints?tenant=globex")
    go(page, f"tr.endpoint-row:has-text('{web}') a.remove")
    assert f"endpoint removed: {web}" in fill_and_confirm(page, {}, "globex moved its hooks")
    cli_json(console, "endpoints", "remove", cli, "--tenant", "globex", "--reason",
             "globex moved its hooks")
    assert endpoint_row(console, web) is None and endpoint_row(console, cli) is None
    def since_setup(url: str) -> list[dict[str, Any]]:  # added and rotated by the command line
        return actions(console, "endpoint", url)[2:]

    alike(since_setup(web), since_setup(cli), (web, cli))
    assert [a["action"] for a in since_setup(web)] == [
        "finished the secret rotation of", "removed"]
    page.goto(console.url + "/endpoints")
    assert endpoints_shown(page) == [e["id"] for e in cli_json(console, "endpoints", "list")]


# ---------------------------------------------------------------- opt-outs


def opt_outs_shown(page: Any) -> list[list[str]]:
    rows: list[list[str]] = page.locator("tr.opt-out-row").evaluate_all(
        "rs => rs.map(r => [r.dataset.tenant, r.dataset.recipient, r.dataset.channel])")
    return rows


def opt_outs_listed(console: Console, *argv: str) -> list[list[str]]:
    return [[o["tenant"], o["recipient"], o["channel"]]
            for o in cli_json(console, "opt-outs", "list", *argv)]


def test_the_opt_outs_page_lists_and_opts_out_as_the_command_line(console: Console,
                                                                  page: Any) -> None:
    web, cli = "web@opt.example", "cli@opt.example"
    page.goto(console.url + "/opt-outs?tenant=acme")
    page.fill("#opt-out-form input[name=recipient]", web)
    page.select_option("#opt-out-form select[name=channel]", "email")
    go(page, "#opt-out-form button")
    assert f"{web} opted out of email" in fill_and_confirm(page, {}, "asked us by phone")
    assert cli_json(console, "opt-out", "--tenant", "acme", "--recipient", cli, "--channel",
                    "email", "--reason", "asked us by phone")["changed"] is True
    for filters in ({}, {"tenant": "acme"}, {"channel": "email"}, {"recipient": web}):
        page.goto(console.url + "/opt-outs?" + urllib.parse.urlencode(filters))
        argv = [a for k, v in filters.items() for a in (f"--{k}", v)]
        assert opt_outs_shown(page) == opt_outs_listed(console, *argv), filters
    assert ["acme", web, "email"] in opt_outs_listed(console)
    # again: already, and nothing recorded
    page.goto(console.url + "/actions/opt?" + urllib.parse.urlencode(
        {"tenant": "acme", "recipient": web, "channel": "email", "out": "1"}))
    assert f"{web} opted out of email (already)" in fill_and_confirm(page, {}, "again")
    cli_json(console, "opt-out", "--tenant", "acme", "--recipient", cli, "--channel", "email",
             "--reason", "again")
    page.goto(console.url + "/opt-outs?tenant=acme")
    go(page, f"tr.opt-out-row[data-recipient='{web}'] a.opt-in")
    assert f"{web} opted in to email" in fill_and_confirm(page, {}, "wants them again")
    cli_json(console, "opt-in", "--tenant", "acme", "--recipient", cli, "--channel", "email",
             "--reason", "wants them again")
    left = opt_outs_listed(console, "--tenant", "acme")
    assert not [o for o in left if o[1] in (web, cli)]

    def on_acme(who: str) -> list[dict[str, Any]]:
        return [a for a in actions(console, "tenant", "acme") if who in a["action"]]

    alike(on_acme(web), on_acme(cli), (web, cli))
    assert [(a["action"], a["reason"]) for a in on_acme(web)] == [
        (f"opted out {web} on email", "asked us by phone"),
        (f"opted in {web} on email", "wants them again")]
    page.goto(console.url + "/actions/opt?" + urllib.parse.urlencode(
        {"tenant": "acme", "recipient": "bad\nname", "channel": "email", "out": "1"}))
    assert page.inner_text("#error") == cli_error(
        console, "opt-out", "--tenant", "acme", "--recipient", "bad\nname", "--channel",
        "email").replace("--recipient", "recipient")


# ---------------------------------------------------------------- a tenant's limits


def limits_of(console: Console, tenant: str) -> dict[str, Any]:
    found = [t for t in cli_json(console, "tenants", "list") if t["tenant"] == tenant]
    assert len(found) == 1
    return {k: found[0][k] for k in ("max_pending", "schedules_per_minute",
                                     "default_limits")}


def test_a_tenants_limits_are_set_as_with_tenants_set(console: Console, page: Any) -> None:
    assert limits_of(console, "globex") == limits_of(console, "initech")
    page.goto(console.url + "/tenants")
    go(page, "tr.tenant-row[data-tenant='globex'] a.limits")
    assert "tenant globex: limits set" in fill_and_confirm(
        page, {"max_pending": "5000", "schedules_per_minute": "60"}, "globex's plan")
    cli_json(console, "tenants", "set", "initech", "--max-pending", "5000",
             "--schedules-per-minute", "60", "--reason", "globex's plan")
    assert limits_of(console, "globex") == limits_of(console, "initech") == {
        "max_pending": 5000, "schedules_per_minute": 60, "default_limits": False}
    page.goto(console.url + "/actions/tenant-limits?tenant=globex")
    assert page.inner_text("#max-pending") == "5000"
    fill_and_confirm(page, {"schedules_per_minute": "default"}, "back to the default")
    cli_json(console, "tenants", "set", "initech", "--schedules-per-minute", "default",
             "--reason", "back to the default")
    assert limits_of(console, "globex") == limits_of(console, "initech")
    alike([a for a in actions(console, "tenant", "globex") if a["action"] == "limits set"],
          [a for a in actions(console, "tenant", "initech") if a["action"] == "limits set"],
          ("globex", "initech"))
    page.goto(console.url + "/actions/tenant-limits?tenant=globex")
    fill_and_confirm(page, {"max_pending": "lots"}, "a bad value")
    assert page.inner_text("#error") == ("--max-pending: expected a whole number or "
                                         "'default', got 'lots'")
    page.goto(console.url + "/actions/tenant-limits?tenant=globex")
    fill_and_confirm(page, {"max_pending": "-1"}, "a bad value")
    assert page.inner_text("#error") == cli_error(console, "tenants", "set", "globex",
                                                  "--max-pending=-1")
    assert limits_of(console, "globex")["max_pending"] == 5000
    answer = page.goto(console.url + "/actions/tenant-limits?tenant=nobody")
    assert answer.status == 404
