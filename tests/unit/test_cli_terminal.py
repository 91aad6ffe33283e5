"""Tables as a person sees them and as a script reads them, through the real entry point: in a
terminal aligned under a header; piped, tab-separated values one row a line without a header
(as ``gh`` prints them); JSON the same either way."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.terminal import run

PREVIEW = ["preview", "--rrule", "FREQ=DAILY;BYHOUR=6", "--tz", "Europe/Berlin", "--start",
           "2027-03-27T06:00", "--count", "2"]
WINDOW = ["--send-window", "Sat,Sun 10:00-14:00"]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items()
               if not k.startswith("REMINDERS_") and k != "DATABASE_URL"},
            "REMINDERS_HOME": str(tmp_path / "home")}


def test_in_a_terminal_a_table_is_aligned_under_a_header(env: dict[str, str]) -> None:
    seen = run([*PREVIEW, *WINDOW], env, stdout_tty=True, stderr_tty=True)
    assert (seen.code, seen.err) == (0, "")
    assert seen.out.splitlines() == [
        "DUE                   LOCAL                      HELD UNTIL            "
        "HELD UNTIL (LOCAL)",
        "2027-03-27T05:00:00Z  2027-03-27T06:00:00+01:00  2027-03-27T09:00:00Z  "
        "2027-03-27T10:00:00+01:00",
        "2027-03-28T04:00:00Z  2027-03-28T06:00:00+02:00  2027-03-28T08:00:00Z  "
        "2027-03-28T10:00:00+02:00"]


def test_piped_a_table_is_tab_separated_values_without_a_header(env: dict[str, str]) -> None:
    seen = run(PREVIEW, env, stdout_tty=False, stderr_tty=True)
    assert (seen.code, seen.err) == (0, "")
    assert seen.out == ("2027-03-27T05:00:00Z\t2027-03-27T06:00:00+01:00\n"
                        "2027-03-28T04:00:00Z\t2027-03-28T06:00:00+02:00\n")
    forced = run(PREVIEW, {**env, "REMINDERS_FORCE_TTY": "1"}, stdout_tty=False,
                 stderr_tty=False)
    assert forced.out.splitlines()[0].split() == ["DUE", "LOCAL"]


def test_an_empty_cell_is_empty_when_piped_and_a_dash_in_a_terminal(
        env: dict[str, str]) -> None:
    argv = [*PREVIEW[:-1], "3", "--send-window", "Sat,Sun 00:00-24:00"]  # Monday is held
    piped = run(argv, env, stdout_tty=False, stderr_tty=False).out.splitlines()
    assert [line.count("\t") for line in piped] == [3, 3, 3]
    assert piped[0].endswith("+01:00\t\t")  # Saturday: not held
    shown = run(argv, env, stdout_tty=True, stderr_tty=False).out.splitlines()
    assert shown[1].split()[2:] == ["-", "-"]


def test_json_is_the_same_in_a_terminal_and_piped(env: dict[str, str]) -> None:
    outs = {run([*PREVIEW, "--json"], env, stdout_tty=tty, stderr_tty=tty).out
            for tty in (True, False)}
    assert len(outs) == 1
    assert [i["utc"] for i in json.loads(outs.pop())] == ["2027-03-27T05:00:00Z",
                                                          "2027-03-28T04:00:00Z"]


def test_a_usage_error_in_a_terminal_is_one_line_on_stderr(env: dict[str, str]) -> None:
    seen = run(["preview", "--count", "x"], env, stdout_tty=True, stderr_tty=True)
    assert (seen.code, seen.out) == (2, "")
    assert len(seen.err.splitlines()) == 1 and seen.err.startswith("reminders: error: ")
