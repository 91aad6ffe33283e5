"""Send-window flags: parsing with errors naming the flag, and preview's moved instants."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from reminders import cli, windows
from reminders.errors import InvalidInput


@pytest.mark.parametrize(("spec", "expected"), [
    ("08:00-21:00", {"days": [1, 2, 3, 4, 5, 6, 7], "start": "08:00", "end": "21:00"}),
    ("Mon-Fri 08:00-18:00", {"days": [1, 2, 3, 4, 5], "start": "08:00", "end": "18:00"}),
    ("Sat,Sun 10:00-14:00", {"days": [6, 7], "start": "10:00", "end": "14:00"}),
    ("Fri-Mon 22:00-06:00", {"days": [1, 5, 6, 7], "start": "22:00", "end": "06:00"}),
    ("8:00-24:00", {"days": [1, 2, 3, 4, 5, 6, 7], "start": "08:00", "end": "24:00"}),
])
def test_windows_parse(spec: str, expected: dict[str, object]) -> None:
    assert windows.parse_window(spec) == expected


@pytest.mark.parametrize(("spec", "words"), [
    ("8-21", "is not a window"), ("24:00-08:00", "is not a time of day"),
    ("Mon-Fry 08:00-09:00", "is not a weekday"), ("09:00-09:00", "opens and closes"),
    ("", "is not a window"),
])
def test_bad_windows_name_the_flag(spec: str, words: str) -> None:
    with pytest.raises(InvalidInput, match=f"^--send-window: .*{words}"):
        windows.parse_window(spec)


def test_a_bad_window_on_the_command_line_exits_2_naming_the_flag(
        capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["preview", "--rrule", "FREQ=DAILY;BYHOUR=6", "--tz", "Europe/Berlin",
                     "--start", "2027-03-27T06:00", "--count", "2", "--send-window", "8-21"])
    assert code == 2
    assert "--send-window: '8-21' is not a window" in capsys.readouterr().err


def test_preview_shows_the_instants_as_the_window_moves_them(
        capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["preview", "--rrule", "FREQ=DAILY;BYHOUR=6;BYMINUTE=0", "--tz",
                     "Europe/Berlin", "--start", "2027-03-27T06:00", "--count", "2",
                     "--send-window", "Sat,Sun 10:00-14:00", "--json"])
    assert code == 0
    items = json.loads(capsys.readouterr().out)
    assert [(i["utc"], i["due_utc"], i["held"]) for i in items] == [
        ("2027-03-27T05:00:00Z", "2027-03-27T09:00:00Z", True),   # 10:00 CET
        ("2027-03-28T04:00:00Z", "2027-03-28T08:00:00Z", True),   # 10:00 CEST
    ]


def test_the_spread_offset_is_stable_and_inside_the_spread() -> None:
    spread = timedelta(minutes=15)
    key = "schedule:7/0:20270315T080000Z:alice:webhook"
    assert windows.spread_offset(key, spread) == windows.spread_offset(key, spread)
    assert timedelta(0) <= windows.spread_offset(key, spread) < spread
    assert windows.spread_offset(key, None) == timedelta(0)


def test_an_instant_inside_a_window_is_not_moved() -> None:
    at = datetime(2027, 3, 29, 7, tzinfo=UTC)  # Mon 09:00 CEST
    assert windows.next_opening(at, "Europe/Berlin", windows.parse_windows(["08:00-21:00"])) == at
