"""What every command group shares: the parser class, output, argument types, settings,
connections and the one-line errors."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any, NoReturn

from reminders.errors import InvalidInput
from reminders.reasons import MAX_REASON_LENGTH

Handler = Callable[[argparse.Namespace], int]


STATES_FOR_CLI = ("scheduled", "leased", "retrying", "sent", "failed", "suppressed", "stale",
                  "unknown", "dead")


# operator_commands.BULK_STATES, named here so the parser does not import the database layer.
BULK_STATES = ("unknown", "failed", "dead", "stale", "suppressed")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        suggestion = _did_you_mean(message)
        if suggestion is not None:  # first and alone, as gh and git say it
            wrong, close = suggestion
            sys.stderr.write(f"reminders: error: unknown {wrong!r}; did you mean {close!r}? "
                             "(see --help)\n")
        else:
            sys.stderr.write(f"reminders: error: {message} (see --help)\n")
        raise SystemExit(2)


def _did_you_mean(message: str) -> tuple[str, str] | None:
    """For a mistyped command or choice: (what was typed, the closest valid one), if any is
    close."""
    import difflib

    found = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
    if not found:
        return None
    choices = re.findall(r"'?([\w.-]+)'?", found.group(2))
    close = difflib.get_close_matches(found.group(1), choices, n=1, cutoff=0.6)
    return (found.group(1), close[0]) if close else None


EXIT_STATUSES = (
    "exit status: 0 success; 1 not done within the bounds; 2 bad input or usage; 3 not found; "
    "4 partial failure; 5 the database or AWS unreachable; 6 a conflict, try again.")


def _json_text(data: Any, indent: int | None = 2) -> str:
    """Non-ASCII as itself where stdout takes it, else as JSON's own ``\\u`` escapes (still
    the same JSON, where a stdout replacing what it cannot encode would break it)."""
    text = json.dumps(data, indent=indent, default=str, ensure_ascii=False)
    try:
        text.encode(sys.stdout.encoding or "utf-8")
    except (UnicodeEncodeError, LookupError):
        return json.dumps(data, indent=indent, default=str, ensure_ascii=True)
    return text


def escape_what_stdout_cannot_encode() -> None:
    """On a stdout that takes only ASCII (``PYTHONIOENCODING=ascii``, a C locale), text
    shows what it cannot encode as ``\\xe9``, as stderr always does, rather than failing."""
    import io

    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")


def terminal_safe(text: str) -> str:
    from reminders.cli_format import terminal_safe as safe

    return safe(text)


def emit(args: argparse.Namespace, data: Any, text: str | None = None) -> None:
    """JSON exactly (its escapes are the data's); with ``-o jsonl`` one compact value a line (a
    list's items each on its own); else the text, its tables aligned in a terminal and as
    tab-separated values when piped, with whatever a terminal would act on shown as a visible
    escape."""
    output = getattr(args, "output", None)
    if output == "jsonl":
        for item in data if isinstance(data, list) else [data]:
            print(_json_text(item, indent=None))
    elif getattr(args, "json", False) or text is None:
        print(_json_text(data))
    else:
        print_text(text)


def print_text(text: str) -> None:
    """A command's text on stdout as :func:`reminders.cli_format.render` lays it out; its
    remarks, when piped, on stderr."""
    from reminders.cli_format import render, stdout_is_terminal

    shown, aside = render(text, terminal=stdout_is_terminal())
    print(terminal_safe(shown))
    if aside:
        sys.stdout.flush()
    for line in aside:
        sys.stderr.write(f"reminders: {terminal_safe(line)}\n")


OUTPUTS = ("json", "jsonl", "text")


def settle_output(args: argparse.Namespace) -> str | None:
    """``--json`` is ``-o json``; ``-o json`` and ``-o jsonl`` set ``args.json`` (what the
    commands read). Returns what contradicts, if anything."""
    output = getattr(args, "output", None)
    if getattr(args, "json", False):
        if output == "text":
            return "--json and -o text contradict each other; give one"
        args.output = output or "json"
    elif output in ("json", "jsonl"):
        args.json = True
    return None


_DURATION = re.compile(r"(\d+)\s*([smhdw])")


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str, name: str) -> timedelta | None:
    """``90s``, ``15m``, ``3h``, ``2d``, ``1h30m``, ISO ``PT3H``; ``none`` for no limit."""
    raw = text.strip().lower()
    if raw in ("none", "never", "off"):
        return None
    iso = re.fullmatch(r"p(?:(\d+)d)?(?:t(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?)?", raw)
    if iso and any(iso.groups()):
        d, h, m, s = (int(g or 0) for g in iso.groups())
        seconds = ((d * 24 + h) * 60 + m) * 60 + s
    else:
        parts = _DURATION.findall(raw)
        if not parts or _DURATION.sub("", raw).strip():
            raise InvalidInput(f"{name}: not a duration: {text!r} (try 90s, 15m, 3h, 2d or PT3H)")
        seconds = sum(int(n) * _UNITS[u] for n, u in parts)
    if seconds > 3650 * 86400:
        raise InvalidInput(f"{name}: duration out of range (at most 3650 days): {text!r}")
    return timedelta(seconds=seconds)


def _instant(text: str, flag: str) -> Any:
    """An ISO-8601 instant with an offset, in UTC, refused (not crashed on) when out of range."""
    from reminders.operator_commands import instant

    return instant(text, flag)


def _count(flag: str, low: int = 1, high: int = 10_000) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {value}")
        return value

    parse.__name__ = flag
    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= 86_400:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 86400, got {text}")
    return value


def _plain_text(value: str, flag: str) -> str:
    """One line of text, or InvalidInput naming ``flag`` (``operator_commands.plain_text``)."""
    from reminders.operator_commands import plain_text

    return plain_text(value, flag)


def environment() -> dict[str, str]:
    env = dict(os.environ)
    if env.get("REMINDERS_DB_HOST"):
        return env
    from reminders.local import stack

    given = env.get("DATABASE_URL")
    running = stack.load()
    if given:  # the local stack's own database (as `local up --env` exports it) is the stack
        return ({**running.env(), **env} if running is not None
                and stack.same_database(given, running.database_url) else env)
    if running is None:
        running = _partly_running_stack()
    if running is not None:
        env = {**running.env(), **env}
    return env


_warned_about_stack = False


def _partly_running_stack() -> Any:
    """A recorded local stack with a part that exited: still its settings (Postgres may be
    fine), and one line saying which part is down, rather than "no database configured"."""
    global _warned_about_stack
    from reminders.local import stack

    state = stack.home() / "local.json"
    if not state.exists():
        return None
    try:
        recorded = stack.LocalStack(**json.loads(state.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    dead = [f"{name} (pid {pid})" for name, pid in recorded.pids.items()
            if not stack._alive(pid)]  # the stack's own liveness test
    if dead and not _warned_about_stack:
        _warned_about_stack = True
        sys.stderr.write(f"reminders: warning: the local stack's {', '.join(dead)} "
                         f"{'is' if len(dead) == 1 else 'are'} not running; "
                         "`reminders local up` restarts it\n")
    return recorded


def _settings() -> Any:
    from reminders import config

    return config.load(environment())


def _now() -> Any:
    from reminders.clock import clock_from_env

    return clock_from_env(environment()).now()


def _conn() -> Any:
    from reminders import db

    settings = _settings()
    return db.connect(settings.database_url, prepare=settings.db_prepare,
                      readable_instants=True)


def _aws_environment() -> dict[str, str]:
    env = environment()
    for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                "AWS_DEFAULT_REGION", "AWS_REGION"):
        if key in env:  # boto3 reads these from the process environment
            os.environ.setdefault(key, env[key])
    return env


def _runtime() -> Any:
    from reminders import runtime

    env = _aws_environment()
    rt = runtime.from_env(env)
    _as_function_roles(rt, env)
    return rt


# `tick` and `work` on a moto of this machine other than the local stack's (the drills' own,
# when their functions cannot run on the twin) run each function as its role too.
FUNCTION_ROLES_VARIABLE = "REMINDERS_FUNCTION_ROLES"


def _as_function_roles(rt: Any, env: dict[str, str]) -> None:
    """On the local stack's moto, each function the command runs (scanner, consumer, redrive)
    runs as its own role, granted what the template grants it, as in Lambda; the command's
    own calls stay the administrator's. So too on another moto of this machine with
    REMINDERS_FUNCTION_ROLES=on (roles on its queues, named after the deliveries queue).
    Elsewhere (AWS, another moto), or without the checkout's infra/ to read the grants from,
    the functions run with the command's credentials."""
    from reminders import config
    from reminders.errors import RemindersError
    from reminders.local import roles, stack

    asked = env.get(FUNCTION_ROLES_VARIABLE)
    if asked not in (None, "on"):
        raise RemindersError(f"{FUNCTION_ROLES_VARIABLE}={asked!r}: expected on (or unset)")
    running = stack.load()
    endpoint = env.get("AWS_ENDPOINT_URL", "")
    if running is not None and endpoint == running.endpoint_url:
        prefix: str | None = "local"
    elif asked == "on":
        if not _local_aws(env):
            raise RemindersError(f"{FUNCTION_ROLES_VARIABLE}=on needs AWS_ENDPOINT_URL to be a "
                                 f"moto server of this machine, not {endpoint or '(unset)'}")
        key, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
        if not key or not secret:
            raise RemindersError(f"{FUNCTION_ROLES_VARIABLE}=on needs the moto administrator's "
                                 "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (it makes the "
                                 "roles)")
        from reminders.aws_http import Credentials

        stack.register_administrator(endpoint, Credentials(key, secret))
        prefix = None
    else:
        return
    urls = config.require_queues(rt.settings)
    why = roles.as_their_roles(rt, endpoint, urls, rt.settings.secrets_key_id, prefix=prefix)
    if why is not None and asked == "on":
        sys.stderr.write(f"reminders: the functions run as the command's credentials, not "
                         f"their roles: {why}\n")


def _local_aws(env: dict[str, str]) -> bool:
    """Whether AWS calls go to a server on this machine (moto), not to AWS."""
    from urllib.parse import urlsplit

    endpoint = env.get("AWS_ENDPOINT_URL", "")
    host = urlsplit(endpoint).hostname if endpoint else None
    return host in ("127.0.0.1", "localhost", "::1")


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", choices=OUTPUTS,
                   help="json, jsonl (one compact JSON value a line) or text (default)")
    p.add_argument("--json", action="store_true", help="print JSON (as -o json)")


def _quiet_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress on stderr (shown only in a terminal: never when piped)")


def progress(args: argparse.Namespace, what: str) -> Any:
    """The command's progress line on stderr (:mod:`reminders.cli.progress`)."""
    from reminders.cli.progress import Progress, wanted

    return Progress(what, enabled=wanted(bool(getattr(args, "quiet", False))))


def _reason_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reason", help="why, for the record (with who: REMINDERS_ACTOR or the OS "
                                    "user; with --stack, your IAM identity): one line, at most "
                                    f"{MAX_REASON_LENGTH} characters, e.g. --reason 'INC-1234'")


def _record(conn: Any, args: argparse.Namespace, action: str, obj: str, name: str,
            tenant: str | None) -> None:
    """Record an operator action with who and --reason, in the caller's transaction."""
    from reminders import operator

    operator.record_action(conn, action=action, obj=obj, name=name, tenant=tenant,
                           reason=args.reason, now=_now())


_TENANT_HELP = "only this tenant, e.g. acme (with a key: needed only if several tenants use it)"


_VALUE_LOOKS_NEGATIVE = re.compile(r"^-(\d|\.\d)")


def _join_negative_values(argv: list[str]) -> list[str]:
    """``--stale-after -3h`` and ``--limit -5`` would read as options; join them as
    ``--flag=-3h`` so the flag's own check names what is wrong with the value."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if (arg.startswith("--") and "=" not in arg and arg != "--" and i + 1 < len(argv)
                and _VALUE_LOOKS_NEGATIVE.match(argv[i + 1])):
            out.append(f"{arg}={argv[i + 1]}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def _first_line(exc: BaseException) -> str:
    from reminders.outcome import first_line

    return first_line(exc)


def _fail(code: int, line: str) -> int:
    sys.stderr.write(f"reminders: error: {line}\n")
    return code


def _stdout_gone() -> None:
    """The reader went away (``| head``): stop writing, quietly, without a traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _exit_for(exc: BaseException) -> int:
    """One line on stderr and the exit status for an error; nothing but a line escapes."""
    from reminders.outcome import error_line

    return _fail(*error_line(exc))
