"""Recurring schedules, fan-out and operator recovery through the ``reminders`` command line, as
a user runs it: a separate process, JSON on stdout, one clear line on stderr for bad input."""

from __future__ import annotations

import getpass
import platform
import re
from pathlib import Path
from typing import Any

import pytest

from reminders import __version__, db
from reminders.operator import STATES
from reminders.timezones import tzdata_version
from tests.integration.cli_helpers import NOW, Cli, Result, base_env

WEEKLY = "FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0"
BERLIN_WEEKLY = ["--rrule", WEEKLY, "--tz", "Europe/Berlin", "--start", "2027-03-15T09:00"]
FIRST_DUE = "2027-03-15T08:00:00Z"  # Monday 2027-03-15 09:00 CET
FIRST_STAMP = "20270315T080000Z"


@pytest.fixture
def bare(tmp_path: Path) -> Cli:
    """No database and no local stack: commands that need neither must still work."""
    return Cli(base_env(tmp_path))


@pytest.fixture
def hook(cli: Cli, receiver: Any) -> str:
    """A webhook URL registered for every tenant (with `endpoints add`)."""
    url: str = receiver.hook_url("x")
    added = cli("endpoints", "add", url, "--secret", receiver.secret, "--json",
                REMINDERS_WEBHOOK_ALLOW="127.0.0.1/32").json()
    assert added["url"] == url and added["tenant"] is None
    return url


def one_line_error(got: Result, line: str) -> None:
    assert (got.code, got.out, got.err) == (2, "", f"reminders: error: {line}\n")


def nothing_scheduled(conn: db.Connection) -> None:
    for table in ("schedules", "deliveries", "schedule_recipients"):
        assert conn.execute(f"select count(*) as n from {table}").fetchone() == {"n": 0}, table


def schedule_ids(conn: db.Connection) -> list[int]:
    return [int(r["id"]) for r in conn.execute("select id from schedules order by id")]


def weekly(cli: Cli, url: str, *extra: str, key: str = "weekly", now: str = NOW) -> Result:
    return cli("schedule", "--tenant", "acme", "--channel", "webhook", "--to", url,
               *BERLIN_WEEKLY, "--key", key, *extra, "--json", now=now)


# ---------------------------------------------------------------- preview


def preview(cli: Cli, rule: str, tz: str, start: str, *extra: str) -> Result:
    return cli("preview", "--rrule", rule, "--tz", tz, "--start", start, *extra)


def test_preview_keeps_the_local_hour_across_the_spring_change(bare: Cli) -> None:
    got = preview(bare, WEEKLY, "Europe/Berlin", "2027-03-15T09:00", "--count", "3", "--json")
    assert got.json() == [
        {"utc": "2027-03-15T08:00:00Z", "local": "2027-03-15T09:00:00+01:00"},
        {"utc": "2027-03-22T08:00:00Z", "local": "2027-03-22T09:00:00+01:00"},
        {"utc": "2027-03-29T07:00:00Z", "local": "2027-03-29T09:00:00+02:00"},
    ]
    text = preview(bare, WEEKLY, "Europe/Berlin", "2027-03-15T09:00", "--count", "2")
    assert (text.code, text.err) == (0, "")
    assert text.out == ("2027-03-15T08:00:00Z\t2027-03-15T09:00:00+01:00\n"
                        "2027-03-22T08:00:00Z\t2027-03-22T09:00:00+01:00\n")  # piped: TSV


def test_preview_after_an_instant_is_strictly_after_it(bare: Cli) -> None:
    args = (WEEKLY, "Europe/Berlin", "2027-03-15T09:00", "--count", "2", "--json")
    on_the_dot = preview(bare, *args, "--after", "2027-03-22T08:00:00Z").json()
    assert on_the_dot == [
        {"utc": "2027-03-29T07:00:00Z", "local": "2027-03-29T09:00:00+02:00"},
        {"utc": "2027-04-05T07:00:00Z", "local": "2027-04-05T09:00:00+02:00"},
    ]
    just_before = preview(bare, *args, "--after", "2027-03-22T08:59:59+01:00").json()
    assert just_before == [
        {"utc": "2027-03-22T08:00:00Z", "local": "2027-03-22T09:00:00+01:00"},
        {"utc": "2027-03-29T07:00:00Z", "local": "2027-03-29T09:00:00+02:00"},
    ]
    ended = preview(bare, "FREQ=DAILY;COUNT=2", "Europe/Berlin", "2027-03-15T09:00",
                    "--after", "2027-03-16T08:00:00Z", "--json")
    assert ended.json() == []


DAILY_0230 = ("FREQ=DAILY;BYHOUR=2;BYMINUTE=30", "America/New_York", "2027-03-13T02:30",
              "--count", "3", "--json")


def test_preview_a_wall_time_in_the_spring_gap_is_shifted_by_default(bare: Cli) -> None:
    # 2027-03-14 02:00 EST jumps to 03:00 EDT: 02:30 does not exist that day.
    shifted = [
        {"utc": "2027-03-13T07:30:00Z", "local": "2027-03-13T02:30:00-05:00"},
        {"utc": "2027-03-14T07:30:00Z", "local": "2027-03-14T03:30:00-04:00"},
        {"utc": "2027-03-15T06:30:00Z", "local": "2027-03-15T02:30:00-04:00"},
    ]
    assert preview(bare, *DAILY_0230).json() == shifted
    assert preview(bare, *DAILY_0230, "--gap", "shift").json() == shifted


def test_preview_a_wall_time_in_the_spring_gap_is_skipped_on_request(bare: Cli) -> None:
    assert preview(bare, *DAILY_0230, "--gap", "skip").json() == [
        {"utc": "2027-03-13T07:30:00Z", "local": "2027-03-13T02:30:00-05:00"},
        {"utc": "2027-03-15T06:30:00Z", "local": "2027-03-15T02:30:00-04:00"},
        {"utc": "2027-03-16T06:30:00Z", "local": "2027-03-16T02:30:00-04:00"},
    ]


@pytest.mark.parametrize(("policy", "fall_back_day"), [
    ([], {"utc": "2027-11-07T05:30:00Z", "local": "2027-11-07T01:30:00-04:00"}),
    (["--overlap", "first"], {"utc": "2027-11-07T05:30:00Z", "local": "2027-11-07T01:30:00-04:00"}),
    (["--overlap", "later"], {"utc": "2027-11-07T06:30:00Z", "local": "2027-11-07T01:30:00-05:00"}),
], ids=["default", "first", "later"])
def test_preview_a_wall_time_that_happens_twice_follows_the_overlap_policy(
        bare: Cli, policy: list[str], fall_back_day: dict[str, str]) -> None:
    # 2027-11-07 02:00 EDT falls back to 01:00 EST: 01:30 happens twice.
    got = preview(bare, "FREQ=DAILY;BYHOUR=1;BYMINUTE=30", "America/New_York",
                  "2027-11-06T01:30", "--count", "3", *policy, "--json")
    assert got.json() == [
        {"utc": "2027-11-06T05:30:00Z", "local": "2027-11-06T01:30:00-04:00"},
        fall_back_day,
        {"utc": "2027-11-08T06:30:00Z", "local": "2027-11-08T01:30:00-05:00"},
    ]


BAD_PREVIEW: list[tuple[str, list[str], str]] = [
    ("unknown zone", [WEEKLY, "Mars/Olympus", "2027-03-15T09:00"],
     "--tz: unknown time zone 'Mars/Olympus'"),
    ("zone spelt wrong", [WEEKLY, "europe/berlin", "2027-03-15T09:00"],
     "--tz: unknown time zone 'europe/berlin' (did you mean 'Europe/Berlin'?)"),
    ("hourly rule", ["FREQ=HOURLY", "Europe/Berlin", "2027-03-15T09:00"],
     "--rrule: FREQ=HOURLY is not supported; the smallest frequency is DAILY"),
    ("start with an offset", [WEEKLY, "Europe/Berlin", "2027-03-15T09:00+01:00"],
     "--start: must be a local wall time without an offset or zone, got "
     "'2027-03-15T09:00:00+01:00' (the zone comes from tz)"),
    ("start in UTC", [WEEKLY, "Europe/Berlin", "2027-03-15T09:00Z"],
     "--start: must be a local wall time without an offset or zone, got "
     "'2027-03-15T09:00:00+00:00' (the zone comes from tz)"),
    ("rule that never occurs", ["FREQ=DAILY;UNTIL=20270101", "Europe/Berlin", "2027-03-15T09:00"],
     "--rrule: 'FREQ=DAILY;UNTIL=20270101' produces no occurrence from local_start "
     "2027-03-15T09:00:00 within 400 years (check UNTIL, COUNT and BY* parts)"),
    ("naive --after", [WEEKLY, "Europe/Berlin", "2027-03-15T09:00", "--after", "2027-03-20T00:00"],
     "--after must carry a UTC offset or zone, got naive 2027-03-20T00:00:00"),
    ("too many", [WEEKLY, "Europe/Berlin", "2027-03-15T09:00", "--count", "1001"],
     "--count: must be a whole number from 0 to 1000, got 1001"),
]


@pytest.mark.parametrize(("args", "line"), [(a, line) for _, a, line in BAD_PREVIEW],
                         ids=[name for name, _, _ in BAD_PREVIEW])
def test_a_bad_preview_is_one_line_on_stderr(bare: Cli, args: list[str], line: str) -> None:
    rule, tz, start, *extra = args
    one_line_error(preview(bare, rule, tz, start, *extra, "--json"), line)


def test_an_unknown_gap_policy_is_refused_by_the_parser(bare: Cli) -> None:
    got = preview(bare, WEEKLY, "Europe/Berlin", "2027-03-15T09:00", "--gap", "sometimes")
    assert (got.code, got.out) == (2, "")
    lines = got.err.splitlines()
    assert len(lines) == 1
    assert re.fullmatch(r"reminders: error: argument --gap: invalid choice: 'sometimes' "
                        r"\(choose from '?shift'?, '?skip'?\) \(see --help\)", lines[0]), lines[0]


# ---------------------------------------------------------------- schedule


def test_schedule_a_weekly_reminder_prints_its_first_delivery_in_utc(
        cli: Cli, conn: db.Connection, hook: str) -> None:
    first = weekly(cli, hook, "--recipient", "alice").json()
    (sid,) = schedule_ids(conn)
    key = f"schedule:{sid}/0:{FIRST_STAMP}:alice:webhook"
    assert first == {"tenant": "acme", "schedule_key": "weekly", "created": True,
                     "delivery_key": key,
                     "deliveries": [{"recipient": "alice", "delivery_key": key,
                                     "due_at": FIRST_DUE, "state": "scheduled"}]}
    stored = conn.execute("select rrule, tz, local_start::text as start, gap_policy, "
                          "overlap_policy, at from schedules").fetchall()
    assert stored == [{"rrule": WEEKLY, "tz": "Europe/Berlin", "start": "2027-03-15 09:00:00",
                       "gap_policy": "shift", "overlap_policy": "first", "at": None}]
    assert weekly(cli, hook, "--recipient", "alice").json() == {**first, "created": False}
    assert conn.execute("select count(*) as n from deliveries").fetchone() == {"n": 1}


def test_a_series_scheduled_late_starts_at_its_next_occurrence_after_the_dst_change(
        cli: Cli, conn: db.Connection, hook: str) -> None:
    got = weekly(cli, hook, "--recipient", "alice", now="2027-03-23T00:00:00Z").json()
    (sid,) = schedule_ids(conn)
    key = f"schedule:{sid}/0:20270329T070000Z:alice:webhook"
    assert got["deliveries"] == [{"recipient": "alice", "delivery_key": key,
                                  "due_at": "2027-03-29T07:00:00Z", "state": "scheduled"}]


def test_both_an_instant_and_a_rule_is_one_line(cli: Cli, conn: db.Connection,
                                                hook: str) -> None:
    got = weekly(cli, hook, "--recipient", "alice", "--at", "2027-03-15T08:00:00Z")
    one_line_error(got, "give either --at or --rrule/--tz/--start, not both")
    nothing_scheduled(conn)


@pytest.mark.parametrize(("given", "missing"), [
    (["--rrule", WEEKLY, "--start", "2027-03-15T09:00"], "--tz"),
    (["--rrule", WEEKLY], "--tz, --start"),
    (["--tz", "Europe/Berlin", "--start", "2027-03-15T09:00"], "--rrule"),
], ids=["no --tz", "no --tz or --start", "no --rrule"])
def test_a_rule_without_its_zone_or_start_names_the_missing_flag(
        cli: Cli, conn: db.Connection, hook: str, given: list[str], missing: str) -> None:
    got = cli("schedule", "--tenant", "acme", "--recipient", "alice", "--channel", "webhook",
              "--to", hook, *given, "--key", "weekly", "--json")
    one_line_error(got, f"a recurring schedule needs --rrule, --tz and --start; missing {missing}")
    nothing_scheduled(conn)


def test_a_bad_zone_when_scheduling_is_one_line(cli: Cli, conn: db.Connection,
                                                hook: str) -> None:
    got = cli("schedule", "--tenant", "acme", "--recipient", "alice", "--channel", "webhook",
              "--to", hook, "--rrule", WEEKLY, "--tz", "Mars/Olympus", "--start",
              "2027-03-15T09:00", "--json")
    one_line_error(got, "--tz: unknown time zone 'Mars/Olympus'")
    nothing_scheduled(conn)


# ---------------------------------------------------------------- fan-out


def fan_out_keys(sid: int, recipients: list[str]) -> list[dict[str, str]]:
    return [{"recipient": r, "delivery_key": f"schedule:{sid}/0:{FIRST_STAMP}:{r}:webhook",
             "due_at": FIRST_DUE, "state": "scheduled"} for r in recipients]


def test_recipients_fan_out_to_one_delivery_each(cli: Cli, conn: db.Connection,
                                                 hook: str) -> None:
    got = weekly(cli, hook, "--recipients", "a,b,c").json()
    (sid,) = schedule_ids(conn)
    assert got == {"tenant": "acme", "schedule_key": "weekly", "created": True,
                   "deliveries": fan_out_keys(sid, ["a", "b", "c"])}
    keys = [d["delivery_key"] for d in got["deliveries"]]
    assert len(set(keys)) == 3
    assert [k.rsplit(":", 2)[1:] for k in keys] == [["a", "webhook"], ["b", "webhook"],
                                                    ["c", "webhook"]]
    rows = conn.execute("select recipient, delivery_key, state from deliveries "
                        "order by recipient").fetchall()
    assert rows == [{"recipient": d["recipient"], "delivery_key": d["delivery_key"],
                     "state": "scheduled"} for d in got["deliveries"]]


def test_recipients_from_a_file_skip_blank_lines_and_comments(
        cli: Cli, conn: db.Connection, hook: str, tmp_path: Path) -> None:
    people = tmp_path / "people.txt"
    people.write_text("# the digest list\n"
                      "ana\n"
                      "\n"
                      "   \n"
                      "  ben  \n"
                      "\t# on leave: carl\n"
                      "dora\n"
                      "ana\n")
    got = weekly(cli, hook, "--recipients-file", str(people)).json()
    (sid,) = schedule_ids(conn)
    assert got == {"tenant": "acme", "schedule_key": "weekly", "created": True,
                   "deliveries": fan_out_keys(sid, ["ana", "ben", "dora"])}
    assert conn.execute("select recipient from schedule_recipients order by recipient"
                        ).fetchall() == [{"recipient": "ana"}, {"recipient": "ben"},
                                         {"recipient": "dora"}]


def test_a_missing_recipients_file_is_one_line(cli: Cli, conn: db.Connection, hook: str,
                                               tmp_path: Path) -> None:
    missing = tmp_path / "nobody.txt"
    got = weekly(cli, hook, "--recipients-file", str(missing))
    one_line_error(got, f"--recipients-file: no such file '{missing}'")
    nothing_scheduled(conn)


def test_an_unreadable_recipients_file_is_one_line(cli: Cli, conn: db.Connection, hook: str,
                                                   tmp_path: Path) -> None:
    latin1 = tmp_path / "people.txt"
    latin1.write_bytes("jos\xe9\n".encode("latin-1"))
    got = weekly(cli, hook, "--recipients-file", str(latin1))
    one_line_error(got, f"--recipients-file: cannot read '{latin1}': 'utf-8' codec can't "
                        "decode byte 0xe9 in position 3: invalid continuation byte")
    nothing_scheduled(conn)


# ---------------------------------------------------------------- versions


def test_version_names_the_time_zone_rules(bare: Cli) -> None:
    got = bare("version", "--json").json()
    assert list(got) == ["reminders", "tzdata", "python"]
    assert re.fullmatch(r"\d{4}[a-z]", got["tzdata"]), got["tzdata"]
    assert got == {"reminders": __version__, "tzdata": tzdata_version(),
                   "python": platform.python_version()}
    text = bare("version")
    assert (text.code, text.err) == (0, "")
    assert text.out == (f"reminders {__version__} tzdata {tzdata_version()} "
                        f"python {platform.python_version()}\n")


def test_status_names_the_time_zone_rules(cli: Cli) -> None:
    got = cli("status", "--json").json()
    assert got["tzdata"] == tzdata_version()
    assert got["by_state"] == dict.fromkeys(STATES, 0)
    assert (got["total"], got["now"]) == (0, "2027-03-01T09:00:00Z")


# ---------------------------------------------------------------- tenants


def test_a_paused_tenant_publishes_nothing_until_resumed(aws_cli: Cli, conn: db.Connection,
                                                         hook: str,
                                                         as_lambda: dict[str, str]) -> None:
    cli = aws_cli
    key = weekly(cli, hook, "--recipient", "alice").json()["delivery_key"]
    later = "2027-03-15T08:01:00Z"

    paused = cli("tenants", "pause", "acme", "--json").json()
    assert paused == {"tenant": "acme", "paused": True, "changed": True}
    assert conn.execute("select paused from tenants where id = 'acme'").fetchone() == {
        "paused": True}
    held = cli("tick", "--json", now=later, **as_lambda).json()
    assert held == {"now": "2027-03-15T08:01:00Z", "queued_before": 0, "reclaimed": {},
                    "advanced": 0, "advance_failed": 0, "first_materialised": 0,
                    "first_failed": 0, "leased": 0, "published": 0,
                    "released": 0, "poisoned": 0, "oldest_overdue_seconds": 0.0, "overdue": 0,
                    "skipped": None, "passes": 0, "paused_overdue_seconds": 60.0, "purged": 0,
                    "unreadable": 0, "held_overdue": 0, "held_overdue_seconds": 0.0,
                    "not_invoked": 0}
    assert cli("show", key, "--json", now=later).json()["state"] == "scheduled"

    resumed = cli("tenants", "resume", "acme")
    assert (resumed.code, resumed.out, resumed.err) == (0, "tenant acme resumed\n", "")
    sent = cli("tick", "--json", now=later, **as_lambda).json()
    assert (sent["leased"], sent["published"], sent["released"]) == (1, 1, 0)
    shown = cli("show", key, "--json", now=later).json()
    # Leased, its lease pending: the row says scheduled until a consumer takes it.
    assert (shown["state"], shown["lease_pending_until"]) == ("scheduled", "2027-03-15T08:06:00Z")


# ---------------------------------------------------------------- list and reconcile


def test_list_of_a_state_on_a_fresh_database_is_empty(cli: Cli) -> None:
    assert cli("list", "--state", "unknown", "--json").json() == []
    text = cli("list", "--state", "unknown")
    assert (text.code, text.out, text.err) == (0, "no unknown deliveries\n", "")


def test_list_of_an_unknown_state_is_one_line(cli: Cli) -> None:
    one_line_error(cli("list", "--state", "bogus"),
                   f"unknown state 'bogus'; expected one of {', '.join(STATES)}")


def events_of(conn: db.Connection, key: str) -> list[dict[str, Any]]:
    return conn.execute("select e.actor, e.event, e.detail from delivery_events e "
                        "join deliveries d on d.id = e.delivery_id "
                        "where d.delivery_key = %s order by e.id", (key,)).fetchall()


def test_only_a_parked_delivery_can_be_reconciled(cli: Cli, conn: db.Connection,
                                                  hook: str) -> None:
    key = weekly(cli, hook, "--recipient", "alice").json()["delivery_key"]
    before = events_of(conn, key)

    got = cli("reconcile", key, "--as", "sent", "--reason", "checked")
    one_line_error(got, f"delivery {key} is scheduled: only unknown, failed, dead, stale or "
                        "suppressed deliveries can be reconciled")
    row = conn.execute("select state, reason, due_at from deliveries where delivery_key = %s",
                       (key,)).fetchone()
    assert row is not None and (row["state"], row["reason"]) == ("scheduled", None)
    assert events_of(conn, key) == before


def test_an_unknown_delivery_reconciled_as_retry_is_due_again_with_an_operator_event(
        cli: Cli, conn: db.Connection, hook: str) -> None:
    key = weekly(cli, hook, "--recipient", "alice").json()["delivery_key"]
    conn.execute("UPDATE deliveries SET state='unknown', reason='test' WHERE delivery_key=%s",
                 (key,))
    parked = cli("list", "--state", "unknown", "--json").json()
    assert [(p["delivery_key"], p["state"], p["reason"]) for p in parked] == [
        (key, "unknown", "test")]

    now = "2027-03-15T09:30:00Z"
    got = cli("reconcile", key, "--as", "retry", "--reason", "no trace", "--json", now=now)
    assert got.json() == {"delivery_key": key, "tenant": "acme", "state": "scheduled",
                          "reason": "operator: no trace"}

    shown = cli("show", key, "--json", now=now).json()
    assert (shown["state"], shown["reason"]) == ("scheduled", "operator: no trace")
    assert (shown["due_at"], shown["occurrence_at"]) == (now, FIRST_DUE)
    assert shown["events"][-1] == {"at": now, "actor": "operator", "who": getpass.getuser(),
                                   "event": "reconciled as retry", "detail": "no trace"}
    assert [e for e in shown["events"] if e["actor"] == "operator"] == [shown["events"][-1]]
    assert cli("list", "--state", "unknown", "--json", now=now).json() == []

    again = cli("reconcile", key, "--as", "retry", "--reason", "no trace", now=now)
    one_line_error(again, f"delivery {key} is scheduled: only unknown, failed, dead, stale or "
                          "suppressed deliveries can be reconciled")


def test_dst_policies_without_a_rule_are_refused(cli: Cli, hook: str) -> None:
    got = cli("schedule", "--tenant", "acme", "--recipient", "alice", "--channel", "webhook",
              "--to", hook, "--at", "2027-03-15T09:00:00Z", "--gap", "skip")
    one_line_error(got, "--gap and --overlap apply to --rrule schedules only")


def test_an_unreachable_queue_is_one_line_naming_aws(cli: Cli) -> None:
    dead = "http://127.0.0.1:9"  # the discard port: nothing listens
    got = cli("tick", "--json", AWS_ENDPOINT_URL=dead, AWS_ACCESS_KEY_ID="x",
              AWS_SECRET_ACCESS_KEY="x", AWS_DEFAULT_REGION="us-east-1", AWS_MAX_ATTEMPTS="1",
              REMINDERS_QUEUE_URL=f"{dead}/000000000000/q",
              REMINDERS_DLQ_URL=f"{dead}/000000000000/d",
              REMINDERS_PARKING_QUEUE_URL=f"{dead}/000000000000/p")
    assert (got.code, got.out) == (5, "")  # AWS unreachable
    assert got.err.startswith("reminders: error: AWS: GetQueueAttributes: "
                              "ConnectionRefusedError: could not reach http://127.0.0.1:9: ")
    assert got.err.count("\n") == 1
