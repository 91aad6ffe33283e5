"""About the command line itself: ``completion``, ``version``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from reminders.cli.common import STATES_FOR_CLI, _json_flag, emit, terminal_safe

SHELLS = ("bash", "zsh", "fish")


def _states_completion() -> dict[str, str]:
    """How each shell completes a delivery state (``--state`` is checked by the command, not
    by argparse, so its values are given to the shells here)."""
    words = " ".join(STATES_FOR_CLI)
    return {"bash": "_reminders_states", "zsh": f"({words})",
            "fish": f"(printf '%s\\n' {words})"}


# The most the local stack's kinds or tenants are waited for on Tab, in seconds
# (REMINDERS_COMPLETE_SECONDS sets another): the command gives up by itself after it, and
# the shell's `timeout`, where there is one, ends it 3 seconds later (its start-up included).
KNOWN_NAMES_SECONDS = 2
COMPLETE_SECONDS_ENV = "REMINDERS_COMPLETE_SECONDS"
KNOWN = ("kinds", "tenants")


def _known(what: str) -> str:
    bound = f"$(( ${{{COMPLETE_SECONDS_ENV}:-{KNOWN_NAMES_SECONDS}}} + 3 ))"
    return (f"$(if command -v timeout >/dev/null 2>&1; then timeout {bound} "
            f"reminders __complete {what}; else reminders __complete {what}; fi 2>/dev/null)")


def _known_names_seconds() -> float:
    import os

    try:
        seconds = float(os.environ.get(COMPLETE_SECONDS_ENV) or KNOWN_NAMES_SECONDS)
    except ValueError:
        return KNOWN_NAMES_SECONDS
    return seconds if 0 < seconds <= 60 else KNOWN_NAMES_SECONDS


def _known_completion(what: str) -> dict[str, str]:
    """How each shell completes a kind or a tenant: the names the local stack knows, asked
    for on Tab (``reminders __complete kinds``), nothing when no local stack answers."""
    return {"bash": f"_reminders_{what}", "zsh": f"_reminders_{what}",
            "fish": f"(reminders __complete {what} 2>/dev/null)"}


_PREAMBLE = {
    "bash": "_reminders_states() {\n    compgen -W \"" + " ".join(STATES_FOR_CLI)
            + "\" -- \"$1\"\n}\n" + "".join(
                f"_reminders_{what}() {{\n    compgen -W \"{_known(what)}\" -- \"$1\"\n}}\n"
                for what in KNOWN),
    "zsh": "".join(f"_reminders_{what}() {{\n    local -a names\n"
                   f"    names=(${{(f)\"{_known(what)}\"}})\n    compadd -a names\n}}\n"
                   for what in KNOWN),
}


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for ``shell``, generated from the parser by shtab: every command,
    subcommand and option, an option's choices (channels, policies, --as), the states, and
    the kinds and tenants of the local stack when it answers."""
    import shtab

    for action in _walk_actions(parser):
        if action.dest == "state" and action.option_strings:
            action.complete = _states_completion()  # type: ignore[attr-defined]
        elif action.dest == "kind" and action.option_strings:
            action.complete = _known_completion("kinds")  # type: ignore[attr-defined]
        elif action.dest == "tenant" and not action.choices:
            action.complete = _known_completion("tenants")  # type: ignore[attr-defined]
    return shtab.complete(parser, shell=shell, preamble=_PREAMBLE)  # type: ignore[arg-type]


def known_names(what: str) -> list[str]:
    """The kinds or tenants of the local stack (``reminders local up``), for a shell's
    completion: none when no local stack runs or its Postgres does not answer within
    :data:`KNOWN_NAMES_SECONDS` (or ``REMINDERS_COMPLETE_SECONDS``, at most 60). Only the
    local stack is asked: a Tab never reaches another database."""
    import signal

    from reminders import db
    from reminders.local import stack

    class TooSlow(Exception):
        pass

    def give_up(signum: int, frame: object) -> None:
        raise TooSlow

    previous = signal.signal(signal.SIGALRM, give_up)
    signal.setitimer(signal.ITIMER_REAL, _known_names_seconds())
    try:
        running = stack.load()
        if running is None:
            return []
        with db.connect(running.database_url, connect_timeout=1) as conn:
            if what == "kinds":
                return [str(r["name"]) for r in db.fetch_all(conn, "kinds_list")]
            return [str(r["tenant"]) for r in db.fetch_all(conn, "tenant_names",
                                                           {"limit": 1000})]
    except (TooSlow, Exception):  # noqa: BLE001 - a Tab shows nothing rather than an error
        return []
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def cmd_complete(args: argparse.Namespace) -> int:
    """``reminders __complete kinds|tenants``: one name a line; always exit 0 (a shell's
    completion shows nothing rather than an error)."""
    names = known_names(args.what)
    if names:
        print("\n".join(terminal_safe(n) for n in names))
    return 0


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

    p = sub.add_parser("__complete", help="for shell completion: the local stack's kinds or "
                                          "tenants, one a line",
                       description="E.g. `reminders __complete tenants` (what a shell's "
                                   "completion asks on Tab; nothing when no local stack "
                                   "answers within 2 seconds).")
    p.add_argument("what", choices=KNOWN, help="kinds or tenants")
    p.set_defaults(func=cmd_complete)

    p = sub.add_parser("version", help="versions, including the time-zone data",
                       description="E.g. `reminders version --json`.")
    _json_flag(p)
    p.set_defaults(func=cmd_version)
