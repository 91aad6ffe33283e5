"""About the command line itself: ``completion``, ``version``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from reminders.cli.common import STATES_FOR_CLI, _json_flag, emit

SHELLS = ("bash", "zsh", "fish")


def _states_completion() -> dict[str, str]:
    """How each shell completes a delivery state (``--state`` is checked by the command, not
    by argparse, so its values are given to the shells here)."""
    words = " ".join(STATES_FOR_CLI)
    return {"bash": "_reminders_states", "zsh": f"({words})",
            "fish": f"(printf '%s\\n' {words})"}


_PREAMBLE = {"bash": "_reminders_states() {\n    compgen -W \"" + " ".join(STATES_FOR_CLI)
             + "\" -- \"$1\"\n}\n"}


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for ``shell``, generated from the parser by shtab: every command,
    subcommand and option, an option's choices (channels, policies, --as), and the states."""
    import shtab

    for action in _walk_actions(parser):
        if action.dest == "state" and action.option_strings:
            action.complete = _states_completion()  # type: ignore[attr-defined]
    return shtab.complete(parser, shell=shell, preamble=_PREAMBLE)  # type: ignore[arg-type]


def _walk_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    found: list[argparse.Action] = []
    for action in parser._actions:
        found.append(action)
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found += _walk_actions(child)
    return found


def cmd_completion(args: argparse.Namespace) -> int:
    print(completion_script(args.root_parser, args.shell))
    return 0


def cmd_version(args: argparse.Namespace) -> int:
    from reminders import __version__
    from reminders.timezones import tzdata_version

    data = {"reminders": __version__, "tzdata": tzdata_version(),
            "python": sys.version.split()[0]}
    emit(args, data, " ".join(f"{k} {v}" for k, v in data.items()))
    return 0


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("completion", help="shell completion for bash, zsh or fish, e.g. "
                                          "eval \"$(reminders completion bash)\"",
                       description="Print the completion script for a shell, generated from "
                                   "the parser. E.g. `eval \"$(reminders completion bash)\"` in "
                                   "~/.bashrc; `reminders completion zsh > "
                                   "\"${fpath[1]}/_reminders\"`; `reminders completion fish > "
                                   "~/.config/fish/completions/reminders.fish`.")
    p.add_argument("shell", choices=SHELLS, help="the shell: bash, zsh or fish")
    p.set_defaults(func=cmd_completion)

    p = sub.add_parser("version", help="versions, including the time-zone data",
                       description="E.g. `reminders version --json`.")
    _json_flag(p)
    p.set_defaults(func=cmd_version)
