"""The command line's text: durations, tables, and one exit status per kind of failure."""

from __future__ import annotations

from datetime import timedelta

import pytest

from reminders import cli
from reminders.cli_format import duration, render, table
from reminders.errors import Conflict, DatabaseUnavailable, InvalidInput, NotFound


@pytest.mark.parametrize(("value", "text"), [
    (10800.0, "3h"), (4800, "1h20m"), (90, "1m30s"), (0, "0s"), (None, "never"),
    (timedelta(days=30), "30d"), (0.4, "0s"), (86400 + 61, "1d1m1s"), (-300, "-5m"),
])
def test_durations_read_as_people_write_them(value: float | timedelta | None,
                                             text: str) -> None:
    assert duration(value) == text


def laid_out(text: str, *, terminal: bool = True) -> str:
    shown, aside = render(text, terminal=terminal)
    assert aside == []
    return shown


def test_a_table_aligns_wide_characters_and_shows_no_reprs() -> None:
    got = table(["name", "paused", "note"], [("東京", True, None), ("zoë", False, "a\nb")])
    assert laid_out(got).splitlines() == ["NAME  PAUSED  NOTE",
                                          "東京  yes     -",
                                          "zoë   no      a\\nb"]


def test_a_piped_table_is_tab_separated_values_without_a_header() -> None:
    got = table(["name", "paused", "note"], [("東京", True, None), ("a\tb", False, "x y")])
    assert laid_out("before\n" + got + "\nafter", terminal=False).splitlines() == [
        "before", "東京\tyes\t", "a\\tb\tno\tx y", "after"]
    assert laid_out(table(["name"], []), terminal=False) == ""
    assert laid_out(table(["name"], [])) == "NAME"


def test_a_remark_stays_in_a_terminal_and_goes_to_stderr_when_piped() -> None:
    from reminders.cli_format import remark

    text = table(["key"], [("k1",)]) + "\n" + remark("more match: next page with --after x")
    assert render(text, terminal=True) == ("KEY\nk1\nmore match: next page with --after x", [])
    assert render(text, terminal=False) == ("k1", ["more match: next page with --after x"])


def test_a_line_that_only_looks_like_a_table_is_text() -> None:
    for line in ("\x1enot json", '\x1e{"headers": ["a"], "rows": [["x", "y"]]}', "\x1e[]"):
        assert laid_out(line) == line


def test_an_instant_reads_to_the_second_but_a_key_that_holds_one_stays_whole() -> None:
    from reminders.cli_format import cell, to_the_second

    assert to_the_second("2027-03-01T09:00:05.123456Z") == "2027-03-01T09:00:05Z"
    assert to_the_second("2027-03-01T09:00:05.5+01:00") == "2027-03-01T09:00:05+01:00"
    key = "schedule:1:2027-03-01T09:00:05.5Z:bob:email"
    assert cell(key) == key and to_the_second(key) == key
    assert cell("2027-03-01T09:00:05.123456Z") == "2027-03-01T09:00:05Z"


@pytest.mark.parametrize(("exc", "code"), [
    (InvalidInput("x"), 2), (NotFound("x"), 3), (DatabaseUnavailable("x"), 5),
    (Conflict("x", retryable=True), 6), (OverflowError("x"), 2),
    (RuntimeError("x"), 1),
])
def test_each_kind_of_failure_has_its_exit_status(exc: Exception, code: int,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert cli._exit_for(exc) == code
    err = capsys.readouterr().err
    assert err.startswith("reminders: error: ") and err.count("\n") == 1


def test_counts_are_words_not_dicts() -> None:
    assert cli._counts_text({"unknown": 2, "retrying": 1, "dead": 0}) == "2 unknown, 1 retrying"
    assert cli._counts_text({}) == "0"
    assert cli._counts_text(3) == "3"


def test_a_negative_value_is_handed_to_its_flag() -> None:
    assert cli._join_negative_values(["kinds", "set", "x", "--stale-after", "-3h", "--json"]) == [
        "kinds", "set", "x", "--stale-after=-3h", "--json"]
    assert cli._join_negative_values(["list", "--state", "dead"]) == ["list", "--state", "dead"]


def test_every_option_of_every_command_has_help() -> None:
    import argparse

    missing: list[str] = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, f"{path} {name}")
            elif not action.help:
                missing.append(f"{path} {action.option_strings or action.dest}")

    walk(cli.build_parser(), "reminders")
    assert missing == []


def test_the_parser_names_the_bulk_states_the_commands_accept() -> None:
    from reminders import operator

    assert cli.BULK_STATES == operator.BULK_STATES


def test_what_a_terminal_would_act_on_is_shown_as_escapes() -> None:
    from reminders.cli_format import terminal_safe

    raw = "503 \x1b]0;owned\x07\x1b[2J\x9b31m \u202eevil\x7f"
    assert terminal_safe(raw) == "503 \\x1b]0;owned\\x07\\x1b[2J\\x9b31m \\u202eevil\\x7f"
    assert terminal_safe("two\nlines\tand tabs, Łukasz 用户") == "two\nlines\tand tabs, Łukasz 用户"


def test_a_table_shows_instants_without_microseconds_and_durations_short() -> None:
    from datetime import UTC, datetime

    from reminders.cli_format import cell

    at = datetime(2027, 3, 1, 9, 0, 5, 123456, tzinfo=UTC)
    assert cell(at) == "2027-03-01T09:00:05Z"
    assert cell(timedelta(hours=1)) == "1h"
    got = table(["created", "window"], [(at, timedelta(minutes=90))])
    assert laid_out(got).splitlines()[1] == "2027-03-01T09:00:05Z  1h30m"
