"""``-o json|jsonl|text`` on every command that prints, with ``--json`` the short form of
``-o json``: JSON as before, JSON Lines one compact value a line (a list's items each on its
own), text as the command prints it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from reminders import cli

PREVIEW = ["preview", "--rrule", "FREQ=DAILY", "--tz", "Europe/Berlin", "--start",
           "2027-03-27T09:00", "--count", "3"]


@pytest.fixture(autouse=True)
def _no_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("REMINDERS_HOME", str(tmp_path / "home"))


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = cli.main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    return code, out, err


def test_every_command_with_json_takes_o(capsys: pytest.CaptureFixture[str]) -> None:
    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        flags = {o for a in parser._actions for o in a.option_strings}
        if "--json" in flags:
            assert {"-o", "--output"} <= flags, path
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, [*path, name])

    walk(cli.build_parser(), [])


def test_o_json_is_what_json_prints(capsys: pytest.CaptureFixture[str]) -> None:
    code, long_form, err = run([*PREVIEW, "-o", "json"], capsys)
    assert (code, err) == (0, "")
    assert run([*PREVIEW, "--json"], capsys)[1] == long_form
    assert [i["local"] for i in json.loads(long_form)] == [
        "2027-03-27T09:00:00+01:00", "2027-03-28T09:00:00+02:00", "2027-03-29T09:00:00+02:00"]


def test_o_jsonl_prints_one_compact_value_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run([*PREVIEW, "-o", "jsonl"], capsys)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert len(lines) == 3 and all(json.loads(line)["utc"] for line in lines)
    code, out, _ = run(["version", "--output", "jsonl"], capsys)
    assert code == 0 and len(out.splitlines()) == 1 and "reminders" in json.loads(out)


def test_o_text_is_the_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["version", "-o", "text"], capsys)
    assert code == 0 and out.startswith("reminders ")


@pytest.mark.parametrize("argv", [["version", "-o", "yaml"], ["version", "--json", "-o", "text"]])
def test_a_bad_or_contradicting_output_is_refused(argv: list[str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(argv, capsys)
    assert (code, out) == (2, "")
    assert err.startswith("reminders: error: ") and len(err.splitlines()) == 1
