"""About the command line itself: ``completion``, ``version``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from reminders.cli.common import _json_flag, emit


def completion_script(parser: argparse.ArgumentParser) -> str:
    """A bash completion for every command, subcommand and option, built from the parser."""
    words: dict[str, list[str]] = {}

    def walk(p: argparse.ArgumentParser, path: str) -> None:
        options = [o for a in p._actions for o in a.option_strings if o.startswith("--")]
        subs: list[str] = []
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    subs.append(name)
                    walk(child, f"{path} {name}".strip())
        words[path] = subs + options

    walk(parser, "")
    cases = "\n".join(f'        "{path}") opts="{" ".join(w)}" ;;' for path, w in words.items())
    return f"""# bash completion for reminders: eval "$(reminders completion bash)"
_reminders() {{
    local cur path w opts
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    path=""
    for w in "${{COMP_WORDS[@]:1:COMP_CWORD-1}}"; do
        case "$w" in -*) ;; *) [[ -n "$path" ]] && path="$path $w" || path="$w" ;; esac
    done
    case "$path" in
{cases}
        *) opts="" ;;
    esac
    COMPREPLY=( $(compgen -W "$opts" -- "$cur") )
}}
complete -F _reminders reminders"""


def cmd_completion(args: argparse.Namespace) -> int:
    print(completion_script(args.root_parser))
    return 0


def cmd_version(args: argparse.Namespace) -> int:
    from reminders import __version__
    from reminders.timezones import tzdata_version

    data = {"reminders": __version__, "tzdata": tzdata_version(),
            "python": sys.version.split()[0]}
    emit(args, data, " ".join(f"{k} {v}" for k, v in data.items()))
    return 0


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("completion", help="shell completion: eval \"$(reminders completion "
                                          "bash)\"",
                       description="E.g. `eval \"$(reminders completion bash)\"` in ~/.bashrc.")
    p.add_argument("shell", choices=["bash"], help="the shell (bash)")
    p.set_defaults(func=cmd_completion)

    p = sub.add_parser("version", help="versions, including the time-zone data",
                       description="E.g. `reminders version --json`.")
    _json_flag(p)
    p.set_defaults(func=cmd_version)
