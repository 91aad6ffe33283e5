"""The command line an operator trusts: every bad input is one line and a documented exit
status, repeated requests change nothing and say so, and the operator reads (filters, paging,
timelines, lists) answer from Postgres even when the queues do not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reminders import db
from reminders.channels.signing import new_secret
from reminders.local import stack
from tests.integration.cli_helpers import (
    BAD_REASONS,
    BLANK_OPTIONAL,
    BLANK_REQUIRED,
    Cli,
    Result,
    base_env,
)

DUE = "2027-03-01T09:05:00Z"
ALLOW = {"REMINDERS_WEBHOOK_ALLOW": "127.0.0.1/32"}
EMAIL = ["schedule", "--tenant", "acme", "--channel", "email", "--at", DUE]


def error(got: Result, code: int, line: str) -> None:
    assert (got.code, got.out, got.err) == (code, "", f"reminders: error: {line}\n")


def nothing_written(conn: db.Connection) -> None:
    for table in ("schedules", "deliveries", "endpoints", "opt_outs", "tenants"):
        assert conn.execute(f"select count(*) as n from {table}").fetchone() == {"n": 0}, table


@pytest.fixture
def hook(cli: Cli, receiver: Any) -> str:
    url: str = receiver.hook_url("x")
    cli("endpoints", "add", url, "--secret", receiver.secret, "--json", **ALLOW).json()
    return url


# ---------------------------------------------------------------- crashes become one line


def test_an_instant_past_year_9999_in_utc_is_refused(cli: Cli, conn: db.Connection) -> None:
    got = cli(*EMAIL[:-2], "--recipient", "a@example.com", "--at", "9999-12-31T23:59:59-05:00")
    error(got, 2, "--at: out of range: '9999-12-31T23:59:59-05:00'")
    nothing_written(conn)
    got = cli(*EMAIL[:-2], "--recipient", "a@example.com", "--at", "9999-12-31T22:00:00Z")
    error(got, 2, "--at: out of range: '9999-12-31T22:00:00Z' (the latest year accepted is "
                  "9979)")
    nothing_written(conn)


def test_a_nul_byte_in_a_recipients_file_is_refused(cli: Cli, conn: db.Connection,
                                                    tmp_path: Path) -> None:
    people = tmp_path / "people.txt"
    people.write_text("a@example.com\nb\x00@example.com\n", encoding="utf-8")
    got = cli(*EMAIL, "--recipients-file", str(people))
    error(got, 2, "--recipients-file line 2: recipient 'b\\x00@example.com' contains a NUL byte")
    nothing_written(conn)


@pytest.mark.parametrize(("payload", "line"), [
    ('{"a": "x\\u0000"}', "--payload: payload contains a NUL character (\\u0000), which cannot "
                          "be stored"),
    ('{"a": NaN}', "--payload is not JSON: NaN is not a JSON number"),
    ('{"a": Infinity}', "--payload is not JSON: Infinity is not a JSON number"),
], ids=["NUL", "NaN", "Infinity"])
def test_a_payload_postgres_cannot_store_names_the_flag(cli: Cli, conn: db.Connection,
                                                        payload: str, line: str) -> None:
    got = cli(*EMAIL, "--recipient", "a@example.com", "--payload", payload)
    error(got, 2, line)
    nothing_written(conn)


def test_the_api_refuses_a_nul_payload_and_nan_before_postgres(conn: db.Connection) -> None:
    from reminders import schedules
    from reminders.errors import InvalidInput
    from tests.conftest import T0

    for payload in ({"a": "x\x00"}, {"a": float("nan")}):
        with pytest.raises(InvalidInput):
            schedules.schedule(conn, tenant="acme", recipients=["a@example.com"],
                               channel="email", at=T0, now=T0, payload=payload)
    for people in (["a\nb@example.com"], ["a:b"], ["x\x00"]):
        with pytest.raises(InvalidInput, match="recipient"):
            schedules.schedule(conn, tenant="acme", recipients=people, channel="email",
                               at=T0, now=T0)


@pytest.mark.parametrize("command", ["show", "list"])
def test_a_reader_that_goes_away_is_no_traceback(cli: Cli, tmp_path: Path,
                                                 command: str) -> None:
    people = tmp_path / "people.txt"
    # Each answer is well over a pipe's 64 KiB: the reader goes while it still writes.
    people.write_text("".join(f"p{i}@example.com\n" for i in range(1000)), encoding="utf-8")
    cli(*EMAIL, "--recipients-file", str(people), "--key", "many", "--json").json()
    args = ["show", "many", "--tenant", "acme", "--limit", "1000"] if command == "show" else [
        "list", "--limit", "1000"]
    env = {**cli.env, "REMINDERS_NOW": DUE}
    reader = subprocess.Popen([sys.executable, "-m", "reminders.cli", *args], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert reader.stdout is not None and reader.stderr is not None
    reader.stdout.readline()  # `| head -1`
    reader.stdout.close()
    err = reader.stderr.read().decode()
    assert (reader.wait(timeout=60), err) == (0, "")


def test_show_of_a_schedule_key_shows_its_first_deliveries_and_says_there_are_more(
        cli: Cli, tmp_path: Path) -> None:
    """Four reads a delivery it shows: a fan-out's thousands are paged by `list --schedule`."""
    people = tmp_path / "people.txt"
    people.write_text("".join(f"p{i:02}@example.com\n" for i in range(30)), encoding="utf-8")
    cli(*EMAIL, "--recipients-file", str(people), "--key", "fan", "--json").json()
    first = cli("show", "fan", "--tenant", "acme", "--json").json()
    assert [d["recipient"] for d in first["deliveries"]] == [
        f"p{i:02}@example.com" for i in range(20)]
    assert first["more"] is True
    text = cli("show", "fan", "--tenant", "acme")
    assert text.code == 0, text.err
    assert text.out.count(": scheduled\n") == 20
    assert text.out.endswith("(the first 20 deliveries of schedule fan; all of them: reminders "
                             "list --schedule fan --tenant acme)\n"), text.out[-300:]
    every = cli("show", "fan", "--tenant", "acme", "--limit", "30", "--json").json()
    assert (len(every["deliveries"]), every["more"]) == (30, False)
    assert "the first" not in cli("show", "fan", "--tenant", "acme", "--limit", "30").out
    got = cli("show", "fan", "--tenant", "acme", "--limit", "1001")
    assert got.code == 2 and "--limit: must be from 1 to 1000, got 1001" in got.err, got.err


# ---------------------------------------------------------------- wrong success


def test_pausing_a_tenant_nobody_uses_is_not_found(cli: Cli, conn: db.Connection) -> None:
    got = cli("tenants", "pause", "nosuchtenant")
    error(got, 3, "no tenant 'nosuchtenant' (it has never scheduled anything); pass --create "
                  "to pause it before it does")
    nothing_written(conn)
    made = cli("tenants", "pause", "newco", "--create", "--json").json()
    assert made == {"tenant": "newco", "paused": True, "changed": True}
    again = cli("tenants", "pause", "newco", "--json").json()
    assert again == {"tenant": "newco", "paused": True, "changed": False}
    text = cli("tenants", "resume", "newco")
    assert (text.code, text.out, text.err) == (0, "tenant newco resumed\n", "")


def test_opting_out_twice_says_nothing_changed(cli: Cli) -> None:
    args = ("opt-out", "--tenant", "acme", "--recipient", "bob", "--channel", "sms", "--json")
    assert cli(*args).json()["changed"] is True
    assert cli(*args).json() == {"tenant": "acme", "recipient": "bob", "channel": "sms",
                                 "opted_out": True, "changed": False}


def test_status_shows_postgres_when_the_queues_are_unreachable(cli: Cli) -> None:
    cli(*EMAIL, "--recipient", "a@example.com", "--json").json()
    dead = f"http://127.0.0.1:{stack.free_port()}"
    got = cli("status", "--json", now="2027-03-01T09:10:00Z", AWS_ENDPOINT_URL=dead,
              AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="x", AWS_DEFAULT_REGION="us-east-1",
              AWS_MAX_ATTEMPTS="1", REMINDERS_QUEUE_URL=f"{dead}/000000000000/q",
              REMINDERS_DLQ_URL=f"{dead}/000000000000/d",
              REMINDERS_PARKING_QUEUE_URL=f"{dead}/000000000000/p")
    assert got.code == 4  # a partial answer: Postgres' view without the transport's
    data = json.loads(got.out)
    assert data["by_state"]["scheduled"] == 1 and data["oldest_overdue_seconds"] == 300.0
    assert "queues" not in data
    assert data["queues_error"].startswith("AWS: Could not connect to the endpoint URL")
    assert got.err.startswith("reminders: status: queues unreachable: AWS: Could not connect")
    assert got.err.count("\n") == 1


# ---------------------------------------------------------------- refused when typed


@pytest.mark.parametrize(("url", "line"), [
    ("http://10.0.0.5/hook", "endpoint address 10.0.0.5 is private; add it to "
                             "REMINDERS_WEBHOOK_ALLOW to permit"),
    ("http://169.254.169.254/latest/meta-data", "endpoint address 169.254.169.254 is "
     "link-local (a cloud metadata address); add it to REMINDERS_WEBHOOK_ALLOW to permit"),
    ("http://[fe80::1]/hook", "endpoint address fe80::1 is link-local; add it to "
                              "REMINDERS_WEBHOOK_ALLOW to permit"),
    ("http://127.0.0.1:8080/hook", "endpoint address 127.0.0.1 is loopback; add it to "
                                   "REMINDERS_WEBHOOK_ALLOW to permit"),
    ("http://localhost/hook", "endpoint host localhost is a local or metadata name; "
                              "deliveries may not go there"),
    ("https://admin:hunter2@hooks.example.com/x", "endpoint URL must not carry credentials "
     "(user:password@); the receiver verifies the webhook signature instead"),
    ("ftp://hooks.example.com/x", "endpoint URL must be http(s)://HOST/..., got "
                                  "ftp://hooks.example.com"),
], ids=["private", "metadata", "ipv6 link-local", "loopback", "localhost", "credentials",
        "ftp"])
def test_an_endpoint_deliveries_may_not_reach_is_refused_when_added(
        cli: Cli, conn: db.Connection, url: str, line: str) -> None:
    got = cli("endpoints", "add", url, "--secret", new_secret())
    error(got, 2, line)
    assert "hunter2" not in got.err
    nothing_written(conn)


@pytest.mark.parametrize(("url", "line"), [
    ("https://hooks.example.com\t.evil/x", "endpoint URL: the host contains a control "
                                          "character (U+0009)"),
    ("https://hooks.example.com/a b", "endpoint URL: the path contains whitespace (U+0020)"),
    ("https://hooks.example.com/a?b=\x7f", "endpoint URL: the URL ends with a control "
                                           "character (U+007F)"),
    ("https://hooks.example.com\u0085.evil/x", "endpoint URL: the host contains a control "
                                               "character (U+0085)"),
    ("https://hooks.example.com\u00a0.evil/x", "endpoint URL: the host contains whitespace "
                                               "(U+00A0)"),
    (" https://hooks.example.com/x", "endpoint URL: the URL begins with whitespace (U+0020)"),
], ids=["tab", "space", "del", "c1", "no-break-space", "leading-space"])
def test_an_endpoint_url_with_a_control_character_or_whitespace_is_refused_when_added(
        cli: Cli, conn: db.Connection, url: str, line: str) -> None:
    # urlsplit would drop the tab and the leading space and read the rest as a valid URL.
    error(cli("endpoints", "add", url, "--secret", new_secret()), 2, line)
    nothing_written(conn)


def test_an_allowed_private_endpoint_is_accepted(cli: Cli) -> None:
    got = cli("endpoints", "add", "http://127.0.0.1:8080/hook", "--secret", new_secret(),
              "--json", **ALLOW).json()
    assert got["url"] == "http://127.0.0.1:8080/hook"


def test_the_secret_comes_from_a_file_stdin_or_the_environment(cli: Cli,
                                                              tmp_path: Path) -> None:
    secret = new_secret()
    path = tmp_path / "secret"
    path.write_text(secret + "\n", encoding="utf-8")
    url = "https://hooks.example.com/a"
    assert cli("endpoints", "add", url, "--secret-file", str(path), "--json").json()["url"] == url
    got = cli("endpoints", "add", url + "b", "--secret-env", "HOOK_SECRET", "--json",
              HOOK_SECRET=secret).json()
    assert got["url"] == url + "b"
    env = {**cli.env, "REMINDERS_NOW": DUE}
    piped = subprocess.run([sys.executable, "-m", "reminders.cli", "endpoints", "add", url + "c",
                            "--secret-file", "-", "--json"], env=env, input=secret,
                           capture_output=True, text=True, timeout=60)
    assert (piped.returncode, piped.stderr) == (0, "")
    error(cli("endpoints", "add", url), 2, "give the signing secret with one of --secret-file "
          "PATH ('-' for stdin), --secret-env NAME, or --secret (local stacks only)")
    listed = cli("endpoints", "list", "--json").json()
    assert [e["url"] for e in listed] == [url, url + "b", url + "c"]
    assert all("secret" not in e for e in listed)
    assert secret not in cli("endpoints", "list").out


def test_a_rule_with_every_occurrence_in_the_past_is_refused(cli: Cli, conn: db.Connection,
                                                            hook: str) -> None:
    got = cli("schedule", "--tenant", "acme", "--recipient", "alice", "--channel", "webhook",
              "--to", hook, "--rrule", "FREQ=DAILY;COUNT=2", "--tz", "Europe/Berlin",
              "--start", "2026-01-01T09:00")
    error(got, 2, "--rrule: no occurrence at or after now (2027-03-01T09:00:00+00:00); nothing "
                  "would ever be delivered")
    assert conn.execute("select count(*) as n from schedules").fetchone() == {"n": 0}


@pytest.mark.parametrize(("args", "line"), [
    (["list", "--limit", "-5"], "argument --limit: must be from 1 to 10000, got -5"),
    (["list", "--limit", "0"], "argument --limit: must be from 1 to 10000, got 0"),
    (["work", "--max-seconds", "-1"],
     "argument --max-seconds: must be more than 0 and at most 86400, got -1"),
    (["work", "--max-seconds", "nan"],
     "argument --max-seconds: must be more than 0 and at most 86400, got nan"),
    (["kinds", "set", "x", "--stale-after", "-3h"],
     "--stale-after: not a duration: '-3h' (try 90s, 15m, 3h, 2d or PT3H)"),
], ids=["negative limit", "zero limit", "negative max-seconds", "nan max-seconds",
        "negative duration"])
def test_a_negative_number_is_refused_by_its_flag(cli: Cli, args: list[str], line: str) -> None:
    got = cli(*args)
    assert (got.code, got.out) == (2, "")
    assert got.err in (f"reminders: error: {line}\n", f"reminders: error: {line} (see --help)\n")


@pytest.mark.parametrize(("flags", "line"), [
    (["--recipient", "a\nb@example.com"], "--recipient: recipient 'a\\nb@example.com' contains "
                                          "a line break"),
    (["--recipients", "ok@example.com,x:y@example.com"],
     "--recipients: recipient 'x:y@example.com' contains ':' (the delivery key's separator)"),
    (["--recipient", ""], "--recipient: empty; give a recipient such as alice or "
                          "alice@example.com"),
    (["--recipient", "   "], "--recipient: empty; give a recipient such as alice or "
                             "alice@example.com"),
], ids=["newline", "separator", "empty", "blank"])
def test_a_recipient_that_makes_an_ambiguous_key_is_refused(
        cli: Cli, conn: db.Connection, flags: list[str], line: str) -> None:
    error(cli(*EMAIL, *flags), 2, line)
    nothing_written(conn)


def test_a_directory_as_recipients_file_says_so(cli: Cli, tmp_path: Path) -> None:
    error(cli(*EMAIL, "--recipients-file", str(tmp_path)), 2,
          f"--recipients-file: {str(tmp_path)!r} is a directory, not a file")


def test_a_webhook_without_to_names_the_flag(cli: Cli) -> None:
    error(cli("schedule", "--tenant", "acme", "--recipient", "a", "--channel", "webhook",
              "--at", DUE), 2, "--channel webhook needs --to URL (a registered endpoint)")


# ---------------------------------------------------------------- idempotent, exit codes


def test_reschedule_names_flags_and_repeating_it_changes_nothing(cli: Cli,
                                                                 conn: db.Connection) -> None:
    cli(*EMAIL, "--recipient", "a@example.com", "--key", "k1", "--json").json()
    error(cli("reschedule", "k1"), 2, "reschedule needs --at, --revision, or --rrule/--tz/--start")
    moved = cli("reschedule", "k1", "--at", "2027-03-02T09:00:00Z", "--json").json()
    assert moved["changed"] is True
    again = cli("reschedule", "k1", "--at", "2027-03-02T10:00:00+01:00", "--json").json()
    assert again == {**moved, "changed": False}
    assert conn.execute("select count(*) as n from deliveries").fetchone() == {"n": 2}
    text = cli("reschedule", "k1", "--at", "2027-03-02T09:00:00Z")
    assert (text.code, text.err) == (0, "")
    assert text.out.splitlines()[0] == ("schedule k1 (tenant acme): unchanged (it already "
                                        "says that)")
    same_revision = cli("reschedule", "k1", "--revision", "1", "--json").json()
    assert same_revision["changed"] is False


def test_not_found_and_unreachable_have_their_own_exit_codes(cli: Cli, tmp_path: Path) -> None:
    error(cli("show", "no-such-key"), 3, "no schedule or delivery with key 'no-such-key'")
    error(cli("cancel", "no-such-key"), 3, "no schedule or delivery with key 'no-such-key'")
    dead = f"postgresql://nobody:x@127.0.0.1:{stack.free_port()}/nothing"
    got = Cli({**base_env(tmp_path), "DATABASE_URL": dead})("status")
    assert (got.code, got.out) == (5, "")
    assert got.err.startswith("reminders: error: cannot connect to Postgres")
    assert got.err.count("\n") == 1


# ---------------------------------------------------------------- operator reads


def test_list_filters_and_pages(cli: Cli, hook: str) -> None:
    cli(*EMAIL, "--recipients", "a@example.com,b@example.com,c@example.com", "--json").json()
    cli("schedule", "--tenant", "beta", "--recipient", "d@example.com", "--channel", "email",
        "--at", "2027-03-02T09:00:00Z", "--json").json()
    cli("schedule", "--tenant", "acme", "--recipient", "hook-user", "--channel", "webhook",
        "--to", hook, "--at", "2027-03-03T09:00:00Z", "--json").json()

    everything = cli("list", "--json").json()
    assert [r["recipient"] for r in everything] == [
        "a@example.com", "b@example.com", "c@example.com", "d@example.com", "hook-user"]
    assert {"delivery_key", "tenant", "state", "reason", "kind", "due_at"} <= set(everything[0])
    assert [r["tenant"] for r in cli("list", "--tenant", "beta", "--json").json()] == ["beta"]
    assert [r["recipient"] for r in cli("list", "--channel", "webhook", "--json").json()] == [
        "hook-user"]
    assert len(cli("list", "--state", "scheduled", "--kind", "default", "--json").json()) == 5
    ranged = cli("list", "--due-from", "2027-03-02T00:00:00Z", "--due-to",
                 "2027-03-03T00:00:00Z", "--json").json()
    assert [r["recipient"] for r in ranged] == ["d@example.com"]
    assert cli("list", "--recipient", "b@example.com", "--json").json()[0]["recipient"] == (
        "b@example.com")

    page = cli("list", "--limit", "2", REMINDERS_FORCE_TTY="1")  # as in a terminal
    assert page.code == 0 and page.err == ""
    lines = page.out.splitlines()
    assert lines[0].split()[:4] == ["DUE", "STATE", "TENANT", "KIND"]
    assert len(lines) == 4 and lines[-1].startswith("more match: next page with --after ")
    cursor = lines[-1].rsplit(" ", 1)[1]
    piped = cli("deliveries", "list", "--limit", "2")  # rows alone; the cursor on stderr
    assert [line.split("\t")[5] for line in piped.out.splitlines()] == [
        "a@example.com", "b@example.com"]
    assert piped.err == f"reminders: more match: next page with --after {cursor}\n"
    rest = cli("list", "--limit", "2", "--after", cursor, "--json")
    assert [r["recipient"] for r in json.loads(rest.out)] == ["c@example.com", "d@example.com"]
    assert rest.err.startswith("reminders: list: more match; next page: --after ")
    error(cli("list", "--after", "garbage"), 2,
          "--after: expected the cursor a previous page printed (DUE/ID), got 'garbage'")


def test_show_text_has_the_timeline_and_status_the_paused_tenants(cli: Cli) -> None:
    got = cli(*EMAIL, "--recipient", "zoë@example.com", "--key", "k1", "--json").json()
    key = got["delivery_key"]
    assert "zoë" in cli(*EMAIL, "--recipient", "zoë@example.com", "--key", "k1", "--json").out
    cli("cancel", "k1")
    text = cli("show", key)
    assert (text.code, text.err) == (0, "")
    lines = text.out.splitlines()
    assert lines[0] == f"{key}: suppressed (cancelled)"
    assert lines[1] == (f"  tenant acme, kind default, recipient zoë@example.com on email, "
                        f"due {DUE}, schedule k1")
    cli("tenants", "pause", "acme", "--json").json()
    status = cli("status", "--json").json()
    assert status["paused_tenants"] == ["acme"]
    assert "paused tenants: acme" in cli("status").out
    listed = cli("tenants", "list", "--json").json()
    assert [(t["tenant"], t["paused"]) for t in listed] == [("acme", True)]
    table = cli("tenants", "list", REMINDERS_FORCE_TTY="1").out.splitlines()
    assert table[0].split() == ["TENANT", "PAUSED", "PENDING", "SCHEDULES"]
    assert table[1].split() == ["acme", "yes", "0", "0"]
    assert cli("tenants", "list").out == "acme\tyes\t0\t0\n"  # piped


def test_text_output_has_no_python_reprs(cli: Cli) -> None:
    cli("kinds", "set", "trip", "--stale-after", "3h", "--backoff-cap", "1h20m", "--json").json()
    kinds = cli("kinds", "list", REMINDERS_FORCE_TTY="1").out
    assert "{" not in kinds and "10800" not in kinds
    trip = next(line for line in kinds.splitlines() if line.startswith("trip"))
    assert trip.split() == ["trip", "3h", "8", "3", "30s..1h20m", "30d"]
    one = cli("kinds", "set", "trip").out
    assert one == ("kind trip: stale after 3h, max attempts 8, redrive budget 3, backoff 30s "
                   "to 1h20m, retention 30d, send window any time, spread none, priority 5\n")
    windowed = cli("kinds", "set", "trip", "--send-window", "Mon-Fri 08:00-18:00",
                   "--send-window", "Sat 10:00-14:00", "--spread", "15m", "--priority", "9").out
    assert windowed.endswith(", send window Mon-Fri 08:00-18:00, Sat 10:00-14:00, spread 15m, "
                             "priority 9\n")
    cli("opt-out", "--tenant", "acme", "--recipient", "bob", "--channel", "sms")
    outs = cli("opt-outs", "list", REMINDERS_FORCE_TTY="1").out.splitlines()
    assert outs[0].split() == ["TENANT", "RECIPIENT", "CHANNEL", "SINCE"]
    assert outs[1].split()[:3] == ["acme", "bob", "sms"]
    assert cli("opt-outs", "list", "--channel", "email", "--json").json() == []


def test_a_schedule_has_a_text_form(cli: Cli) -> None:
    got = cli(*EMAIL, "--recipient", "a@example.com", "--key", "k1", REMINDERS_FORCE_TTY="1")
    assert (got.code, got.err) == (0, "")
    lines = got.out.splitlines()
    assert lines[0] == "schedule k1 (tenant acme): created"
    assert lines[1].split() == ["RECIPIENT", "DUE", "STATE", "DELIVERY", "KEY"]
    assert cli("show", "k1").code == 0
    again = cli(*EMAIL, "--recipient", "a@example.com", "--key", "k1")
    assert again.out.splitlines()[0] == "schedule k1 (tenant acme): already existed, unchanged"


def test_bulk_reconcile_with_a_dry_run_a_limit_and_a_recorded_reason(
        cli: Cli, conn: db.Connection) -> None:
    cli(*EMAIL, "--recipients", "a@example.com,b@example.com,c@example.com", "--json").json()
    cli("schedule", "--tenant", "beta", "--recipient", "d@example.com", "--channel", "email",
        "--at", DUE, "--json").json()
    conn.execute("update deliveries set state = 'dead', reason = 'retry budget spent'")
    bulk = ("reconcile", "--state", "dead", "--tenant", "acme", "--as", "retry", "--reason",
            "SES identity fixed")

    error(cli("reconcile", "--state", "dead", "--as", "retry", "--reason", "x"), 2,
          "without a KEY, reconcile needs --tenant or --kind to bound it")
    dry = cli(*bulk, "--dry-run", "--limit", "2", "--json").json()
    assert (dry["dry_run"], dry["matched"], dry["more"], dry["reconciled"]) == (
        True, 2, True, [])
    assert [d["state"] for d in dry["would_reconcile"]] == ["dead", "dead"]
    assert conn.execute("select count(*) as n from deliveries where state = 'dead'"
                        ).fetchone() == {"n": 4}

    done = cli(*bulk, "--json").json()
    assert (done["matched"], done["more"], done["failed"]) == (3, False, [])
    assert {d["state"] for d in done["reconciled"]} == {"scheduled"}
    states = conn.execute("select tenant, state from deliveries order by id").fetchall()
    assert [r["state"] for r in states] == ["scheduled", "scheduled", "scheduled", "dead"]
    key = done["reconciled"][0]["delivery_key"]
    events = cli("show", key, "--json").json()["events"]
    assert events[-1]["actor"] == "operator" and events[-1]["event"] == "reconciled as retry"
    assert events[-1]["detail"].startswith("SES identity fixed (bulk, by ")
    assert "reconciled as retry" in cli("show", key).out
    again = cli(*bulk)
    assert (again.code, again.out) == (0, "reconciled 0 dead deliveries as retry\n")


def test_a_mistyped_command_gets_a_suggestion_and_version_is_a_flag(cli: Cli) -> None:
    got = cli("stauts")
    assert (got.code, got.out) == (2, "")
    # The suggestion first and alone, not after the list of every command.
    assert got.err == "reminders: error: unknown 'stauts'; did you mean 'status'? (see --help)\n"
    version = cli("--version")
    assert (version.code, version.err) == (0, "")
    assert version.out.startswith("reminders ")


def test_status_splits_lateness_and_watches(cli: Cli) -> None:
    cli(*EMAIL, "--recipients", "a@example.com,b@example.com", "--json").json()
    cli("kinds", "set", "trip", "--json").json()
    cli("schedule", "--tenant", "beta", "--recipient", "d@example.com", "--channel", "email",
        "--kind", "trip", "--at", "2027-03-01T09:08:00Z", "--json").json()
    later = "2027-03-01T10:30:00Z"
    got = cli("status", "--json", now=later).json()
    assert got["overdue_by"] == [
        {"tenant": "acme", "kind": "default", "channel": "email", "overdue": 2,
         "oldest_overdue_seconds": 5100.0, "paused": False},
        {"tenant": "beta", "kind": "trip", "channel": "email", "overdue": 1,
         "oldest_overdue_seconds": 4920.0, "paused": False}]
    text = cli("status", now=later).out
    assert "oldest overdue: 1h25m;" in text
    assert "\nacme\tdefault\temail\t2\t1h25m\n" in text  # piped: the table as TSV
    watched = cli("status", "--watch", "0.1", "--times", "2", "--json", now=later)
    assert watched.code == 0 and watched.out.count('"by_state"') == 2


def test_a_dead_part_of_the_local_stack_is_named_not_no_database(
        database_url: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    dead = f"http://127.0.0.1:{stack.free_port()}"
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)
    pid = int(finished.stdout)  # a process that has exited
    recorded = stack.LocalStack(
        database_url=database_url, endpoint_url=dead, region="us-east-1",
        queues={q: f"{dead}/000000000000/{q}" for q in ("deliveries", "dlq", "parking")},
        receiver_url="http://127.0.0.1:1", receiver_secret=new_secret(), pgdata=str(tmp_path),
        pids={"moto": pid}, administrator={"access_key": "AKIA" + "0" * 16,
                                           "secret_key": "recorded-by-the-dead-moto"})
    (home / "local.json").write_text(json.dumps(recorded.as_json()))
    got = Cli(base_env(tmp_path))("status", "--json", AWS_MAX_ATTEMPTS="1")
    assert got.code == 4  # Postgres answered; the queues did not
    assert json.loads(got.out)["total"] == 0
    lines = got.err.splitlines()
    assert lines[0] == (f"reminders: warning: the local stack's moto (pid {pid}) is not "
                        "running; `reminders local up` restarts it")
    assert lines[1].startswith("reminders: status: queues unreachable: AWS: ")


def test_an_endpoint_is_rotated_and_removed(cli: Cli, conn: db.Connection) -> None:
    url = "https://hooks.example.com/r"
    cli("endpoints", "add", url, "--secret", new_secret(), "--json").json()
    fresh = new_secret()
    rotated = cli("endpoints", "rotate-secret", url, "--secret-env", "S", "--json", S=fresh).json()
    assert rotated["url"] == url and rotated["action"] == "rotate-secret"
    assert rotated["overlap_until"] == "2027-03-02 09:00:00+00:00"  # the default 24h overlap
    row = conn.execute("select secret, next_secret_ciphertext from endpoints").fetchone()
    assert row is not None and row["secret"] is None
    assert fresh.encode() not in bytes(row["next_secret_ciphertext"])
    error(cli("endpoints", "remove", url, "--tenant", "acme"), 3,
          f"no endpoint {url} registered for tenant acme")
    gone = cli("endpoints", "remove", url)
    assert (gone.code, gone.out, gone.err) == (0, f"endpoint removed: {url}\n", "")
    assert cli("endpoints", "list").out == "no endpoints\n"


def test_cancel_dry_run_lists_what_it_would_suppress(cli: Cli, conn: db.Connection) -> None:
    made = cli(*EMAIL, "--recipients", "a@example.com,b@example.com", "--key", "k1",
               "--json").json()
    dry = cli("cancel", "k1", "--dry-run", "--json").json()
    assert dry == {"tenant": "acme", "schedule_key": "k1", "dry_run": True,
                   "would_suppress": [d["delivery_key"] for d in made["deliveries"]],
                   "would_suppress_count": 2}
    text = cli("cancel", "k1", "--dry-run").out.splitlines()
    assert text[0] == "cancelling k1 would suppress 2 pending deliveries"
    assert conn.execute("select count(*) as n from deliveries where state = 'scheduled'"
                        ).fetchone() == {"n": 2}
    assert cli("cancel", "k1", "--json").json()["suppressed"] == 2


def test_cancel_dry_run_of_a_fan_out_lists_its_first_hundred_and_counts_them_all(
        cli: Cli, tmp_path: Path) -> None:
    people = tmp_path / "people.txt"
    people.write_text("".join(f"p{i:03}@example.com\n" for i in range(150)), encoding="utf-8")
    cli(*EMAIL, "--recipients-file", str(people), "--key", "fan", "--json").json()
    dry = cli("cancel", "fan", "--dry-run", "--json").json()
    assert dry["would_suppress_count"] == 150
    assert len(dry["would_suppress"]) == 100
    assert [k.split(":")[-2] for k in dry["would_suppress"]] == [
        f"p{i:03}@example.com" for i in range(100)]
    text = cli("cancel", "fan", "--dry-run").out.splitlines()
    assert text[0] == "cancelling fan would suppress 150 pending deliveries"
    assert len(text) == 102 and text[-1] == "  (and 50 more)"
    assert cli("cancel", "fan", "--json").json()["suppressed"] == 150


def test_every_operator_action_records_who_and_why(cli: Cli, conn: db.Connection) -> None:
    url = "https://hooks.example.com/r"
    alice = {"REMINDERS_ACTOR": "alice@example.com"}
    cli("kinds", "set", "trip", "--max-attempts", "3", "--reason", "CHG-1", "--json",
        **alice).json()
    again = cli("kinds", "set", "trip", "--max-attempts", "3", "--reason", "CHG-1b", "--json",
                **alice).json()
    assert again["changed"] is False  # a repeat that changes nothing records no action
    cli("endpoints", "add", url, "--secret", new_secret(), "--reason", "CHG-2", "--json",
        **alice).json()
    made = cli("schedule", "--tenant", "acme", "--recipient", "alice", "--channel", "webhook",
               "--to", url, "--at", DUE, "--kind", "trip", "--key", "k1", "--json").json()
    key = made["delivery_key"]
    cli("tenants", "pause", "acme", "--reason", "INC-7 receiver down", "--json", **alice).json()
    cli("tenants", "pause", "acme", "--reason", "again", "--json", **alice).json()  # no change
    cli("tenants", "resume", "acme", "--json", REMINDERS_ACTOR="bob").json()
    cli("endpoints", "rotate-secret", url, "--secret", new_secret(), "--reason", "leaked",
        "--json", **alice).json()
    conn.execute("update deliveries set state = 'unknown', reason = 'test'")
    cli("reconcile", key, "--as", "failed", "--reason", "receiver log: nothing", "--json",
        **alice).json()
    cli("cancel", "k1", "--reason", "customer left", "--json", **alice).json()
    cli("endpoints", "remove", url, "--reason", "CHG-3", "--json", **alice).json()

    shown = cli("show", key, "--json").json()
    assert shown["events"][-1] == {"at": "2027-03-01T09:00:00Z", "actor": "operator",
                                   "who": "alice@example.com", "event": "reconciled as failed",
                                   "detail": "receiver log: nothing"}
    assert [(a["who"], a["action"], a["object"], a["name"], a["reason"])
            for a in shown["operator_actions"]] == [
        ("alice@example.com", "set", "kind", "trip", "CHG-1"),
        ("alice@example.com", "added", "endpoint", url, "CHG-2"),
        ("alice@example.com", "paused", "tenant", "acme", "INC-7 receiver down"),
        ("bob", "resumed", "tenant", "acme", None),
        ("alice@example.com", "rotated the secret of", "endpoint", url, "leaked"),
        ("alice@example.com", "cancelled", "schedule", "k1", "customer left"),
        ("alice@example.com", "removed", "endpoint", url, "CHG-3"),
    ]
    text = cli("show", key).out
    for line in ("operator alice@example.com: paused tenant acme (INC-7 receiver down)",
                 "operator bob: resumed tenant acme (no reason given)",
                 "operator alice@example.com: reconciled as failed (receiver log: nothing)",
                 "operator alice@example.com: cancelled schedule k1 (customer left)",
                 f"operator alice@example.com: removed endpoint {url} (CHG-3)"):
        assert f"  2027-03-01T09:00:00Z  {line}" in text.splitlines(), (line, text)


def test_without_reminders_actor_the_os_user_is_recorded(cli: Cli) -> None:
    import getpass

    cli("tenants", "pause", "acme", "--create", "--json").json()
    got = cli("schedule", "--tenant", "acme", "--recipient", "a@example.com", "--channel",
              "email", "--at", DUE, "--key", "k1", "--json").json()
    (action,) = cli("show", got["delivery_key"], "--json").json()["operator_actions"]
    assert (action["who"], action["action"], action["reason"]) == (
        getpass.getuser(), "paused", None)
    error(cli("tenants", "resume", "acme", REMINDERS_ACTOR=" "), 2,
          "REMINDERS_ACTOR: expected a name such as alice@example.com, got ' '")
    error(cli("tenants", "resume", "acme", "--reason", "a\nb"), 2,
          "--reason: contains a line break: 'a\\nb'")
    assert cli("tenants", "list", "--json").json()[0]["paused"] is True


HOOK = "https://hooks.example.com/r"
# Every local command that takes --reason: its arguments (each would succeed with a good
# reason), whether the reason is required, and what it needs beforehand.
REASON_COMMANDS: dict[str, tuple[list[str], bool, str | None]] = {
    "reconcile": (["reconcile", "KEY", "--as", "failed"], True, "unknown"),
    "reconcile bulk": (["reconcile", "--state", "unknown", "--tenant", "acme", "--as", "failed"],
                       True, "unknown"),
    "deliveries reconcile": (["deliveries", "reconcile", "KEY", "--as", "failed"], True,
                             "unknown"),
    "cancel": (["cancel", "k1"], False, "scheduled"),
    "tenants pause": (["tenants", "pause", "acme", "--create"], False, None),
    "tenants resume": (["tenants", "resume", "acme", "--create"], False, None),
    "endpoints add": (["endpoints", "add", HOOK + "2", "--secret", new_secret()], False, None),
    "endpoints remove": (["endpoints", "remove", HOOK], False, "endpoint"),
    "endpoints rotate-secret": (["endpoints", "rotate-secret", HOOK, "--secret", new_secret()],
                                False, "endpoint"),
    "kinds set": (["kinds", "set", "trip", "--max-attempts", "3"], False, None),
    "channels set": (["channels", "set", "email", "--rate", "14/s"], False, None),
    "endpoints set": (["endpoints", "set", HOOK, "--rate", "50/s"], False, "endpoint"),
    "tenants set": (["tenants", "set", "acme", "--max-pending", "100", "--create"], False, None),
    "opt-out": (["opt-out", "--tenant", "acme", "--recipient", "a@example.com", "--channel",
                 "email"], False, None),
    "opt-in": (["opt-in", "--tenant", "acme", "--recipient", "a@example.com", "--channel",
                "email"], False, None),
    "schedules pause": (["schedules", "pause", "k1"], False, "scheduled"),
    "schedules resume": (["schedules", "resume", "k1"], False, "scheduled"),
    "schedules trigger": (["schedules", "trigger", "k1"], False, "scheduled"),
    "schedules backfill": (["schedules", "backfill", "k1", "--from", "2027-03-01T00:00:00Z",
                            "--to", "2027-03-01T09:00:00Z"], False, "scheduled"),
    "schedules cancel": (["schedules", "cancel", "k1"], False, "scheduled"),
}


def test_every_command_with_a_reason_is_in_the_walk() -> None:
    import argparse

    from reminders.cli import build_parser

    found: set[str] = set()

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if "--reason" in action.option_strings and path:
                found.add(path)
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, f"{path} {name}".strip())

    walk(build_parser(), "")
    assert found == {name.removesuffix(" bulk") for name in REASON_COMMANDS}


@pytest.mark.parametrize("command", REASON_COMMANDS)
def test_a_reason_is_one_rule_on_every_command(cli: Cli, conn: db.Connection,
                                               command: str) -> None:
    argv, required, needs = REASON_COMMANDS[command]
    if needs == "endpoint":
        cli("endpoints", "add", HOOK, "--secret", new_secret(), "--json").json()
    elif needs is not None:
        made = cli(*EMAIL, "--recipient", "a@example.com", "--key", "k1", "--json").json()
        argv = [made["delivery_key"] if a == "KEY" else a for a in argv]
        conn.execute("update deliveries set state = %s, reason = 'test'", (needs,))
    before = conn.execute("select count(*) as n from operator_actions").fetchone()
    cases = [*BAD_REASONS.values(), (" ", BLANK_REQUIRED if required else BLANK_OPTIONAL)]
    for reason, line in cases:
        error(cli(*argv, "--reason", reason), 2, line)
    assert conn.execute("select count(*) as n from operator_actions").fetchone() == before
    assert conn.execute("select count(*) as n from delivery_events "
                        "where actor = 'operator'").fetchone() == {"n": 0}


# ---------------------------------------------------------------- what the console shares


def test_a_pause_with_a_reason_is_recorded_with_who_and_why(cli: Cli,
                                                            conn: db.Connection) -> None:
    from reminders import operator

    cli(*EMAIL, "--recipient", "a@example.com", "--json").json()
    assert cli("tenants", "pause", "acme", "--reason", "billing dispute", "--json").json() == {
        "tenant": "acme", "paused": True, "changed": True}
    cli("tenants", "pause", "acme", "--reason", "again", "--json").json()  # no change
    cli("tenants", "resume", "acme", "--json").json()  # no reason: recorded without one
    rows = conn.execute("select who, via, action, object, name, tenant, reason, detail"
                        " from operator_actions order by id").fetchall()
    assert rows == [
        {"who": operator.current_user(), "via": "cli", "action": "paused", "object": "tenant",
         "name": "acme", "tenant": "acme", "reason": "billing dispute", "detail": {}},
        {"who": operator.current_user(), "via": "cli", "action": "resumed",
         "object": "tenant", "name": "acme", "tenant": "acme", "reason": None, "detail": {}}]
    error(cli("tenants", "pause", "acme", "--reason", " "), 2,
          "--reason: empty; say why, or leave --reason out")


def test_the_attention_list_is_the_parked_states_only(cli: Cli) -> None:
    cli(*EMAIL, "--recipient", "a@example.com", "--json").json()
    got = cli("list", "--attention", "--json")
    assert (got.code, json.loads(got.out)) == (0, [])
    error(cli("list", "--attention", "--state", "scheduled"), 2,
          "state must be one of unknown, dead, failed, stale, got 'scheduled'")


def test_nothing_reaches_the_operator_s_terminal_raw(cli: Cli, database_url: str) -> None:
    """A reason (here a receiver's reason phrase, as a send records it) with terminal control
    sequences is printed as visible escapes; the JSON keeps it exactly."""
    key = cli(*EMAIL, "--recipient", "a@example.com", "--key", "k-esc",
              "--json").json()["delivery_key"]
    hostile = "HTTP 503 \x1b]0;owned\x07\x1b[2J\u202egnp.exe"
    with db.connect(database_url) as conn:
        conn.execute("update deliveries set reason = %s where delivery_key = %s", (hostile, key))
    text = cli("show", key)
    assert text.code == 0
    assert "\x1b" not in text.out and "\x07" not in text.out and "\u202e" not in text.out
    assert "HTTP 503 \\x1b]0;owned\\x07\\x1b[2J\\u202egnp.exe" in text.out
    assert cli("show", key, "--json").json()["reason"] == hostile


def test_list_in_a_terminal_is_a_table_and_piped_its_rows(cli: Cli) -> None:
    """Through the real entry point: stdout a terminal, then a pipe."""
    from tests.terminal import run

    cli(*EMAIL, "--recipients", "a@example.com,b@example.com,c@example.com", "--json").json()
    env = {**cli.env, "REMINDERS_NOW": "2027-03-01T09:00:00Z"}
    shown = run(["deliveries", "list", "--limit", "2"], env, stdout_tty=True, stderr_tty=True)
    assert (shown.code, shown.err) == (0, "")
    head, *rows, more = shown.out.splitlines()
    assert head.split() == ["DUE", "STATE", "TENANT", "KIND", "CHANNEL", "RECIPIENT", "TRIES",
                            "DELIVERY", "KEY", "REASON"]
    assert [r.split()[:6] for r in rows] == [
        [DUE, "scheduled", "acme", "default", "email", f"{who}@example.com"] for who in "ab"]
    assert rows[0].split()[-1] == "-" and more.startswith("more match: next page with --after ")
    piped = run(["list", "--limit", "2"], env, stdout_tty=False, stderr_tty=True)
    assert piped.code == 0
    assert [r.split("\t") for r in piped.out.splitlines()] == [
        [DUE, "scheduled", "acme", "default", "email", f"{who}@example.com", "0", key, ""]
        for who, key in zip("ab", [r.split()[-2] for r in rows], strict=True)]
    assert piped.err == f"reminders: {more}\n"


def progress_lines(err: str) -> list[str]:
    """What a progress line showed, redraw by redraw (each starts by erasing the line)."""
    return [part for part in err.split("\r\x1b[K") if part]


def test_a_bulk_reconcile_shows_its_progress_in_a_terminal_only(
        cli: Cli, conn: db.Connection) -> None:
    from tests.terminal import run

    cli(*EMAIL, "--recipients", "a@example.com,b@example.com,c@example.com", "--json").json()
    conn.execute("update deliveries set state = 'dead', reason = 'retry budget spent'")
    env = {**cli.env, "REMINDERS_NOW": "2027-03-01T09:00:00Z"}
    bulk = ["deliveries", "reconcile", "--state", "dead", "--tenant", "acme", "--as", "retry",
            "--reason", "fixed", "--limit", "2"]
    shown = run(bulk, env, stdout_tty=True, stderr_tty=True)
    assert shown.code == 0, shown.err
    assert progress_lines(shown.err)[-1] == (
        "reconcile: reconciling dead deliveries as retry; 2 of 2")
    assert shown.err.endswith("\r\x1b[K")  # erased before the result is printed
    assert shown.out.startswith("reconciled 2 dead deliveries as retry")
    piped = run(bulk, env, stdout_tty=False, stderr_tty=True)  # `reminders ... | less`
    assert (piped.code, piped.err) == (0, "")
    assert piped.out.splitlines()[0] == "reconciled 1 dead deliveries as retry"
    conn.execute("update deliveries set state = 'dead'")
    quiet = run([*bulk, "--quiet"], env, stdout_tty=True, stderr_tty=True)
    assert (quiet.code, quiet.err) == (0, "")
