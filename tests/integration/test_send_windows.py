"""Send windows in the recipient's local hours, spreading a burst, priorities: real Postgres,
the local pipeline, fixed instants."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from reminders import db, schedules, windows
from reminders.errors import InvalidInput
from reminders.recurrence import Recurrence
from tests.conftest import Harness
from tests.integration.pipeline_helpers import (
    attempts,
    delivery,
    effects,
    register,
    schedule_webhook,
    take_messages,
    tick,
    work,
)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def rows(h: Harness, key: str) -> list[dict[str, Any]]:
    return h.conn.execute(
        "select d.delivery_key, d.occurrence_at, d.due_at, d.state, d.reason, d.held "
        "from deliveries d join schedules s on s.id = d.schedule_id "
        "where s.schedule_key = %s order by d.occurrence_at, d.id", (key,)).fetchall()


def daily(h: Harness, key: str, rule: str, tz: str, start: str, kind: str, *,
          gap: str = "shift", overlap: str = "first") -> None:
    url = register(h, h.receiver.hook_url(key))
    schedules.schedule(h.conn, tenant="acme", recipients=["alice"], channel="webhook", to=url,
                       now=h.clock.now(), key=key, kind=kind,
                       recurrence=Recurrence.parse(rule, tz, start, gap=gap, overlap=overlap))


def run_at(h: Harness, instant: datetime) -> None:
    h.clock.set(instant)
    tick(h)
    work(h)


def follow(h: Harness, key: str, steps: int) -> list[tuple[datetime, datetime, str]]:
    """Run the pipeline one minute before and at each pending delivery's due time: nothing may
    go before it, and it goes at it. Returns (occurrence, due, state) of each."""
    seen = []
    for _ in range(steps):
        (pending,) = [r for r in rows(h, key) if r["state"] == "scheduled"]
        run_at(h, pending["due_at"] - timedelta(minutes=1))
        assert delivery(h, pending["delivery_key"])["state"] == "scheduled", pending
        run_at(h, pending["due_at"])
        done = delivery(h, pending["delivery_key"])
        seen.append((pending["occurrence_at"], pending["due_at"], done["state"]))
    return seen


def twin(h: Harness, row: dict[str, Any], tz: str, spec: list[str], gap: str = "shift",
         overlap: str = "first") -> datetime | None:
    return windows.next_opening(row["occurrence_at"], tz, windows.parse_windows(spec),
                                gap=gap, overlap=overlap)


def test_a_berlin_window_holds_each_delivery_to_local_hours_across_both_changes(
        harness: Harness) -> None:
    h = harness
    h.clock.set(utc(2027, 3, 25, 12))
    schedules.set_kind(h.conn, name="billing", now=h.clock.now(),
                       send_windows=["Mon-Fri 08:00-21:00", "Sat,Sun 10:00-14:00"])
    daily(h, "spring", "FREQ=DAILY;BYHOUR=6;BYMINUTE=30", "Europe/Berlin",
          "2027-03-26T06:30", "billing")
    seen = follow(h, "spring", 4)
    assert seen == [
        (utc(2027, 3, 26, 5, 30), utc(2027, 3, 26, 7), "sent"),   # Fri 08:00 CET
        (utc(2027, 3, 27, 5, 30), utc(2027, 3, 27, 9), "sent"),   # Sat 10:00 CET
        (utc(2027, 3, 28, 4, 30), utc(2027, 3, 28, 8), "sent"),   # Sun 10:00 CEST: changed
        (utc(2027, 3, 29, 4, 30), utc(2027, 3, 29, 6), "sent"),   # Mon 08:00 CEST
    ]
    # Lateness is measured from the opening it was held to: each went at it, none late.
    late = h.conn.execute(
        "select late from (select extract(epoch from d.updated_at - coalesce(d.planned_at,"
        " d.occurrence_at)) as late, d.updated_at from deliveries d join schedules s"
        " on s.id = d.schedule_id where s.schedule_key = 'spring' and d.state = 'sent') x"
        ).fetchall()
    assert len(late) == 4 and all(r["late"] < 5 for r in late), late
    (histogram,) = [r for r in db.fetch_all(h.conn, "lateness_histogram", {
        "now": h.clock.now(), "since": h.clock.now() - timedelta(minutes=2), "tenant": "acme",
        "bounds": [0.0, 60.0]}) if r["bucket"] is None]
    assert histogram["n"] == 1 and histogram["pcts"][2] < 60, histogram
    held = rows(h, "spring")[0]["held"]
    assert held == "held by its send window (Europe/Berlin) until 2027-03-26T07:00:00Z"
    for row in rows(h, "spring")[:4]:
        assert twin(h, row, "Europe/Berlin", ["Mon-Fri 08:00-21:00", "Sat,Sun 10:00-14:00"]) \
            == row["due_at"]

    # Autumn: 22:00 local is after the window; it goes at 08:00 the next weekday morning.
    h.clock.set(utc(2027, 10, 28, 12))
    daily(h, "autumn", "FREQ=DAILY;BYHOUR=22;BYMINUTE=0;BYDAY=TH,SU", "Europe/Berlin",
          "2027-10-28T22:00", "billing")
    assert follow(h, "autumn", 2) == [
        (utc(2027, 10, 28, 20), utc(2027, 10, 29, 6), "sent"),   # Thu 22:00 CEST -> Fri 08:00 CEST
        (utc(2027, 10, 31, 21), utc(2027, 11, 1, 7), "sent"),    # Sun 22:00 CET -> Mon 08:00 CET
    ]


def test_a_window_opening_in_the_berlin_gap_follows_the_schedules_gap_policy(
        harness: Harness) -> None:
    h = harness
    h.clock.set(utc(2027, 3, 26, 12))
    schedules.set_kind(h.conn, name="night", now=h.clock.now(), send_windows=["02:30-05:00"])
    daily(h, "shift", "FREQ=DAILY;BYHOUR=1;BYMINUTE=0", "Europe/Berlin", "2027-03-27T01:00",
          "night")
    daily(h, "skip", "FREQ=DAILY;BYHOUR=1;BYMINUTE=0", "Europe/Berlin", "2027-03-28T01:00",
          "night", gap="skip")
    # 02:30 does not exist on 28 March: shifted by the gap's length, 03:30 CEST (01:30Z).
    assert follow(h, "shift", 2) == [
        (utc(2027, 3, 27, 0), utc(2027, 3, 27, 1, 30), "sent"),
        (utc(2027, 3, 28, 0), utc(2027, 3, 28, 1, 30), "sent"),
    ]
    # skip: that day's window is left out; the next opens at 02:30 CEST on the 29th.
    (first,) = [r for r in rows(h, "skip") if r["state"] == "scheduled"]
    assert first["due_at"] == utc(2027, 3, 29, 0, 30)
    assert twin(h, first, "Europe/Berlin", ["02:30-05:00"], gap="skip") == first["due_at"]


def test_a_sao_paulo_window_across_its_2018_gap_and_2019_overlap(harness: Harness) -> None:
    h = harness
    h.clock.set(utc(2018, 11, 2, 12))
    schedules.set_kind(h.conn, name="late", now=h.clock.now(), send_windows=["00:30-06:00"])
    # Clocks went from 00:00 to 01:00 on 4 November 2018: 00:30 that night never happened.
    daily(h, "sp-gap", "FREQ=DAILY;BYHOUR=23;BYMINUTE=0", "America/Sao_Paulo",
          "2018-11-02T23:00", "late")
    assert follow(h, "sp-gap", 2) == [
        (utc(2018, 11, 3, 2), utc(2018, 11, 3, 3, 30), "sent"),   # 00:30 -03
        (utc(2018, 11, 4, 2), utc(2018, 11, 4, 3, 30), "sent"),   # shifted: 01:30 -02
    ]
    # Clocks went from 00:00 back to 23:00 on 17 February 2019: 23:30 on the 16th happened
    # twice (-02, then -03).
    h.clock.set(utc(2019, 2, 16, 12))
    schedules.set_kind(h.conn, name="eve", now=h.clock.now(), send_windows=["Sat 23:30-23:50"])
    daily(h, "sp-first", "FREQ=DAILY;BYHOUR=22;BYMINUTE=0;COUNT=1", "America/Sao_Paulo",
          "2019-02-16T22:00", "eve")
    daily(h, "sp-later", "FREQ=DAILY;BYHOUR=22;BYMINUTE=0;COUNT=1", "America/Sao_Paulo",
          "2019-02-16T22:00", "eve", overlap="later")
    assert follow(h, "sp-first", 1) == [(utc(2019, 2, 17, 0), utc(2019, 2, 17, 1, 30), "sent")]
    assert follow(h, "sp-later", 1) == [(utc(2019, 2, 17, 0), utc(2019, 2, 17, 2, 30), "sent")]
    for key, overlap in (("sp-first", "first"), ("sp-later", "later")):
        row = rows(h, key)[0]
        assert twin(h, row, "America/Sao_Paulo", ["Sat 23:30-23:50"],
                    overlap=overlap) == row["due_at"]


def test_an_opening_past_the_staleness_deadline_ends_stale_with_that_reason(
        harness: Harness) -> None:
    h = harness
    h.clock.set(utc(2027, 3, 26, 12))
    schedules.set_kind(h.conn, name="trip", now=h.clock.now(), stale_after=timedelta(hours=3),
                       send_windows=["08:00-21:00"])
    # A one-off at 22:00 in the recipient's zone: the window opens ten hours later.
    (key,) = schedule_webhook(h, "tonight", at=utc(2027, 3, 26, 21), kind="trip",
                              tz="Europe/Berlin")
    row = delivery(h, key)
    assert row["state"] == "stale"
    assert row["reason"] == ("held by its send window: its next opening 2027-03-27T07:00:00Z "
                             "is past its staleness deadline 2027-03-27T00:00:00Z")
    # One inside the deadline waits for the opening (07:00 local, opening 08:00).
    (early,) = schedule_webhook(h, "morning", at=utc(2027, 3, 27, 6), kind="trip",
                                tz="Europe/Berlin", recipients=["bob"])
    assert (delivery(h, early)["state"], delivery(h, early)["due_at"]) == (
        "scheduled", utc(2027, 3, 27, 7))
    run_at(h, utc(2027, 3, 27, 7))
    assert delivery(h, early)["state"] == "sent" and effects(h) == {early: 1}
    # A recurring one stale at birth still advances its series.
    daily(h, "nightly", "FREQ=DAILY;BYHOUR=22;BYMINUTE=0;COUNT=3", "Europe/Berlin",
          "2027-03-28T22:00", "trip")
    run_at(h, utc(2027, 3, 29, 12))  # each tick advances the series by one
    run_at(h, utc(2027, 3, 29, 12, 1))
    states = [(r["occurrence_at"], r["state"]) for r in rows(h, "nightly")]
    assert [s for _, s in states] == ["stale", "stale", "stale"], states
    assert all("past its staleness deadline" in r["reason"] for r in rows(h, "nightly"))


def test_kinds_refuse_bad_windows_naming_what_was_wrong(harness: Harness) -> None:
    h = harness
    for spec, words in (("8-21", "is not a window"), ("25:00-26:00", "is not a time of day"),
                        ("Fun 08:00-09:00", "is not a weekday"),
                        ("08:00-08:00", "opens and closes")):
        with pytest.raises(InvalidInput, match=words):
            schedules.set_kind(h.conn, name="bad", now=h.clock.now(), send_windows=[spec])
    with pytest.raises(InvalidInput, match="priority"):
        schedules.set_kind(h.conn, name="bad", now=h.clock.now(), priority=10)
    with pytest.raises(InvalidInput, match="tz: unknown time zone 'Europe/berlin'"):
        schedule_webhook(h, "badzone", tz="Europe/berlin")


# ---------------------------------------------------------------- spreading

SPREAD = timedelta(minutes=15)
N = 10_000


def test_a_10000_delivery_burst_spreads_uniformly_and_each_key_keeps_its_instant(
        harness: Harness) -> None:
    """Kolmogorov-Smirnov: with n = 10,000 the largest gap between the places' empirical
    distribution and the uniform one on [0, 15 min) stays under 1.949 / sqrt(n) = 0.0195 at
    significance 0.001; and a chi-square over fifteen one-minute bins under 36.12 (14 degrees
    of freedom, 0.001). Both on a fixed set of keys, so the test is deterministic."""
    h = harness
    fixed = [f"schedule:1/0:20270315T080000Z:user{i}:webhook" for i in range(N)]
    places = [r["ms"] for r in h.conn.execute(
        "select extract(epoch from spread_offset(k, %s)) * 1000 as ms from unnest(%s::text[]) k",
        (SPREAD, fixed)).fetchall()]
    span = SPREAD.total_seconds() * 1000
    assert all(0 <= float(p) < span for p in places)
    xs = sorted(float(p) / span for p in places)
    ks = max(max((i + 1) / N - x, x - i / N) for i, x in enumerate(xs))
    assert ks < 1.949 / math.sqrt(N), ks
    bins = [0] * 15
    for x in xs:
        bins[int(x * 15)] += 1
    chi2 = sum((b - N / 15) ** 2 / (N / 15) for b in bins)
    assert chi2 < 36.12, (chi2, bins)
    # The Python twin agrees to the millisecond.
    assert [windows.spread_offset(k, SPREAD) for k in fixed[:500]] == [
        timedelta(milliseconds=int(p)) for p in places[:500]]

    # A real fan-out of 10,000 due at one instant: each lands at its key's place.
    h.clock.set(utc(2027, 3, 15, 7))
    schedules.set_kind(h.conn, name="digest", now=h.clock.now(), spread=SPREAD)
    at = utc(2027, 3, 15, 8)
    keys = schedule_webhook(h, "burst", at=at, kind="digest",
                            recipients=[f"user{i}" for i in range(N)])
    due = {r["delivery_key"]: r["due_at"] for r in rows(h, "burst")}
    assert len(due) == N
    assert all(due[k] == at + windows.spread_offset(k, SPREAD) for k in keys)
    assert max(due.values()) < at + SPREAD and min(due.values()) >= at


def test_a_spread_delivery_keeps_its_key_and_instant_through_a_retry_and_a_redrive(
        harness: Harness) -> None:
    h = harness
    h.clock.set(utc(2027, 3, 15, 7))
    schedules.set_kind(h.conn, name="digest", now=h.clock.now(), spread=SPREAD,
                       backoff_base=timedelta(seconds=30))
    at = utc(2027, 3, 15, 8)
    url = register(h, h.receiver.hook_url("flaky", codes=[503, 200]))
    (key,) = schedule_webhook(h, "one", at=at, url=url, kind="digest")
    place = at + windows.spread_offset(key, SPREAD)
    assert delivery(h, key)["due_at"] == place and place > at
    run_at(h, place - timedelta(milliseconds=1))
    assert attempts(h, key) == []
    run_at(h, place)  # 503: retrying
    assert delivery(h, key)["state"] == "retrying"
    run_at(h, place + timedelta(minutes=5))
    assert delivery(h, key)["state"] == "sent"
    (first, second) = attempts(h, key)
    assert first["started_at"] == place and first["outcome"] == "transient"
    assert second["outcome"] == "sent"
    # The same occurrence scheduled again (a retried application call) lands at the same place,
    # and a dead-letter replay keeps the key: one effect.
    (again,) = schedule_webhook(h, "one", at=at, url=url, kind="digest")
    assert again == key and delivery(h, key)["due_at"] >= place
    assert effects(h) == {key: 1}
    place_sql = h.conn.execute("select spread_offset(%s, %s) as o", (key, SPREAD)).fetchone()
    assert place_sql is not None and place_sql["o"] == windows.spread_offset(key, SPREAD)


def test_a_redriven_spread_delivery_is_sent_once_under_its_key(harness: Harness) -> None:
    h = harness
    h.clock.set(utc(2027, 3, 15, 7))
    schedules.set_kind(h.conn, name="digest", now=h.clock.now(), spread=SPREAD)
    at = utc(2027, 3, 15, 8)
    (key,) = schedule_webhook(h, "dlq", at=at, kind="digest")
    place = delivery(h, key)["due_at"]
    h.clock.set(place)
    tick(h)
    (msg,) = take_messages(h)
    h.sqs().send_message(QueueUrl=h.rt.dlq.url, MessageBody=msg["Body"])
    work(h)  # redrive replays through Postgres: due again, same key
    assert delivery(h, key)["redrives"] == 1
    tick(h)
    work(h)
    row = delivery(h, key)
    assert row["state"] == "sent" and row["delivery_key"] == key
    assert effects(h) == {key: 1}
    offset = windows.spread_offset(key, SPREAD).total_seconds()
    assert row["held"] == f"spread by {offset:.3f}s of 900.000s"
    assert row["due_at"] >= place


# ---------------------------------------------------------------- priorities


def test_a_high_priority_reminder_behind_its_tenants_low_priority_fan_out_goes_first_pass(
        harness: Harness) -> None:
    h = harness
    h.clock.set(utc(2027, 3, 15, 8))
    schedules.set_kind(h.conn, name="bulk", now=h.clock.now(), priority=1)
    schedules.set_kind(h.conn, name="otp", now=h.clock.now(), priority=9)
    bulk = schedule_webhook(h, "fanout", at=utc(2027, 3, 15, 7), kind="bulk",
                            recipients=[f"user{i}" for i in range(300)])
    (otp,) = schedule_webhook(h, "otp", at=utc(2027, 3, 15, 7, 59), kind="otp")
    schedule_webhook(h, "other", at=utc(2027, 3, 15, 7, 30), tenant="globex")
    leased = db.fetch_all(h.conn, "lease_due", {"now": h.clock.now(), "batch": 20,
                                                "share": 10, "lease_seconds": 300})
    ids = {r["id"] for r in leased}
    assert delivery(h, otp)["id"] in ids
    # Fairness across tenants unchanged: the other tenant's reminder is in the same pass.
    assert delivery(h, schedule_webhook(h, "other", at=utc(2027, 3, 15, 7, 30),
                                        tenant="globex")[0], tenant="globex")["id"] in ids
    # Within a priority, oldest first.
    assert len([b for b in bulk if delivery(h, b)["id"] in ids]) == 9
