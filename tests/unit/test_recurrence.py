"""The recurrence engine against hand-worked instants.

Every expected UTC instant below was worked out by hand from the zone's published rules: the
comment on each case names the transition (local wall clock before -> after, and its UTC
instant) and the offset used. Years are in the past (2011-2025) so later tzdata releases, which
only change future rules in practice, do not move them. No test reads the wall clock.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import pickle
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from reminders.errors import InvalidInput
from reminders.recurrence import (
    MAX_LIMIT,
    Occurrence,
    Recurrence,
    preview,
)
from reminders.timezones import available_zones, tzdata_package_version, tzdata_version, zone


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def pairs(occurrences: list[Occurrence]) -> list[tuple[str, str]]:
    """(UTC, local-with-offset) at minute precision, for compact expectations."""
    return [
        (o.utc.strftime("%Y-%m-%dT%H:%MZ"), o.local.isoformat(timespec="minutes"))
        for o in occurrences
    ]


def expand(
    rule: str,
    tz: str,
    start: str,
    after: str,
    count: int,
    gap: str = "shift",
    overlap: str = "first",
) -> list[tuple[str, str]]:
    rec = Recurrence.parse(rule, tz, start, gap=gap, overlap=overlap)
    return pairs(rec.occurrences_after(instant(after), count))


DAILY_0230 = "FREQ=DAILY;BYHOUR=2;BYMINUTE=30"
DAILY_0130 = "FREQ=DAILY;BYHOUR=1;BYMINUTE=30"


# -- DST gaps and overlaps, both policies, per zone -------------------------------------------

DST_CASES: list[tuple[str, str, str, str, str, str, list[tuple[str, str]]]] = [
    # (id, zone, rule, local start, policy, after, expected)
    # America/New_York 2025-03-09: 02:00 EST(-5) -> 03:00 EDT(-4) at 07:00Z, so 02:30 is in a 1 h
    # gap. Mar 8 02:30-05 = 07:30Z; shifted 02:30 -> 03:30-04 = 07:30Z; Mar 10 02:30-04 = 06:30Z.
    (
        "new_york-gap-shift",
        "America/New_York",
        DAILY_0230,
        "2025-03-08T00:00",
        "shift",
        "2025-03-08T00:00Z",
        [
            ("2025-03-08T07:30Z", "2025-03-08T02:30-05:00"),
            ("2025-03-09T07:30Z", "2025-03-09T03:30-04:00"),
            ("2025-03-10T06:30Z", "2025-03-10T02:30-04:00"),
        ],
    ),
    (
        "new_york-gap-skip",
        "America/New_York",
        DAILY_0230,
        "2025-03-08T00:00",
        "skip",
        "2025-03-08T00:00Z",
        [
            ("2025-03-08T07:30Z", "2025-03-08T02:30-05:00"),
            ("2025-03-10T06:30Z", "2025-03-10T02:30-04:00"),
            ("2025-03-11T06:30Z", "2025-03-11T02:30-04:00"),
        ],
    ),
    # America/New_York 2025-11-02: 02:00 EDT(-4) -> 01:00 EST(-5) at 06:00Z; 01:30 happens twice:
    # first 01:30-04 = 05:30Z, later 01:30-05 = 06:30Z. Nov 1 01:30-04 = 05:30Z, Nov 3 -05 = 06:30Z.
    (
        "new_york-overlap-first",
        "America/New_York",
        DAILY_0130,
        "2025-11-01T00:00",
        "first",
        "2025-11-01T00:00Z",
        [
            ("2025-11-01T05:30Z", "2025-11-01T01:30-04:00"),
            ("2025-11-02T05:30Z", "2025-11-02T01:30-04:00"),
            ("2025-11-03T06:30Z", "2025-11-03T01:30-05:00"),
        ],
    ),
    (
        "new_york-overlap-later",
        "America/New_York",
        DAILY_0130,
        "2025-11-01T00:00",
        "later",
        "2025-11-01T00:00Z",
        [
            ("2025-11-01T05:30Z", "2025-11-01T01:30-04:00"),
            ("2025-11-02T06:30Z", "2025-11-02T01:30-05:00"),
            ("2025-11-03T06:30Z", "2025-11-03T01:30-05:00"),
        ],
    ),
    # Europe/London 2025-03-30: 01:00 GMT(+0) -> 02:00 BST(+1) at 01:00Z; 01:30 is in the gap.
    # Shifted to 02:30+01 = 01:30Z (the same UTC clock time as the day before, 24 h later).
    (
        "london-gap-shift",
        "Europe/London",
        DAILY_0130,
        "2025-03-29T00:00",
        "shift",
        "2025-03-29T00:00Z",
        [
            ("2025-03-29T01:30Z", "2025-03-29T01:30+00:00"),
            ("2025-03-30T01:30Z", "2025-03-30T02:30+01:00"),
            ("2025-03-31T00:30Z", "2025-03-31T01:30+01:00"),
        ],
    ),
    (
        "london-gap-skip",
        "Europe/London",
        DAILY_0130,
        "2025-03-29T00:00",
        "skip",
        "2025-03-29T00:00Z",
        [
            ("2025-03-29T01:30Z", "2025-03-29T01:30+00:00"),
            ("2025-03-31T00:30Z", "2025-03-31T01:30+01:00"),
            ("2025-04-01T00:30Z", "2025-04-01T01:30+01:00"),
        ],
    ),
    # Europe/London 2025-10-26: 02:00 BST(+1) -> 01:00 GMT(+0) at 01:00Z; 01:30 twice:
    # first 01:30+01 = 00:30Z, later 01:30+00 = 01:30Z.
    (
        "london-overlap-first",
        "Europe/London",
        DAILY_0130,
        "2025-10-25T00:00",
        "first",
        "2025-10-25T12:00Z",
        [
            ("2025-10-26T00:30Z", "2025-10-26T01:30+01:00"),
            ("2025-10-27T01:30Z", "2025-10-27T01:30+00:00"),
        ],
    ),
    (
        "london-overlap-later",
        "Europe/London",
        DAILY_0130,
        "2025-10-25T00:00",
        "later",
        "2025-10-25T12:00Z",
        [
            ("2025-10-26T01:30Z", "2025-10-26T01:30+00:00"),
            ("2025-10-27T01:30Z", "2025-10-27T01:30+00:00"),
        ],
    ),
    # Europe/Berlin 2025-03-30: 02:00 CET(+1) -> 03:00 CEST(+2) at 01:00Z; 02:30 -> 03:30+02
    # = 01:30Z. The day before, 02:30+01 = 01:30Z too; the day after 02:30+02 = 00:30Z.
    (
        "berlin-gap-shift",
        "Europe/Berlin",
        DAILY_0230,
        "2025-03-29T00:00",
        "shift",
        "2025-03-29T00:00Z",
        [
            ("2025-03-29T01:30Z", "2025-03-29T02:30+01:00"),
            ("2025-03-30T01:30Z", "2025-03-30T03:30+02:00"),
            ("2025-03-31T00:30Z", "2025-03-31T02:30+02:00"),
        ],
    ),
    (
        "berlin-gap-skip",
        "Europe/Berlin",
        DAILY_0230,
        "2025-03-29T00:00",
        "skip",
        "2025-03-29T00:00Z",
        [
            ("2025-03-29T01:30Z", "2025-03-29T02:30+01:00"),
            ("2025-03-31T00:30Z", "2025-03-31T02:30+02:00"),
            ("2025-04-01T00:30Z", "2025-04-01T02:30+02:00"),
        ],
    ),
    # Europe/Berlin 2025-10-26: 03:00 CEST(+2) -> 02:00 CET(+1) at 01:00Z; 02:30 twice:
    # first 02:30+02 = 00:30Z, later 02:30+01 = 01:30Z.
    (
        "berlin-overlap-first",
        "Europe/Berlin",
        DAILY_0230,
        "2025-10-25T00:00",
        "first",
        "2025-10-25T12:00Z",
        [
            ("2025-10-26T00:30Z", "2025-10-26T02:30+02:00"),
            ("2025-10-27T01:30Z", "2025-10-27T02:30+01:00"),
        ],
    ),
    (
        "berlin-overlap-later",
        "Europe/Berlin",
        DAILY_0230,
        "2025-10-25T00:00",
        "later",
        "2025-10-25T12:00Z",
        [
            ("2025-10-26T01:30Z", "2025-10-26T02:30+01:00"),
            ("2025-10-27T01:30Z", "2025-10-27T02:30+01:00"),
        ],
    ),
    # Australia/Sydney (southern hemisphere: clocks go forward in October, back in April).
    # 2025-10-05: 02:00 AEST(+10) -> 03:00 AEDT(+11) at Oct 4 16:00Z; 02:30 -> 03:30+11
    # = Oct 4 16:30Z. Oct 4 02:30+10 = Oct 3 16:30Z; Oct 6 02:30+11 = Oct 5 15:30Z.
    (
        "sydney-gap-shift",
        "Australia/Sydney",
        DAILY_0230,
        "2025-10-04T00:00",
        "shift",
        "2025-10-03T00:00Z",
        [
            ("2025-10-03T16:30Z", "2025-10-04T02:30+10:00"),
            ("2025-10-04T16:30Z", "2025-10-05T03:30+11:00"),
            ("2025-10-05T15:30Z", "2025-10-06T02:30+11:00"),
        ],
    ),
    (
        "sydney-gap-skip",
        "Australia/Sydney",
        DAILY_0230,
        "2025-10-04T00:00",
        "skip",
        "2025-10-03T00:00Z",
        [
            ("2025-10-03T16:30Z", "2025-10-04T02:30+10:00"),
            ("2025-10-05T15:30Z", "2025-10-06T02:30+11:00"),
        ],
    ),
    # 2025-04-06: 03:00 AEDT(+11) -> 02:00 AEST(+10) at Apr 5 16:00Z; 02:30 twice:
    # first 02:30+11 = Apr 5 15:30Z, later 02:30+10 = Apr 5 16:30Z.
    (
        "sydney-overlap-first",
        "Australia/Sydney",
        DAILY_0230,
        "2025-04-05T00:00",
        "first",
        "2025-04-05T00:00Z",
        [
            ("2025-04-05T15:30Z", "2025-04-06T02:30+11:00"),
            ("2025-04-06T16:30Z", "2025-04-07T02:30+10:00"),
        ],
    ),
    (
        "sydney-overlap-later",
        "Australia/Sydney",
        DAILY_0230,
        "2025-04-05T00:00",
        "later",
        "2025-04-05T00:00Z",
        [
            ("2025-04-05T16:30Z", "2025-04-06T02:30+10:00"),
            ("2025-04-06T16:30Z", "2025-04-07T02:30+10:00"),
        ],
    ),
    # Australia/Lord_Howe has a 30-minute DST. 2025-10-05: 02:00 (+10:30) -> 02:30 (+11) at
    # Oct 4 15:30Z; 02:15 is in the gap and shifts by 30 min to 02:45+11 = Oct 4 15:45Z.
    # Oct 4 02:15+10:30 = Oct 3 15:45Z; Oct 6 02:15+11 = Oct 5 15:15Z.
    (
        "lord_howe-gap-shift",
        "Australia/Lord_Howe",
        "FREQ=DAILY;BYHOUR=2;BYMINUTE=15",
        "2025-10-04T00:00",
        "shift",
        "2025-10-03T00:00Z",
        [
            ("2025-10-03T15:45Z", "2025-10-04T02:15+10:30"),
            ("2025-10-04T15:45Z", "2025-10-05T02:45+11:00"),
            ("2025-10-05T15:15Z", "2025-10-06T02:15+11:00"),
        ],
    ),
    (
        "lord_howe-gap-skip",
        "Australia/Lord_Howe",
        "FREQ=DAILY;BYHOUR=2;BYMINUTE=15",
        "2025-10-04T00:00",
        "skip",
        "2025-10-03T00:00Z",
        [
            ("2025-10-03T15:45Z", "2025-10-04T02:15+10:30"),
            ("2025-10-05T15:15Z", "2025-10-06T02:15+11:00"),
        ],
    ),
    # 2025-04-06: 02:00 (+11) -> 01:30 (+10:30) at Apr 5 15:00Z; 01:45 twice:
    # first 01:45+11 = Apr 5 14:45Z, later 01:45+10:30 = Apr 5 15:15Z.
    (
        "lord_howe-overlap-first",
        "Australia/Lord_Howe",
        "FREQ=DAILY;BYHOUR=1;BYMINUTE=45",
        "2025-04-06T00:00",
        "first",
        "2025-04-05T00:00Z",
        [
            ("2025-04-05T14:45Z", "2025-04-06T01:45+11:00"),
            ("2025-04-06T15:15Z", "2025-04-07T01:45+10:30"),
        ],
    ),
    (
        "lord_howe-overlap-later",
        "Australia/Lord_Howe",
        "FREQ=DAILY;BYHOUR=1;BYMINUTE=45",
        "2025-04-06T00:00",
        "later",
        "2025-04-05T00:00Z",
        [
            ("2025-04-05T15:15Z", "2025-04-06T01:45+10:30"),
            ("2025-04-06T15:15Z", "2025-04-07T01:45+10:30"),
        ],
    ),
    # America/Santiago changes at local midnight. 2025-09-07: 00:00 (-4) -> 01:00 (-3) at
    # 04:00Z; 00:30 -> 01:30-03 = 04:30Z. Sep 6 00:30-04 = 04:30Z; Sep 8 00:30-03 = 03:30Z.
    (
        "santiago-gap-shift",
        "America/Santiago",
        "FREQ=DAILY;BYHOUR=0;BYMINUTE=30",
        "2025-09-06T00:00",
        "shift",
        "2025-09-06T00:00Z",
        [
            ("2025-09-06T04:30Z", "2025-09-06T00:30-04:00"),
            ("2025-09-07T04:30Z", "2025-09-07T01:30-03:00"),
            ("2025-09-08T03:30Z", "2025-09-08T00:30-03:00"),
        ],
    ),
    (
        "santiago-gap-skip",
        "America/Santiago",
        "FREQ=DAILY;BYHOUR=0;BYMINUTE=30",
        "2025-09-06T00:00",
        "skip",
        "2025-09-06T00:00Z",
        [
            ("2025-09-06T04:30Z", "2025-09-06T00:30-04:00"),
            ("2025-09-08T03:30Z", "2025-09-08T00:30-03:00"),
        ],
    ),
    # 2025-04-05 24:00 (-3) -> 23:00 (-4) at Apr 6 03:00Z; Apr 5 23:30 happens twice:
    # first 23:30-03 = Apr 6 02:30Z, later 23:30-04 = Apr 6 03:30Z.
    (
        "santiago-overlap-first",
        "America/Santiago",
        "FREQ=DAILY;BYHOUR=23;BYMINUTE=30",
        "2025-04-05T00:00",
        "first",
        "2025-04-05T00:00Z",
        [
            ("2025-04-06T02:30Z", "2025-04-05T23:30-03:00"),
            ("2025-04-07T03:30Z", "2025-04-06T23:30-04:00"),
        ],
    ),
    (
        "santiago-overlap-later",
        "America/Santiago",
        "FREQ=DAILY;BYHOUR=23;BYMINUTE=30",
        "2025-04-05T00:00",
        "later",
        "2025-04-05T00:00Z",
        [
            ("2025-04-06T03:30Z", "2025-04-05T23:30-04:00"),
            ("2025-04-07T03:30Z", "2025-04-06T23:30-04:00"),
        ],
    ),
    # America/Sao_Paulo, whose rules changed: Brazil abolished DST in 2019. Last gap
    # 2018-11-04 00:00 (-3) -> 01:00 (-2) at 03:00Z: 00:30 -> 01:30-02 = 03:30Z.
    (
        "sao_paulo-gap-shift",
        "America/Sao_Paulo",
        "FREQ=DAILY;BYHOUR=0;BYMINUTE=30",
        "2018-11-04T00:00",
        "shift",
        "2018-11-01T00:00Z",
        [("2018-11-04T03:30Z", "2018-11-04T01:30-02:00")],
    ),
    # With skip the 4th is lost; the 5th is 00:30-02 = Nov 5 02:30Z.
    (
        "sao_paulo-gap-skip",
        "America/Sao_Paulo",
        "FREQ=DAILY;BYHOUR=0;BYMINUTE=30",
        "2018-11-04T00:00",
        "skip",
        "2018-11-01T00:00Z",
        [("2018-11-05T02:30Z", "2018-11-05T00:30-02:00")],
    ),
    # Last overlap: 2019-02-16 24:00 (-2) -> 23:00 (-3) at Feb 17 02:00Z; Feb 16 23:30 twice:
    # first 23:30-02 = Feb 17 01:30Z, later 23:30-03 = Feb 17 02:30Z.
    (
        "sao_paulo-overlap-first",
        "America/Sao_Paulo",
        "FREQ=DAILY;BYHOUR=23;BYMINUTE=30",
        "2019-02-16T00:00",
        "first",
        "2019-02-16T00:00Z",
        [("2019-02-17T01:30Z", "2019-02-16T23:30-02:00")],
    ),
    (
        "sao_paulo-overlap-later",
        "America/Sao_Paulo",
        "FREQ=DAILY;BYHOUR=23;BYMINUTE=30",
        "2019-02-16T00:00",
        "later",
        "2019-02-16T00:00Z",
        [("2019-02-17T02:30Z", "2019-02-16T23:30-03:00")],
    ),
    # After abolition the old change date is ordinary: 2019-11-03 00:30 exists once, -03 =
    # 03:30Z (the pre-2019 rules would have made it a gap).
    (
        "sao_paulo-after-abolition",
        "America/Sao_Paulo",
        "FREQ=DAILY;BYHOUR=0;BYMINUTE=30",
        "2019-11-03T00:00",
        "skip",
        "2019-11-01T00:00Z",
        [("2019-11-03T03:30Z", "2019-11-03T00:30-03:00")],
    ),
    # Europe/Moscow: permanent "summer" time from 2011-03-27 02:00 (+3) -> 03:00 (+4) at
    # Mar 26 23:00Z, then back 2014-10-26 02:00 (+4) -> 01:00 (+3) at Oct 25 22:00Z.
    # 02:30 on 2011-03-27 -> 03:30+04 = Mar 26 23:30Z.
    (
        "moscow-2011-gap-shift",
        "Europe/Moscow",
        DAILY_0230,
        "2011-03-27T00:00",
        "shift",
        "2011-03-26T00:00Z",
        [("2011-03-26T23:30Z", "2011-03-27T03:30+04:00")],
    ),
    (
        "moscow-2011-gap-skip",
        "Europe/Moscow",
        DAILY_0230,
        "2011-03-27T00:00",
        "skip",
        "2011-03-26T00:00Z",
        [("2011-03-27T22:30Z", "2011-03-28T02:30+04:00")],
    ),
    # 2014-10-26 01:30 twice: first 01:30+04 = Oct 25 21:30Z, later 01:30+03 = Oct 25 22:30Z.
    (
        "moscow-2014-overlap-first",
        "Europe/Moscow",
        DAILY_0130,
        "2014-10-26T00:00",
        "first",
        "2014-10-25T00:00Z",
        [("2014-10-25T21:30Z", "2014-10-26T01:30+04:00")],
    ),
    (
        "moscow-2014-overlap-later",
        "Europe/Moscow",
        DAILY_0130,
        "2014-10-26T00:00",
        "later",
        "2014-10-25T00:00Z",
        [("2014-10-25T22:30Z", "2014-10-26T01:30+03:00")],
    ),
    # No autumn change in 2011 any more: 2011-10-30 01:30 is single, +04 = Oct 29 21:30Z.
    (
        "moscow-2011-no-overlap",
        "Europe/Moscow",
        DAILY_0130,
        "2011-10-30T00:00",
        "later",
        "2011-10-29T00:00Z",
        [("2011-10-29T21:30Z", "2011-10-30T01:30+04:00")],
    ),
    # Antarctica/Troll has a 2-hour DST: 2025-03-30 01:00 (+0) -> 03:00 (+2) at 01:00Z.
    # 01:30 shifts by two hours to 03:30+02 = 01:30Z.
    (
        "troll-two-hour-gap-shift",
        "Antarctica/Troll",
        DAILY_0130,
        "2025-03-30T00:00",
        "shift",
        "2025-03-29T00:00Z",
        [("2025-03-30T01:30Z", "2025-03-30T03:30+02:00")],
    ),
    # 2025-10-26 03:00 (+2) -> 01:00 (+0) at 01:00Z; 01:30 twice: +02 = Oct 25 23:30Z, +00 = 01:30Z.
    (
        "troll-two-hour-overlap-later",
        "Antarctica/Troll",
        DAILY_0130,
        "2025-10-26T00:00",
        "later",
        "2025-10-25T00:00Z",
        [("2025-10-26T01:30Z", "2025-10-26T01:30+00:00")],
    ),
    (
        "troll-two-hour-overlap-first",
        "Antarctica/Troll",
        DAILY_0130,
        "2025-10-26T00:00",
        "first",
        "2025-10-25T00:00Z",
        [("2025-10-25T23:30Z", "2025-10-26T01:30+02:00")],
    ),
]


@pytest.mark.parametrize(
    ("zone_name", "rule", "start", "policy", "after", "expected"),
    [case[1:] for case in DST_CASES],
    ids=[case[0] for case in DST_CASES],
)
def test_dst_policies(
    zone_name: str,
    rule: str,
    start: str,
    policy: str,
    after: str,
    expected: list[tuple[str, str]],
) -> None:
    options = {"gap": policy} if policy in ("shift", "skip") else {"overlap": policy}
    rec = Recurrence.parse(rule, zone_name, start, **options)
    assert pairs(rec.occurrences_after(instant(after), len(expected))) == expected


def test_kolkata_has_no_dst_and_a_half_hour_offset() -> None:
    # +05:30 all year: 09:00 local is 03:30Z in January and in July alike.
    got = expand("FREQ=MONTHLY;BYMONTHDAY=1;BYHOUR=9", "Asia/Kolkata", "2025-01-01T00:00",
                 "2025-01-01T00:00Z", 7)  # fmt: skip
    assert [utc for utc, _ in got] == [f"2025-{m:02d}-01T03:30Z" for m in range(1, 8)]
    assert {local[-6:] for _, local in got} == {"+05:30"}


def test_nuuk_phantom_overlap_is_not_an_overlap() -> None:
    # America/Nuuk kept -02 through 2023-10-29 01:00Z, where its explicit transitions end and
    # the rule for later years (-02 with EU summer time, -01) takes over without an offset
    # change. zoneinfo nevertheless reads 2023-10-28 23:15 with fold=0 as -01 (00:15Z), an
    # instant whose wall time is 22:15. Only 23:15-02 = Oct 29 01:15Z really shows 23:15, so
    # both overlap policies give that one instant.
    naive_reading = datetime(2023, 10, 28, 23, 15, tzinfo=zone("America/Nuuk"))
    assert naive_reading.astimezone(UTC) == instant("2023-10-29T00:15Z")  # the trap
    for overlap in ("first", "later"):
        got = expand(
            "FREQ=DAILY;BYHOUR=23;BYMINUTE=15",
            "America/Nuuk",
            "2023-10-27T00:00",
            "2023-10-28T12:00Z",
            2,
            overlap=overlap,
        )
        assert [utc for utc, _ in got] == ["2023-10-29T01:15Z", "2023-10-30T01:15Z"]
        assert got[0][1] == "2023-10-28T23:15-02:00"


# -- local calendar, not 24-hour arithmetic ---------------------------------------------------


def test_weekly_monday_berlin_keeps_0900_local_across_both_changes() -> None:
    # CET (+1) until 2025-03-30, CEST (+2) until 2025-10-26: 09:00 local is 08:00Z, then 07:00Z,
    # then 08:00Z again. Adding 7 x 24 h would have drifted to 10:00 or 08:00 local.
    rec = Recurrence.parse(
        "FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0", "Europe/Berlin", "2025-03-17T09:00"
    )
    spring = pairs(rec.occurrences_after(instant("2025-03-20T00:00Z"), 2))
    assert spring == [
        ("2025-03-24T08:00Z", "2025-03-24T09:00+01:00"),
        ("2025-03-31T07:00Z", "2025-03-31T09:00+02:00"),
    ]
    autumn = pairs(rec.occurrences_after(instant("2025-10-15T00:00Z"), 2))
    assert autumn == [
        ("2025-10-20T07:00Z", "2025-10-20T09:00+02:00"),
        ("2025-10-27T08:00Z", "2025-10-27T09:00+01:00"),
    ]
    whole_year = rec.occurrences_after(instant("2025-03-01T00:00Z"), 52)
    assert {(o.local.hour, o.local.minute, o.local.weekday()) for o in whole_year} == {(9, 0, 0)}
    assert {o.utc.hour for o in whole_year} == {7, 8}


def test_leap_day_only_in_leap_years() -> None:
    # 2100 is not a leap year, so 2096 is followed by 2104. 09:00 CET = 08:00Z.
    rec = Recurrence.parse(
        "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29;BYHOUR=9;BYMINUTE=0",
        "Europe/Berlin",
        "2023-01-01T00:00",
    )
    assert [o.utc for o in rec.occurrences_after(instant("2023-01-01T00:00Z"), 3)] == [
        instant("2024-02-29T08:00Z"),
        instant("2028-02-29T08:00Z"),
        instant("2032-02-29T08:00Z"),
    ]
    far = rec.occurrences_after(instant("2090-01-01T00:00Z"), 2)
    assert [o.local.date().isoformat() for o in far] == ["2092-02-29", "2096-02-29"]
    assert rec.next_after(instant("2096-03-01T00:00Z")) == Occurrence(
        utc=instant("2104-02-29T08:00Z"),
        local=instant("2104-02-29T08:00Z").astimezone(zone("Europe/Berlin")),
    )


def test_last_friday_of_each_month() -> None:
    # 2025: Jan 31, Feb 28, Mar 28 (Mar 31 is a Monday), Apr 25. 17:00 EST = 22:00Z until the
    # 2025-03-09 change, 17:00 EDT = 21:00Z after.
    got = expand(
        "FREQ=MONTHLY;BYDAY=-1FR;BYHOUR=17;BYMINUTE=0",
        "America/New_York",
        "2025-01-01T00:00",
        "2025-01-01T00:00Z",
        4,
    )
    assert got == [
        ("2025-01-31T22:00Z", "2025-01-31T17:00-05:00"),
        ("2025-02-28T22:00Z", "2025-02-28T17:00-05:00"),
        ("2025-03-28T21:00Z", "2025-03-28T17:00-04:00"),
        ("2025-04-25T21:00Z", "2025-04-25T17:00-04:00"),
    ]


def test_bysetpos_last_weekday_of_month() -> None:
    # Last Mon-Fri of each month, 09:00 London. 2025: Jan 31 Fri, Feb 28 Fri, Mar 31 Mon,
    # Apr 30 Wed, May 30 Fri (31st is a Saturday). GMT until 2025-03-30, BST after.
    got = expand(
        "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;BYHOUR=9;BYMINUTE=0",
        "Europe/London",
        "2025-01-01T00:00",
        "2025-01-01T00:00Z",
        5,
    )
    assert got == [
        ("2025-01-31T09:00Z", "2025-01-31T09:00+00:00"),
        ("2025-02-28T09:00Z", "2025-02-28T09:00+00:00"),
        ("2025-03-31T08:00Z", "2025-03-31T09:00+01:00"),
        ("2025-04-30T08:00Z", "2025-04-30T09:00+01:00"),
        ("2025-05-30T08:00Z", "2025-05-30T09:00+01:00"),
    ]


def test_byday_mixing_plain_and_ordinal_days_is_a_union() -> None:
    # Every Monday plus the last Friday: January 2025 has Mondays 6, 13, 20, 27 and Friday 31.
    got = expand(
        "FREQ=MONTHLY;BYDAY=MO,-1FR;BYHOUR=12;BYMINUTE=0",
        "Asia/Kolkata",
        "2025-01-01T00:00",
        "2025-01-01T00:00Z",
        6,
    )
    assert [local[:10] for _, local in got] == [
        "2025-01-06",
        "2025-01-13",
        "2025-01-20",
        "2025-01-27",
        "2025-01-31",
        "2025-02-03",
    ]


def test_defaults_come_from_local_start() -> None:
    # No BYHOUR/BYMINUTE/BYMONTHDAY: the 31st at 07:45 local, months without a 31st are
    # skipped (RFC 5545: invalid dates are ignored, never moved). Kolkata 07:45 = 02:15Z.
    got = expand("FREQ=MONTHLY", "Asia/Kolkata", "2025-01-31T07:45", "2025-01-01T00:00Z", 3)
    assert got == [
        ("2025-01-31T02:15Z", "2025-01-31T07:45+05:30"),
        ("2025-03-31T02:15Z", "2025-03-31T07:45+05:30"),
        ("2025-05-31T02:15Z", "2025-05-31T07:45+05:30"),
    ]


def test_interval_alignment_survives_far_queries() -> None:
    # Every third week on Tuesday and Thursday, weeks starting Sunday. A query years later
    # must agree with expanding from the start.
    rec = Recurrence.parse(
        "FREQ=WEEKLY;INTERVAL=3;BYDAY=TU,TH;WKST=SU;BYHOUR=8;BYMINUTE=5",
        "America/New_York",
        "2021-06-02T00:00",
    )
    everything = rec.occurrences_after(instant("2021-01-01T00:00Z"), 1000)
    assert len(everything) == 1000
    for index in (0, 1, 137, 500, 998):
        after = everything[index].utc
        assert rec.occurrences_after(after, 1) == [everything[index + 1]]
        assert rec.occurrences_after(after - timedelta(seconds=1), 1) == [everything[index]]


# -- series ends: COUNT and UNTIL -------------------------------------------------------------


def test_count_ends_the_series() -> None:
    rec = Recurrence.parse("FREQ=DAILY;COUNT=3;BYHOUR=9", "Asia/Kolkata", "2025-01-01T09:00")
    got = rec.occurrences_after(instant("2024-12-31T00:00Z"), 10)
    assert [o.utc for o in got] == [instant(f"2025-01-0{d}T03:30Z") for d in (1, 2, 3)]
    assert rec.next_after(instant("2025-01-03T03:30Z")) is None
    assert rec.next_after(instant("2025-01-03T03:29Z")) == got[-1]


def test_a_skipped_gap_slot_still_uses_its_count_place() -> None:
    # New York 2025-03-09 02:30 does not exist. COUNT=3 covers the slots of Mar 8, 9 and 10:
    # shift gives three occurrences, skip gives two (Mar 9's slot is used up, not replaced).
    shifted = Recurrence.parse(DAILY_0230 + ";COUNT=3", "America/New_York", "2025-03-08T00:00")
    skipped = Recurrence.parse(
        DAILY_0230 + ";COUNT=3", "America/New_York", "2025-03-08T00:00", gap="skip"
    )
    after = instant("2025-03-01T00:00Z")
    assert [o.local.day for o in shifted.occurrences_after(after, 10)] == [8, 9, 10]
    assert [o.local.day for o in skipped.occurrences_after(after, 10)] == [8, 10]


def test_until_utc_is_compared_with_the_instant() -> None:
    # Kolkata 09:00 = 03:30Z. UNTIL=...T040000Z admits Mar 5 (03:30Z <= 04:00Z).
    rec = Recurrence.parse(
        "FREQ=DAILY;BYHOUR=9;BYMINUTE=0;UNTIL=20250305T040000Z", "Asia/Kolkata", "2025-03-01T00:00"
    )
    got = rec.occurrences_after(instant("2025-02-01T00:00Z"), 10)
    assert [o.local.day for o in got] == [1, 2, 3, 4, 5]
    assert rec.next_after(got[-1].utc) is None


def test_until_floating_is_compared_with_the_local_wall_time() -> None:
    # The same digits without Z are local: 09:00 > 04:00, so Mar 5 is excluded.
    rec = Recurrence.parse(
        "FREQ=DAILY;BYHOUR=9;BYMINUTE=0;UNTIL=20250305T040000", "Asia/Kolkata", "2025-03-01T00:00"
    )
    assert [o.local.day for o in rec.occurrences_after(instant("2025-02-01T00:00Z"), 10)] == [
        1,
        2,
        3,
        4,
    ]


def test_until_date_only_includes_that_whole_local_day() -> None:
    rec = Recurrence.parse(
        "FREQ=DAILY;BYHOUR=23;BYMINUTE=59;UNTIL=20250305", "Asia/Kolkata", "2025-03-01T00:00"
    )
    got = rec.occurrences_after(instant("2025-02-01T00:00Z"), 10)
    assert [o.local.isoformat() for o in got][-1] == "2025-03-05T23:59:00+05:30"
    assert len(got) == 5


def test_until_exactly_on_an_occurrence_is_inclusive() -> None:
    # Berlin 09:00 CET = 08:00Z.
    rec = Recurrence.parse(
        "FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;UNTIL=20250310T080000Z", "Europe/Berlin", "2025-03-03T00:00"
    )
    got = rec.occurrences_after(instant("2025-03-01T00:00Z"), 5)
    assert [o.utc for o in got] == [instant("2025-03-03T08:00Z"), instant("2025-03-10T08:00Z")]


# -- collisions and ordering ------------------------------------------------------------------


def test_samoa_skipped_day_merges_into_the_next_and_count_is_consumed() -> None:
    # Pacific/Apia jumped from 2011-12-29 23:59:59 (-10) to 2011-12-31 00:00 (+14): Dec 30
    # never happened (a 24 h gap). Daily 09:00: Dec 29 09:00-10 = 19:00Z; Dec 30 09:00 shifted
    # by 24 h is Dec 31 09:00+14 = Dec 30 19:00Z, the same instant as Dec 31's own slot, so
    # they are one occurrence; Jan 1 09:00+14 = Dec 31 19:00Z.
    expected = [
        ("2011-12-29T19:00Z", "2011-12-29T09:00-10:00"),
        ("2011-12-30T19:00Z", "2011-12-31T09:00+14:00"),
        ("2011-12-31T19:00Z", "2012-01-01T09:00+14:00"),
    ]
    for gap in ("shift", "skip"):
        got = expand(
            "FREQ=DAILY;BYHOUR=9", "Pacific/Apia", "2011-12-29T00:00", "2011-12-28T00:00Z", 3, gap
        )
        assert got == expected
        # COUNT=3 covers the slots of Dec 29, 30 and 31: only two distinct instants remain.
        with_count = expand(
            "FREQ=DAILY;BYHOUR=9;COUNT=3",
            "Pacific/Apia",
            "2011-12-29T00:00",
            "2011-12-28T00:00Z",
            5,
            gap,
        )
        assert with_count == expected[:2]


def test_shifted_slot_landing_on_a_real_slot_is_one_occurrence() -> None:
    # New York 2025-03-09: 02:15 -> 03:15 EDT and 02:45 -> 03:45 EDT coincide with the real
    # 03:15 and 03:45 slots (07:15Z, 07:45Z). Four slots, two occurrences.
    got = expand(
        "FREQ=DAILY;BYHOUR=2,3;BYMINUTE=15,45",
        "America/New_York",
        "2025-03-09T00:00",
        "2025-03-09T00:00Z",
        3,
    )
    assert got == [
        ("2025-03-09T07:15Z", "2025-03-09T03:15-04:00"),
        ("2025-03-09T07:45Z", "2025-03-09T03:45-04:00"),
        ("2025-03-10T06:15Z", "2025-03-10T02:15-04:00"),
    ]


def test_shifted_slot_after_a_later_real_slot_is_reordered_not_dropped() -> None:
    # Troll's 2 h gap (01:00 -> 03:00 at 01:00Z on 2025-03-30). Slots 02:00 and 03:00: 02:00
    # shifts to 04:00+02 = 02:00Z, after the real 03:00+02 = 01:00Z. Both are kept, in instant
    # order. Next day: 02:00+02 = 00:00Z, 03:00+02 = 01:00Z.
    got = expand(
        "FREQ=DAILY;BYHOUR=2,3;BYMINUTE=0",
        "Antarctica/Troll",
        "2025-03-30T00:00",
        "2025-03-29T00:00Z",
        4,
    )
    assert got == [
        ("2025-03-30T01:00Z", "2025-03-30T03:00+02:00"),
        ("2025-03-30T02:00Z", "2025-03-30T04:00+02:00"),
        ("2025-03-31T00:00Z", "2025-03-31T02:00+02:00"),
        ("2025-03-31T01:00Z", "2025-03-31T03:00+02:00"),
    ]


def test_overlap_never_gives_two_occurrences_for_one_wall_time() -> None:
    for overlap in ("first", "later"):
        rec = Recurrence.parse(DAILY_0130, "America/New_York", "2025-11-01T00:00", overlap=overlap)
        got = rec.occurrences_after(instant("2025-11-01T12:00Z"), 2)
        assert [o.local.date().isoformat() for o in got] == ["2025-11-02", "2025-11-03"]


# -- first(), next_after(), preview() ---------------------------------------------------------


def test_first_is_the_first_matching_slot_not_local_start_itself() -> None:
    # local_start is a Wednesday; the rule wants Mondays. 2025-01-06 09:00 CET = 08:00Z.
    rec = Recurrence.parse("FREQ=WEEKLY;BYDAY=MO;BYHOUR=9", "Europe/Berlin", "2025-01-01T10:00")
    first = rec.first()
    assert first is not None
    assert first.utc == instant("2025-01-06T08:00Z")
    assert first.local.isoformat() == "2025-01-06T09:00:00+01:00"
    assert first.local.utcoffset() == timedelta(hours=1)


def test_first_when_local_start_is_in_a_gap() -> None:
    rec = Recurrence.parse("FREQ=DAILY", "America/New_York", "2025-03-09T02:30")
    first = rec.first()
    assert first is not None
    assert pairs([first]) == [("2025-03-09T07:30Z", "2025-03-09T03:30-04:00")]


def test_next_after_is_strictly_after() -> None:
    rec = Recurrence.parse("FREQ=DAILY;BYHOUR=9", "Asia/Kolkata", "2025-01-01T00:00")
    assert rec.next_after(instant("2025-01-01T03:30Z")) == rec.next_after(
        instant("2025-01-01T03:31Z")
    )
    nxt = rec.next_after(instant("2025-01-01T03:30Z"))
    assert nxt is not None and nxt.utc == instant("2025-01-02T03:30Z")
    # An `after` in any zone means the same instant.
    ist = instant("2025-01-01T09:00+05:30")
    assert rec.next_after(ist) == nxt


def test_occurrence_types() -> None:
    rec = Recurrence.parse("FREQ=DAILY;BYHOUR=9", "Europe/Berlin", "2025-01-01T00:00")
    occurrence = rec.occurrences_after(instant("2025-01-01T00:00Z"), 1)[0]
    assert occurrence.utc.tzinfo is UTC
    assert occurrence.local.tzinfo is zone("Europe/Berlin")
    assert occurrence.local.astimezone(UTC) == occurrence.utc


def test_ambiguous_local_reading_keeps_its_fold() -> None:
    # New York 2025-11-02 01:30 "later" is 01:30 EST (fold=1). PEP 495 makes an ambiguous aware
    # time unequal to any instant in another zone, so compare .utc, not .local.
    rec = Recurrence.parse(DAILY_0130, "America/New_York", "2025-11-02T00:00", overlap="later")
    occurrence = rec.occurrences_after(instant("2025-11-01T12:00Z"), 1)[0]
    assert occurrence.local.fold == 1
    assert occurrence.local.utcoffset() == timedelta(hours=-5)
    assert occurrence.local.astimezone(UTC) == occurrence.utc == instant("2025-11-02T06:30Z")
    assert occurrence.local != occurrence.utc


def test_preview_json_shape() -> None:
    rec = Recurrence.parse(
        "FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0", "Europe/Berlin", "2027-03-01T00:00"
    )
    # Berlin changes on 2027-03-28: Monday 22nd is CET (+1), Monday 29th CEST (+2).
    assert preview(rec, instant("2027-03-20T00:00Z"), 2) == [
        {"utc": "2027-03-22T08:00:00Z", "local": "2027-03-22T09:00:00+01:00"},
        {"utc": "2027-03-29T07:00:00Z", "local": "2027-03-29T09:00:00+02:00"},
    ]


def test_recurrences_and_occurrences_copy_and_pickle() -> None:
    rec = Recurrence.parse(DAILY_0130, "America/New_York", "2025-11-01T00:00", overlap="later")
    occurrence = rec.occurrences_after(instant("2025-11-01T12:00Z"), 1)[0]
    for clone in (pickle.loads(pickle.dumps(rec)), copy.deepcopy(rec)):
        assert clone == rec
        assert clone.occurrences_after(instant("2025-11-01T12:00Z"), 1) == [occurrence]
    for twin in (pickle.loads(pickle.dumps(occurrence)), copy.deepcopy(occurrence)):
        assert twin == occurrence
        assert twin.local.fold == 1 and twin.local.tzinfo is zone("America/New_York")
    assert dataclasses.asdict(occurrence)["utc"] == instant("2025-11-02T06:30Z")


def test_parse_normalises_and_accepts_datetime_start() -> None:
    rec = Recurrence.parse(
        "  rrule:freq=weekly;byday=mo ", "Europe/Berlin", datetime(2025, 1, 6, 9), gap="SKIP"
    )
    assert rec.rrule == "FREQ=WEEKLY;BYDAY=MO"
    assert rec.gap == "skip"
    assert rec.overlap == "first"
    assert rec.local_start == datetime(2025, 1, 6, 9)
    assert rec == Recurrence(
        "FREQ=WEEKLY;BYDAY=MO", "Europe/Berlin", datetime(2025, 1, 6, 9), "skip"
    )


def test_limit_zero_and_far_future() -> None:
    rec = Recurrence.parse("FREQ=DAILY;BYHOUR=9", "Asia/Kolkata", "2025-01-01T00:00")
    assert rec.occurrences_after(instant("2025-01-01T00:00Z"), 0) == []
    far = rec.occurrences_after(instant("2900-06-01T00:00Z"), 1)
    assert pairs(far) == [("2900-06-01T03:30Z", "2900-06-01T09:00+05:30")]
    assert rec.occurrences_after(instant("9500-01-01T00:00Z"), 1) == []


def test_query_work_is_bounded_for_dense_rules() -> None:
    minutes = ",".join(str(m) for m in range(60))
    hours = ",".join(str(h) for h in range(24))
    rec = Recurrence.parse(
        f"FREQ=MONTHLY;BYHOUR={hours};BYMINUTE={minutes}", "Europe/Berlin", "2020-01-15T00:00"
    )
    got = rec.occurrences_after(instant("2300-01-30T12:00Z"), MAX_LIMIT)
    assert len(got) == MAX_LIMIT
    assert all(b.utc - a.utc == timedelta(minutes=1) for a, b in itertools.pairwise(got))


# -- invalid input ----------------------------------------------------------------------------

INVALID: list[tuple[dict[str, Any], str]] = [
    ({"tz": "Mars/Olympus_Mons"}, "tz: unknown time zone 'Mars/Olympus_Mons'"),
    ({"tz": "europe/berlin"}, "did you mean 'Europe/Berlin'"),
    ({"tz": "../../etc/passwd"}, "unknown time zone '../../etc/passwd'"),
    ({"tz": ""}, "unknown time zone ''"),
    ({"rrule": ""}, "rrule: must not be empty"),
    ({"rrule": "every monday"}, "rrule: part 'EVERY MONDAY' is not NAME=VALUE"),
    ({"rrule": "BYHOUR=9"}, "FREQ is required"),
    ({"rrule": "FREQ=FORTNIGHTLY"}, "FREQ=FORTNIGHTLY is not one of"),
    ({"rrule": "FREQ=HOURLY"}, "FREQ=HOURLY is not supported"),
    ({"rrule": "FREQ=MINUTELY;INTERVAL=15"}, "FREQ=MINUTELY is not supported"),
    ({"rrule": "FREQ=SECONDLY"}, "FREQ=SECONDLY is not supported"),
    ({"rrule": "FREQ=DAILY;COUNT=3;UNTIL=20250101T000000Z"}, "COUNT and UNTIL"),
    ({"rrule": "DTSTART:20250101T090000\nRRULE:FREQ=DAILY"}, "DTSTART must not appear"),
    ({"rrule": "FREQ=DAILY;DTSTART=20250101T090000"}, "DTSTART must not appear"),
    ({"rrule": "RRULE:FREQ=DAILY\nEXDATE:20250102T090000"}, "single RRULE line"),
    ({"rrule": "EXRULE:FREQ=DAILY"}, "only an RRULE value"),
    ({"rrule": "FREQ=DAILY;BYHOUR=24"}, "BYHOUR=24 has '24'"),
    ({"rrule": "FREQ=DAILY;BYMINUTE=60"}, "BYMINUTE=60"),
    ({"rrule": "FREQ=DAILY;BYHOUR=9,"}, "BYHOUR=9, has ''"),
    ({"rrule": "FREQ=MONTHLY;BYMONTHDAY=0"}, "BYMONTHDAY=0"),
    ({"rrule": "FREQ=MONTHLY;BYMONTHDAY=32"}, "BYMONTHDAY=32"),
    ({"rrule": "FREQ=YEARLY;BYMONTH=13"}, "BYMONTH=13"),
    ({"rrule": "FREQ=DAILY;INTERVAL=0"}, "INTERVAL=0 must be a whole number from 1"),
    ({"rrule": "FREQ=DAILY;COUNT=0"}, "COUNT=0"),
    ({"rrule": "FREQ=DAILY;COUNT=many"}, "COUNT=MANY"),
    ({"rrule": "FREQ=DAILY;UNTIL=2025-03-01"}, "UNTIL=2025-03-01 must be YYYYMMDD"),
    ({"rrule": "FREQ=DAILY;UNTIL=20250231"}, "UNTIL=20250231 is not a valid date"),
    ({"rrule": "FREQ=DAILY;WKST=XX"}, "WKST=XX"),
    ({"rrule": "FREQ=WEEKLY;BYDAY=MONDAY"}, "BYDAY=MONDAY has 'MONDAY'"),
    ({"rrule": "FREQ=WEEKLY;BYDAY=1MO"}, "allowed only with MONTHLY or YEARLY"),
    ({"rrule": "FREQ=MONTHLY;BYDAY=6MO"}, "the ordinal must be 1..5"),
    ({"rrule": "FREQ=WEEKLY;BYMONTHDAY=1"}, "BYMONTHDAY must not be used with FREQ=WEEKLY"),
    ({"rrule": "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30"}, "BYMONTHDAY=30 never occurs in BYMONTH=2"),
    ({"rrule": "FREQ=MONTHLY;BYSETPOS=1"}, "BYSETPOS needs another BY* part"),
    ({"rrule": "FREQ=DAILY;BYHOUR=9;BYSETPOS=2"}, "BYSETPOS=2 never selects anything"),
    ({"rrule": "FREQ=DAILY;BYSECOND=5"}, "BYSECOND is not supported"),
    ({"rrule": "FREQ=YEARLY;BYWEEKNO=20"}, "BYWEEKNO is not supported"),
    ({"rrule": "FREQ=YEARLY;BYYEARDAY=100"}, "BYYEARDAY is not supported"),
    ({"rrule": "FREQ=DAILY;X-NAME=1"}, "unknown part 'X-NAME'"),
    ({"rrule": "FREQ=DAILY;FREQ=WEEKLY"}, "FREQ is given more than once"),
    ({"rrule": "FREQ=DAILY;BYHOUR="}, "BYHOUR has no value"),
    ({"rrule": "FREQ=DAILY;UNTIL=20241231T000000Z"}, "produces no occurrence"),
    ({"rrule": "FREQ=DAILY;INTERVAL=7;BYDAY=TU"}, "produces no occurrence"),
    ({"local_start": "2025-03-01T09:00+01:00"}, "local_start: must be a local wall time without"),
    ({"local_start": "2025-03-01T09:00Z"}, "local_start: must be a local wall time without"),
    ({"local_start": "tomorrow at nine"}, "local_start: not an ISO-8601 local date-time"),
    ({"local_start": "2025-03-01T09:00:00.5"}, "local_start: must be whole seconds"),
    ({"local_start": "1800-01-01T09:00"}, "local_start: year must be"),
    ({"gap": "later"}, "gap: must be 'shift' or 'skip', got 'later'"),
    ({"overlap": "second"}, "overlap: must be 'first' or 'later', got 'second'"),
]


@pytest.mark.parametrize(("change", "message"), INVALID, ids=[message for _, message in INVALID])
def test_invalid_input_names_the_problem(change: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {
        "rrule": "FREQ=DAILY;BYHOUR=9",
        "tz": "Europe/Berlin",
        "local_start": "2025-01-01T00:00",
    }
    arguments.update(change)
    with pytest.raises(InvalidInput) as caught:
        Recurrence.parse(**arguments)
    text = str(caught.value)
    assert message in text
    assert "\n" not in text


def test_constructor_validates_too() -> None:
    with pytest.raises(InvalidInput, match="local_start: must be a local wall time"):
        Recurrence("FREQ=DAILY", "Europe/Berlin", datetime(2025, 1, 1, tzinfo=UTC))
    with pytest.raises(InvalidInput, match="gap: must be"):
        Recurrence("FREQ=DAILY", "Europe/Berlin", datetime(2025, 1, 1), gap="nope")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="tz: unknown time zone"):
        Recurrence("FREQ=DAILY", "Nowhere", datetime(2025, 1, 1))


def test_query_arguments_are_checked() -> None:
    rec = Recurrence.parse("FREQ=DAILY", "Europe/Berlin", "2025-01-01T09:00")
    with pytest.raises(InvalidInput, match="after: must carry a UTC offset"):
        rec.occurrences_after(datetime(2025, 1, 1), 1)
    with pytest.raises(InvalidInput, match="limit: must be a whole number from 0 to 1000"):
        rec.occurrences_after(instant("2025-01-01T00:00Z"), MAX_LIMIT + 1)
    with pytest.raises(InvalidInput, match="limit"):
        rec.occurrences_after(instant("2025-01-01T00:00Z"), -1)
    with pytest.raises(InvalidInput, match="count"):
        preview(rec, instant("2025-01-01T00:00Z"), 5000)


# -- time-zone data ---------------------------------------------------------------------------


def test_zones_come_from_the_tzdata_package() -> None:
    import tzdata  # type: ignore[import-untyped]

    assert tzdata_version() == tzdata.IANA_VERSION
    assert tzdata_package_version() == tzdata.__version__
    berlin = zone("Europe/Berlin")
    assert berlin is zone("Europe/Berlin")
    assert str(berlin) == "Europe/Berlin"
    assert {"America/New_York", "Australia/Lord_Howe", "US/Eastern", "UTC"} <= available_zones()


@pytest.mark.parametrize(
    "name",
    ["", "/etc/localtime", "../zoneinfo/UTC", "Europe/../UTC", "Europe//Berlin", "zone.tab",
     "tzdata.zi", "__init__", "Europe/Berlin\x00", "Europe", "x" * 200],
)  # fmt: skip
def test_zone_rejects_names_that_are_not_zones(name: str) -> None:
    with pytest.raises(InvalidInput, match="unknown time zone"):
        zone(name)
