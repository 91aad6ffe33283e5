"""No error is a bug report: every command and subcommand answers ``--help`` and a bad value
with its usage or one line on stderr and a documented exit status, never a traceback nor
"unexpected ...", and hostile input (a payload nested 2,000 deep) is refused in one line."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from reminders import cli

DOCUMENTED = {0, 1, 2, 3, 4, 5, 6, 130}  # the exit status table of docs/cli.md


def _commands() -> list[tuple[list[str], argparse.ArgumentParser]]:
    found: list[tuple[list[str], argparse.ArgumentParser]] = []

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        found.append((path, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, [*path, name])

    walk(cli.build_parser(), [])
    return found


COMMANDS = _commands()
IDS = [" ".join(path) or "reminders" for path, _ in COMMANDS]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse: --help, a usage error
        code = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def _no_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("DATABASE_URL", "REMINDERS_DB_HOST", "REMINDERS_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("REMINDERS_HOME", str(tmp_path / "home"))  # never a running stack


def _bad_value(action: argparse.Action) -> str | None:
    """A value the option's own check refuses, if it has one."""
    if action.choices:
        return "no-such-choice"
    if action.type is not None:
        return "not-a-number"
    return None


@pytest.mark.parametrize(("path", "parser"), COMMANDS, ids=IDS)
def test_every_command_answers_help(path: list[str], parser: argparse.ArgumentParser,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run([*path, "--help"], capsys)
    assert (code, err) == (0, "")
    assert out.startswith("usage: reminders")


@pytest.mark.parametrize(("path", "parser"), COMMANDS, ids=IDS)
def test_every_command_refuses_a_bad_value_in_one_line(
        path: list[str], parser: argparse.ArgumentParser,
        capsys: pytest.CaptureFixture[str]) -> None:
    tried = [[*path, "--no-such-option"]]
    required = [a for a in parser._actions if a.required and a.option_strings]
    filler = [x for a in required for x in (a.option_strings[0], _bad_value(a) or "x")][:2]
    for action in parser._actions:
        bad = _bad_value(action)
        if bad is None or isinstance(action, argparse._SubParsersAction):
            continue
        if action.option_strings:
            tried.append([*path, action.option_strings[-1], bad, *filler])
        else:
            tried.append([*path, bad])
    for argv in tried:
        code, _out, err = _run(argv, capsys)
        assert code == 2, (argv, code, err)
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("reminders: error: "), (argv, err)
        assert "Traceback" not in err and "unexpected" not in err, (argv, err)


def test_a_payload_nested_2000_deep_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    deep = "[" * 2000 + "]" * 2000
    code, _out, err = _run(["schedule", "--tenant", "acme", "--recipient", "bob", "--channel",
                           "email", "--at", "2027-03-01T09:00:00Z", "--payload",
                           f'{{"a": {deep}}}'], capsys)
    assert code == 2, err
    assert err.splitlines() == [err.strip()]
    assert err.startswith("reminders: error: --payload: nested too deeply"), err
