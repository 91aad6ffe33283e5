"""The SQL API refuses at entry what the service cannot represent or expand, as the Python API
does and in its words: payloads no JSON reader of the service takes back, instants outside the
years 1-9999, rules outside the service's RRULE grammar, zones outside its tzdata. Each through
a real ``reminders_client`` login; each was accepted before (``created = true``) and failed a
tick later, after the caller's transaction had committed."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

import psycopg
import pytest

from reminders import db, scanner
from reminders.errors import InvalidInput
from reminders.payloads import MAX_DEPTH, check_payload
from reminders.recurrence import Recurrence
from reminders.timezones import available_zones
from tests.conftest import Harness
from tests.integration.test_sql_api import Client, clients, sqlstate

__all__ = ["clients"]  # the fixture, used by name below

SCHEDULE_PAYLOAD = ("select * from reminders.schedule(key => %s, recipients => %s,"
                    " channel => 'email', at => '2027-03-01 09:00Z', payload => %s::jsonb)")
SCHEDULE_RULE = ("select * from reminders.schedule(key => %s, recipients => %s,"
                 " channel => 'email', rrule => %s, tz => %s, local_start => %s, gap => %s,"
                 " overlap => %s)")
START = datetime(2027, 3, 1, 9, 0)
ALICE = ["alice@example.com"]
# 2^1024 - 2^970: the least decimal a double reads as infinity.
TO_INFINITY = 2 ** 1024 - 2 ** 970


def nested(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


PAYLOADS = [
    nested(MAX_DEPTH), nested(MAX_DEPTH + 1), '{"a":' + "[" * 1100 + "]" * 1100 + "}",
    '{"n": 1e5000}', '{"n": -1e5000}', '{"n": 1e308}', '{"n": 1e400}',
    f'{{"n": {"9" * 4300}}}', f'{{"n": -{"9" * 4300}}}', f'{{"n": {"9" * 4301}}}',
    f'{{"n": {TO_INFINITY}.0}}', f'{{"n": -{TO_INFINITY - 1}.5}}',
    f'{{"n": {TO_INFINITY - 1}.5}}', '{"n": 1.5e-400}', '{"s": "[[[[{{{{\\"]]]"}',
    '{"deep": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}',
]


@pytest.mark.parametrize("payload", PAYLOADS, ids=range(len(PAYLOADS)))
def test_a_payload_is_refused_exactly_when_the_service_could_not_read_it_back(
        clients: Callable[[str | None], Client], conn: db.Connection, payload: str) -> None:
    """The oracle is the Python API's own check, on the text the consumer reads (jsonb's)."""
    stored = conn.execute("select %s::jsonb::text as t", (payload,)).fetchone()
    assert stored is not None
    try:
        check_payload(stored["t"])
        expected: tuple[str | None, str | None] = (None, None)
    except ValueError as exc:
        expected = ("RM400", f"payload cannot be read back as JSON: {exc}")
    acme = clients("acme")
    try:
        acme.rows(SCHEDULE_PAYLOAD, ("p", ALICE, payload))
        got: tuple[str | None, str | None] = (None, None)
    except psycopg.Error as err:
        got = sqlstate(err)
    assert got == expected
    if expected[0] is not None:
        assert conn.execute("select count(*) as n from schedules").fetchone() == {"n": 0}


def test_the_payloads_the_issue_named_are_refused(
        clients: Callable[[str | None], Client]) -> None:
    acme = clients("acme")
    err = acme.refused(SCHEDULE_PAYLOAD, ("p", ALICE, '{"n": 1e5000}'))
    assert sqlstate(err) == ("RM400", "payload cannot be read back as JSON: the number "
                                      "10000000000000000000... is out of range")
    err = acme.refused(SCHEDULE_PAYLOAD, ("p", ALICE, "[" * 1100 + "]" * 1100))
    assert sqlstate(err) == ("RM400", "payload must be a JSON object, got array")
    err = acme.refused(SCHEDULE_PAYLOAD, ("p", ALICE, nested(1100)))
    assert sqlstate(err) == ("RM400", "payload cannot be read back as JSON: it nests deeper "
                                      "than 32 levels")


@pytest.mark.parametrize(("at", "shown"), [
    ("0500-01-01 BC", "0500-01-01T00:00:00Z BC"),
    ("0001-12-31 23:59:59 BC", "0001-12-31T23:59:59Z BC"),
    ("10000-01-01 00:00Z", "10000-01-01T00:00:00Z AD"),
    ("294276-12-31 23:00Z", "294276-12-31T23:00:00Z AD"),
])
def test_an_instant_outside_the_years_1_to_9999_is_refused(
        clients: Callable[[str | None], Client], conn: db.Connection, at: str,
        shown: str) -> None:
    acme = clients("acme")
    err = acme.refused("select * from reminders.schedule(key => 'x', recipients => %s,"
                       " channel => 'email', at => %s)", (ALICE, at))
    assert sqlstate(err) == ("RM400", f"at must be an instant in the years 1-9999 (UTC), "
                                      f"got {shown}")
    acme.rows("select * from reminders.schedule(key => 'y', recipients => %s,"
              " channel => 'email', at => '2027-03-01 09:00Z')", (ALICE,))
    err = acme.refused("select * from reminders.reschedule(key => 'y', at => %s)", (at,))
    assert sqlstate(err)[0] == "RM400" and "years 1-9999" in str(sqlstate(err)[1])
    assert conn.execute("select count(*) as n from schedules").fetchone() == {"n": 1}


@pytest.mark.parametrize("at", ["0001-01-01 00:00Z", "9999-12-31 23:59:59Z"])
def test_the_first_and_the_last_instant_of_the_years_1_to_9999_are_taken(
        clients: Callable[[str | None], Client], at: str) -> None:
    (row,) = clients("acme").rows("select * from reminders.schedule(key => 'x', recipients"
                                  " => %s, channel => 'email', at => %s)", (ALICE, at))
    assert row["created"] is True


# Rules, zones, starts and policies: the Python API's message for each, or none.
RULES: list[dict[str, Any]] = [
    {"rrule": "FREQ=SOMETIMES"}, {"rrule": "FREQ=YEARLY;BYWEEKNO=20"},
    {"rrule": "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30"},
    {"rrule": "FREQ=YEARLY;BYMONTH=2,4;BYMONTHDAY=30,31"}, {"tz": "Mars/Olympus"},
    {"tz": "europe/berlin"}, {"tz": "../../etc/passwd"}, {"tz": ""}, {"tz": "EST5EDT"},
    {"tz": "Europe/Kyiv"}, {"tz": "US/Pacific"}, {"tz": "Etc/GMT+5"},
    {"rrule": ""}, {"rrule": "   "}, {"rrule": "EVERY MONDAY"}, {"rrule": "BYHOUR=9"},
    {"rrule": "FREQ=FORTNIGHTLY"}, {"rrule": "FREQ=HOURLY"}, {"rrule": "FREQ=MINUTELY"},
    {"rrule": "FREQ=DAILY;COUNT=3;UNTIL=20250101T000000Z"},
    {"rrule": "DTSTART:20250101T090000\nRRULE:FREQ=DAILY"},
    {"rrule": "FREQ=DAILY;DTSTART=20250101T090000"},
    {"rrule": "RRULE:FREQ=DAILY\nEXDATE:20250102T090000"}, {"rrule": "EXRULE:FREQ=DAILY"},
    {"rrule": "FREQ=DAILY;BYHOUR=24"}, {"rrule": "FREQ=DAILY;BYMINUTE=60"},
    {"rrule": "FREQ=DAILY;BYHOUR=9,"}, {"rrule": "FREQ=DAILY;BYHOUR=-1"},
    {"rrule": "FREQ=MONTHLY;BYMONTHDAY=0"}, {"rrule": "FREQ=MONTHLY;BYMONTHDAY=-32"},
    {"rrule": "FREQ=YEARLY;BYMONTH=13"}, {"rrule": "FREQ=DAILY;INTERVAL=0"},
    {"rrule": "FREQ=DAILY;INTERVAL=1001"}, {"rrule": "FREQ=DAILY;COUNT=10001"},
    {"rrule": "FREQ=DAILY;COUNT=MANY"}, {"rrule": "FREQ=DAILY;UNTIL=2025-03-01"},
    {"rrule": "FREQ=DAILY;UNTIL=20250231"}, {"rrule": "FREQ=DAILY;UNTIL=00000101"},
    {"rrule": "FREQ=DAILY;UNTIL=20251301"}, {"rrule": "FREQ=DAILY;UNTIL=20250101T240000Z"},
    {"rrule": "FREQ=DAILY;UNTIL=20250101T126000"}, {"rrule": "FREQ=DAILY;UNTIL=20250101T120060"},
    {"rrule": "FREQ=DAILY;WKST=XX"}, {"rrule": "FREQ=WEEKLY;BYDAY=MONDAY"},
    {"rrule": "FREQ=WEEKLY;BYDAY=1MO"}, {"rrule": "FREQ=MONTHLY;BYDAY=6MO"},
    {"rrule": "FREQ=YEARLY;BYMONTH=3;BYDAY=-6FR"}, {"rrule": "FREQ=YEARLY;BYDAY=54MO"},
    {"rrule": "FREQ=MONTHLY;BYDAY=0MO"}, {"rrule": "FREQ=WEEKLY;BYMONTHDAY=1"},
    {"rrule": "FREQ=MONTHLY;BYSETPOS=1"}, {"rrule": "FREQ=DAILY;BYHOUR=9;BYSETPOS=2"},
    {"rrule": "FREQ=YEARLY;BYMONTH=1,2;BYSETPOS=3"},
    {"rrule": "FREQ=DAILY;BYHOUR=9,10;BYMINUTE=0,30;BYSETPOS=-5"},
    {"rrule": "FREQ=DAILY;BYSECOND=5"}, {"rrule": "FREQ=YEARLY;BYYEARDAY=100"},
    {"rrule": "FREQ=DAILY;BYEASTER=0"}, {"rrule": "FREQ=DAILY;X-NAME=1"},
    {"rrule": "FREQ=DAILY;FREQ=WEEKLY"}, {"rrule": "FREQ=DAILY;BYHOUR="},
    {"rrule": "FREQ=DAILY;UNTIL=20241231T000000Z"}, {"rrule": "FREQ=DAILY;UNTIL=20270226"},
    {"rrule": "FREQ=DAILY;UNTIL=20270301T085959"}, {"rrule": "FREQ=DAILY;UNTIL=20270227T085959Z"},
    {"local_start": datetime(2027, 3, 1, 9, 0, 0, 500_000)},
    {"local_start": datetime(1899, 12, 31, 23, 59)}, {"local_start": datetime(3000, 1, 1)},
    {"gap": "later"}, {"overlap": "second"},
    # Taken by both.
    {}, {"rrule": "FREQ=WEEKLY;BYDAY=MO,WE;BYHOUR=9;BYMINUTE=30"},
    {"rrule": "FREQ=MONTHLY;BYDAY=-1FR"}, {"rrule": "FREQ=MONTHLY;BYMONTHDAY=-1"},
    {"rrule": "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29"},
    {"rrule": "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1"},
    {"rrule": "RRULE:FREQ=WEEKLY;WKST=SU;INTERVAL=2;BYDAY=SU"},
    {"rrule": " FREQ=DAILY ; INTERVAL=+2 ;; "}, {"rrule": "FREQ=DAILY;COUNT=3"},
    {"rrule": "FREQ=DAILY;UNTIL=20270301"}, {"rrule": "FREQ=DAILY;UNTIL=20270301T090000"},
    {"rrule": "FREQ=DAILY;UNTIL=20270302T090000Z"}, {"rrule": "FREQ=YEARLY;BYDAY=20MO"},
    {"rrule": "FREQ=YEARLY;BYMONTH=2,4;BYMONTHDAY=30"}, {"tz": "UTC"},
    {"tz": "America/Argentina/Buenos_Aires"}, {"gap": "skip", "overlap": "later"},
    {"local_start": datetime(1900, 1, 1)}, {"local_start": datetime(2999, 12, 31, 23, 59, 59)},
]
BASE: dict[str, Any] = {"rrule": "FREQ=DAILY;BYHOUR=9", "tz": "Europe/Berlin",
                        "local_start": START, "gap": "shift", "overlap": "first"}


def python_says(request: dict[str, Any]) -> tuple[str | None, str | None]:
    """What the service says of the rule as stored (its Recurrence, which the scanner builds
    from the row), then of its first occurrence (Recurrence.parse, in its words)."""
    try:
        Recurrence(**request)
        Recurrence.parse(**request)
    except InvalidInput as exc:
        return "RM400", str(exc)
    return None, None


@pytest.mark.parametrize("change", RULES, ids=[json.dumps(c, default=str) for c in RULES])
def test_a_rule_is_refused_at_entry_exactly_as_the_python_api_refuses_it(
        clients: Callable[[str | None], Client], conn: db.Connection,
        change: dict[str, Any]) -> None:
    request = {**BASE, **change}
    expected = python_says(request)
    acme = clients("acme")
    try:
        rows = acme.rows(SCHEDULE_RULE, ("r", ALICE, request["rrule"], request["tz"],
                                         request["local_start"], request["gap"],
                                         request["overlap"]))
        got: tuple[str | None, str | None] = (None, None)
        assert [r["created"] for r in rows] == [True]
    except psycopg.Error as err:
        got = sqlstate(err)
    assert got == expected
    if expected[0] is not None:
        assert conn.execute("select count(*) as n from schedules").fetchone() == {"n": 0}


# What SQL cannot decide: whether the rule's BY* parts and INTERVAL leave an occurrence within
# the service's 400-year window (the expansion's). Accepted at entry, ended by the scanner.
# So is an UNTIL in UTC within two days before the start (where the zone's offset decides).
UNDECIDED = ["FREQ=DAILY;INTERVAL=7;BYDAY=TU", "FREQ=YEARLY;INTERVAL=1000;BYMONTH=2;"
             "BYMONTHDAY=29;BYDAY=MO", "FREQ=DAILY;UNTIL=20270301T075959Z"]


@pytest.mark.parametrize("rrule", UNDECIDED)
def test_a_rule_only_the_expansion_can_tell_is_empty_is_ended_by_the_scanner(
        clients: Callable[[str | None], Client], harness: Harness, rrule: str) -> None:
    assert python_says({**BASE, "rrule": rrule})[1] is not None
    acme = clients("acme")
    (row,) = acme.rows(SCHEDULE_RULE, ("r", ALICE, rrule, "Europe/Berlin", START, "shift",
                                       "first"))
    assert row["created"] is True
    tick = scanner.tick(harness.rt)
    # A rule dateutil would search to the year 9999 for stops at the expansion's bound, and
    # says so; the others end for having no first occurrence.
    bounded = rrule == "FREQ=DAILY;INTERVAL=7;BYDAY=TU"
    assert (tick.first_materialised, tick.first_failed) == ((0, 1) if bounded else (1, 0))
    assert acme.rows("select state, pending_first, problem from reminders.my_schedules") == [
        {"state": "ended", "pending_first": False, "problem": (
            "the rule cannot be expanded: ExpansionBound: rrule: no occurrence in 5000 days in "
            "a row (the expansion's bound): the rule has none the service can find")
         if bounded else None}]


def test_the_zone_list_is_the_service_s_tzdata(conn: db.Connection) -> None:
    """Not Postgres's own list: that comes from the server's tzdata, another release."""
    listed = {r["name"] for r in conn.execute("select name from time_zones").fetchall()}
    assert listed == set(available_zones())
