"""The one rule for an operator's reason, on its own: what is kept, and how the rest is refused."""

from __future__ import annotations

import pytest

from reminders.errors import InvalidInput
from reminders.reasons import MAX_REASON_LENGTH, checked_reason


@pytest.mark.parametrize(("given", "kept"), [
    ("INC-7: receiver down", "INC-7: receiver down"),
    ("  endpoint fixed \n", "endpoint fixed"),  # stripped, a trailing newline included
    ("x" * MAX_REASON_LENGTH, "x" * MAX_REASON_LENGTH),
    ("café — Kunde rief an 👍", "café — Kunde rief an 👍"),
])
def test_a_reason_of_one_printable_line_is_kept_stripped(given: str, kept: str) -> None:
    assert checked_reason(given, required=True) == kept
    assert checked_reason(given, required=False) == kept


@pytest.mark.parametrize(("given", "line"), [
    ("a\nb", "--reason: contains a line break: 'a\\nb'"),
    ("a\rb", "--reason: contains a line break: 'a\\rb'"),
    ("a\u2028b", "--reason: contains a line break: 'a\\u2028b'"),
    ("a\tb", "--reason: contains a control character: 'a\\tb'"),
    ("a\x00b", "--reason: contains a control character: 'a\\x00b'"),
    ("a\x7fb", "--reason: contains a control character: 'a\\x7fb'"),
    ("a\x9bb", "--reason: contains a control character: 'a\\x9bb'"),
    ("a\udcffb", "--reason: is not UTF-8 text: 'a\\udcffb'"),
    (" " + "x" * (MAX_REASON_LENGTH + 1), "--reason: longer than 500 characters (501)"),
], ids=["LF", "CR", "U+2028", "tab", "NUL", "DEL", "C1", "surrogate", "over-long"])
def test_a_reason_that_breaks_the_rule_is_refused_naming_the_flag(given: str,
                                                                 line: str) -> None:
    for required in (True, False):
        assert refusal(given, required=required) == line


def refusal(value: str | None, *, required: bool) -> str:
    with pytest.raises(InvalidInput) as refused:
        checked_reason(value, required=required)
    return str(refused.value)


def test_a_missing_or_blank_reason_is_refused_where_required_and_blank_where_optional() -> None:
    for blank in ("", "   "):
        assert refusal(blank, required=True) == "--reason: say what you checked"
        assert refusal(blank, required=False) == (
            "--reason: empty; say why, or leave --reason out")
    assert refusal(None, required=True) == "--reason: say what you checked"
    assert checked_reason(None, required=False) is None
