"""The ``reminders`` command line as a user runs it: a separate process, settings from the
environment, JSON on stdout, and one clear line on stderr for a bad argument."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from reminders import db, schedules
from reminders.channels.signing import new_secret
from reminders.operator import STATES
from tests.conftest import T0
from tests.integration.cli_helpers import Cli, base_env

DUE = "2027-03-01T09:05:00Z"
URL = "https://hooks.example.com/reminders"


def only_schedule_id(conn: db.Connection) -> int:
    rows = conn.execute("select id from schedules").fetchall()
    assert len(rows) == 1
    return int(rows[0]["id"])


def test_schedule_send_and_inspect_a_webhook(aws_cli: Cli, conn: db.Connection,
                                             receiver: Any, as_lambda: dict[str, str]) -> None:
    cli = aws_cli
    url = receiver.hook_url("ok")

    added = cli("endpoints", "add", url, "--secret", receiver.secret, "--json").json()
    assert added["url"] == url and added["tenant"] is None and isinstance(added["id"], int)

    kind = cli("kinds", "set", "trip", "--stale-after", "3h", "--max-attempts", "4",
               "--json").json()
    assert kind == {"name": "trip", "stale_after_seconds": 10800.0, "max_attempts": 4,
                    "redrive_budget": 3, "backoff_base_seconds": 30.0,
                    "backoff_cap_seconds": 3600.0, "retention_seconds": 2592000.0,
                    "send_windows": None, "spread_seconds": None, "priority": 5,
                    "changed": True}

    schedule = ("schedule", "--tenant", "acme", "--recipient", "alice", "--channel", "webhook",
                "--to", url, "--at", DUE, "--kind", "trip", "--key", "k1",
                "--payload", '{"trip": "LIS-BER"}', "--json")
    first = cli(*schedule).json()
    sid = only_schedule_id(conn)
    key = f"schedule:{sid}/0:20270301T090500Z:alice:webhook"
    assert first == {"tenant": "acme", "schedule_key": "k1", "created": True,
                     "delivery_key": key,
                     "deliveries": [{"recipient": "alice", "delivery_key": key,
                                     "due_at": DUE, "state": "scheduled"}]}
    again = cli(*schedule).json()
    assert again == {**first, "created": False}
    assert conn.execute("select count(*) as n from deliveries").fetchone() == {"n": 1}

    overdue = cli("status", "--json", now="2027-03-01T09:10:00Z").json()
    assert list(overdue["by_state"]) == list(STATES)
    assert set(overdue["by_state"]) == {"scheduled", "leased", "retrying", "sent", "failed",
                                        "suppressed", "stale", "unknown", "dead"}
    assert overdue["by_state"] == {**dict.fromkeys(STATES, 0), "scheduled": 1}
    assert overdue["by_channel"] == {"webhook": {"scheduled": 1}}
    assert overdue["oldest_overdue_seconds"] == 300.0
    assert overdue["expired_leases"] == 0
    assert overdue["total"] == 1 and overdue["now"] == "2027-03-01T09:10:00Z"

    tick = cli("tick", "--json", now=DUE, **as_lambda).json()
    assert tick["leased"] == 1 and tick["published"] == 1 and tick["released"] == 0
    work = cli("work", "--json", now=DUE, **as_lambda).json()
    assert work["idle"] is True
    assert work["consumer"]["records"] == 1 and work["consumer"]["failures"] == 0

    shown = cli("show", key, "--json", now=DUE).json()
    assert shown["delivery_key"] == key and shown["schedule_key"] == "k1"
    assert shown["tenant"] == "acme" and shown["kind"] == "trip"
    assert shown["state"] == "sent"
    assert shown["reason"] == "HTTP 200 OK"
    assert shown["attempts_made"] == 1
    assert len(shown["attempts"]) == 1
    attempt = shown["attempts"][0]
    assert attempt["attempt_no"] == 1 and attempt["outcome"] == "sent"
    assert attempt["status_code"] == 200 and attempt["detail"] == "HTTP 200 OK"
    assert attempt["started_at"] == DUE and attempt["finished_at"] == DUE
    assert receiver.stats()["effects"] == {key: 1}
    assert receiver.payloads(key)[key][0]["payload"] == {"trip": "LIS-BER"}

    after = cli("status", "--json", now=DUE).json()
    assert after["by_state"] == {**dict.fromkeys(STATES, 0), "sent": 1}
    assert after["by_channel"] == {"webhook": {"sent": 1}}
    assert after["oldest_overdue_seconds"] == 0.0 and after["expired_leases"] == 0


def test_reschedule_cancel_and_opt_out(cli: Cli, conn: db.Connection) -> None:
    conn.execute("insert into endpoints (url, secret) values (%s, %s)", (URL, new_secret()))
    first = schedules.schedule(conn, tenant="acme", recipients=["alice"], channel="webhook",
                               to=URL, at=T0 + timedelta(minutes=5),
                               now=T0, key="k1")
    sid, old_key = first.schedule_id, first.deliveries[0].delivery_key

    moved = cli("reschedule", "k1", "--at", "2027-03-02T08:00:00+01:00", "--json").json()
    new_key = f"schedule:{sid}/1:20270302T070000Z:alice:webhook"
    assert moved == {"tenant": "acme", "schedule_key": "k1", "created": False,
                     "changed": True, "delivery_key": new_key,
                     "deliveries": [{"recipient": "alice", "delivery_key": new_key,
                                     "due_at": "2027-03-02T07:00:00Z", "state": "scheduled"}]}

    cancelled = cli("cancel", new_key, "--json").json()  # a delivery key names its schedule
    assert cancelled == {"tenant": "acme", "schedule_key": "k1", "suppressed": 1,
                         "changed": True}
    rows = [(r["delivery_key"], r["state"], r["reason"]) for r in conn.execute(
        "select delivery_key, state, reason from deliveries order by id")]
    assert rows == [(old_key, "suppressed", "rescheduled"),
                    (new_key, "suppressed", "cancelled")]

    twice = cli("cancel", "k1")  # repeating a request changes nothing, and says so
    assert (twice.code, twice.out, twice.err) == (
        0, "k1 was already cancelled: nothing changed\n", "")
    assert cli("cancel", "k1", "--json").json() == {**cancelled, "suppressed": 0,
                                                    "changed": False}

    out = cli("opt-out", "--tenant", "acme", "--recipient", "bob", "--channel", "webhook",
              "--json").json()
    assert out == {"tenant": "acme", "recipient": "bob", "channel": "webhook",
                   "opted_out": True, "changed": True}
    assert conn.execute("select tenant, recipient, channel from opt_outs").fetchall() == [
        {"tenant": "acme", "recipient": "bob", "channel": "webhook"}]
    back = cli("opt-in", "--tenant", "acme", "--recipient", "bob", "--channel", "webhook")
    assert (back.code, back.out, back.err) == (0, "bob opted in to webhook\n", "")
    assert conn.execute("select count(*) as n from opt_outs").fetchone() == {"n": 0}


SCHEDULE = ["schedule", "--tenant", "acme", "--recipient", "alice", "--channel", "webhook",
            "--to", URL, "--key", "k1"]

BAD: list[tuple[str, list[str], str]] = [
    ("naive --at", [*SCHEDULE, "--at", "2027-03-01T09:05:00"],
     "reminders: error: --at must carry a UTC offset or zone, got naive 2027-03-01T09:05:00"),
    ("--at tomorrow", [*SCHEDULE, "--at", "tomorrow"],
     "reminders: error: --at: not an ISO-8601 instant: 'tomorrow'"),
    ("array payload", [*SCHEDULE, "--at", DUE, "--payload", "[1]"],
     "reminders: error: --payload must be a JSON object"),
    ("unknown kind", [*SCHEDULE, "--at", DUE, "--kind", "nope"],
     "reminders: error: unknown kind 'nope'; create it with `reminders kinds set`"),
    ("unregistered endpoint", [*SCHEDULE, "--at", DUE],
     f"reminders: error: no webhook endpoint registered for {URL}; "
     "register it with `reminders endpoints add URL --secret whsec_...`"),
    ("bad stale-after", ["kinds", "set", "x", "--stale-after", "soon"],
     "reminders: error: --stale-after: not a duration: 'soon' (try 90s, 15m, 3h, 2d or PT3H)"),
    ("bad send window", ["kinds", "set", "x", "--send-window", "Mon-Fri 8-18"],
     "reminders: error: --send-window: 'Mon-Fri 8-18' is not a window; write [DAYS] "
     "HH:MM-HH:MM, e.g. '08:00-21:00' or 'Mon-Fri 08:00-18:00'"),
    ("bad send window day", ["kinds", "set", "x", "--send-window", "Fun 08:00-18:00"],
     "reminders: error: --send-window: 'Fun 08:00-18:00': 'fun' is not a weekday or a range "
     "of them (Mon, Mon-Fri, Sat,Sun)"),
    ("bad spread", ["kinds", "set", "x", "--spread", "soon"],
     "reminders: error: --spread: not a duration: 'soon' (try 90s, 15m, 3h, 2d or PT3H)"),
    ("bad priority", ["kinds", "set", "x", "--priority", "10"],
     "reminders: error: priority must be a whole number from 0 to 9, got 10"),
    ("bad secret", ["endpoints", "add", URL, "--secret", "nope"],
     "reminders: error: webhook secret must start with 'whsec_'"),
]


@pytest.mark.parametrize(("args", "line"), [(a, line) for _, a, line in BAD],
                         ids=[name for name, _, _ in BAD])
def test_a_bad_argument_is_one_line_on_stderr_and_writes_nothing(
        cli: Cli, conn: db.Connection, args: list[str], line: str) -> None:
    got = cli(*args)
    assert (got.code, got.out, got.err) == (2, "", line + "\n")
    for table in ("tenants", "schedules", "deliveries", "endpoints"):
        row = conn.execute(f"select count(*) as n from {table}").fetchone()
        assert row == {"n": 0}, table
    assert conn.execute("select name from kinds").fetchall() == [{"name": "default"}]


def test_an_unknown_channel_is_refused_by_the_parser(cli: Cli) -> None:
    got = cli("schedule", "--tenant", "acme", "--recipient", "alice", "--channel", "fax",
              "--at", DUE)
    assert (got.code, got.out) == (2, "")
    lines = got.err.splitlines()
    assert len(lines) == 1
    assert re.fullmatch(r"reminders: error: argument --channel: invalid choice: 'fax' "
                        r"\(choose from '?webhook'?, '?email'?, '?sms'?\) \(see --help\)",
                        lines[0]), lines[0]


def test_no_database_and_no_local_stack_is_one_clear_line(tmp_path: Path) -> None:
    empty = tmp_path / "home"
    empty.mkdir()
    got = Cli(base_env(tmp_path))("status", "--json")
    assert (got.code, got.out, got.err) == (
        2, "",
        "reminders: error: no database configured: set DATABASE_URL, or REMINDERS_DB_HOST "
        "with REMINDERS_DB_SECRET_ARN (run `reminders local up` for a local one)\n")
    assert list(empty.iterdir()) == []
