"""``deliveries show|list|reconcile`` are the nouns; ``show``, ``list`` and ``reconcile`` stay
as their short forms, and ``reminders --help`` lists the commands in a few groups."""

from __future__ import annotations

import argparse

import pytest

from reminders import cli
from reminders.cli.recovery import DELIVERY_ALIASES


def _top_level() -> argparse._SubParsersAction:  # type: ignore[type-arg]
    parser = cli.build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def test_every_command_is_in_one_help_group_or_an_alias() -> None:
    listed = [name for _, names in cli.COMMAND_GROUPS for name in names]
    assert len(listed) == len(set(listed))
    assert sorted([*listed, *DELIVERY_ALIASES, *cli.HIDDEN_COMMANDS]) == sorted(
        _top_level().choices)


def test_the_help_reads_as_groups_with_the_aliases_named(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for heading, names in cli.COMMAND_GROUPS:
        assert f"\n{heading}:\n" in out
        section = out.split(f"\n{heading}:\n", 1)[1].split("\n\n", 1)[0]
        assert [line.split()[0] for line in section.splitlines()
                if not line.startswith("    ")] == list(names)
    assert "`list` is `deliveries list`" in out
    assert "{" not in out.split("\n\n", 1)[0]  # the usage says COMMAND, not every name


@pytest.mark.parametrize("name", DELIVERY_ALIASES)
def test_the_short_form_parses_as_the_noun_does(name: str) -> None:
    tail = {"show": ["k1"], "list": ["--state", "dead", "--limit", "5"],
            "reconcile": ["k1", "--as", "retry", "--reason", "fixed"]}[name]
    parser = cli.build_parser()
    short = vars(parser.parse_args([name, *tail]))
    long = vars(parser.parse_args(["deliveries", name, *tail]))
    assert long.pop("deliveries_action") == name
    assert short == long and short["command"] == name


def test_a_mistyped_noun_or_verb_gets_the_close_one(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, wrong, close in ((["delivries", "list"], "delivries", "deliveries"),
                               (["deliveries", "lst"], "lst", "list")):
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        assert exit_.value.code == 2
        assert capsys.readouterr().err == (f"reminders: error: unknown {wrong!r}; did you mean "
                                           f"{close!r}? (see --help)\n")
