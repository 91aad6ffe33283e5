"""The ``reminders`` command line: the local stack, the API, operator reads and recovery.

Every command reads its settings from the environment; when ``DATABASE_URL`` is unset and a
local stack runs (``reminders local up``), it points at that stack. ``REMINDERS_NOW`` fixes the
clock. Every failure is one line on stderr and an exit status scripts can rely on (see
``EXIT_STATUSES``): 0 success, 1 not done within bounds, 2 bad input or usage, 3 not found,
4 partial failure, 5 the database or AWS unreachable, 6 a conflict worth retrying.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

from reminders.errors import InvalidInput, NotFound
from reminders.outcome import (
    EXIT_NOT_DONE,
    EXIT_OK,
    EXIT_PARTIAL_FAILURE,
    Outcome,
)
from reminders.reasons import MAX_REASON_LENGTH, checked_reason

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


def _json_text(data: Any) -> str:
    return json.dumps(data, indent=2, default=str, ensure_ascii=False)


def terminal_safe(text: str) -> str:
    from reminders.cli_format import terminal_safe as safe

    return safe(text)


def emit(args: argparse.Namespace, data: Any, text: str | None = None) -> None:
    """JSON exactly (its escapes are the data's), or the text with whatever a terminal would
    act on shown as a visible escape."""
    if getattr(args, "json", False) or text is None:
        print(_json_text(data))
    else:
        print(terminal_safe(text))


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


# ---------------------------------------------------------------- environment


def environment() -> dict[str, str]:
    env = dict(os.environ)
    if not env.get("DATABASE_URL") and not env.get("REMINDERS_DB_HOST"):
        from reminders.local import stack

        running = stack.load()
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
    return db.connect(settings.database_url, prepare=settings.db_prepare)


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


def _as_function_roles(rt: Any, env: dict[str, str]) -> None:
    """On the local stack's moto, each function the command runs (scanner, consumer, redrive)
    runs as its own role, granted what the template grants it, as in Lambda; the command's
    own calls stay the administrator's. Elsewhere (AWS, another moto), or without the
    checkout's infra/ to read the grants from, the functions run with the command's
    credentials."""
    from reminders import config
    from reminders.local import roles, stack

    running = stack.load()
    if running is None or env.get("AWS_ENDPOINT_URL") != running.endpoint_url:
        return
    urls = config.require_queues(rt.settings)
    roles.as_their_roles(rt, running.endpoint_url, urls, rt.settings.secrets_key_id,
                         prefix="local")


# ---------------------------------------------------------------- commands


def cmd_migrate(args: argparse.Namespace) -> int:
    from reminders.db import migrate

    with _conn() as conn:
        applied = migrate.apply(conn, _settings().db_schema)
    emit(args, {"applied": applied}, f"applied migrations: {applied or 'none (up to date)'}")
    return 0


def cmd_local_up(args: argparse.Namespace) -> int:
    from reminders.local import stack

    if args.explain:
        return _explain(args)
    running, restarted = stack.start()
    if args.env:  # for a shell's eval: the receiver's URL and secret as variables
        from shlex import quote

        print("\n".join([*(f"# {line}" for line in restarted.values()),
                         f"export RECEIVER_URL={quote(running.receiver_url)}",
                         f"export RECEIVER_SECRET={quote(running.receiver_secret)}"]))
        return 0
    emit(args, {**running.as_json(), "restarted": list(restarted)}, "\n".join(
        [*restarted.values(), "local stack running:"]) + "\n" + "\n".join(
        f"  {k}={v}" for k, v in running.env().items() if not k.startswith("AWS_") or
        k == "AWS_ENDPOINT_URL") + f"\n  webhook receiver secret: {running.receiver_secret}"
        f"\n  webhook receiver: {running.receiver_url}")
    return 0


def _explain(args: argparse.Namespace) -> int:
    """How each resource type of the synthesized template runs on this machine."""
    from reminders.local.roles import TemplateError, synthesized_template
    from reminders.local.twin import explain

    try:
        template = synthesized_template({})
    except TemplateError as exc:
        print(f"reminders: cannot explain: {exc}", file=sys.stderr)
        return 2
    lines = explain.explain(template)
    emit(args, {"resources": explain.as_json(lines)}, explain.as_text(lines))
    return 0


def cmd_local_down(args: argparse.Namespace) -> int:
    from reminders.local import stack

    found = stack.stop()  # None: no stack was recorded; else what had already ended
    emit(args, {"stopped": found is not None, "not_running": list(found or {})},
         "nothing was running" if found is None else
         "\n".join([*found.values(), "local stack stopped"]))
    return 0


def _local_alarms(rt: Any) -> Any:
    """On a moto server on this machine (the local stack's, or a test's), the template's
    alarms watch the command: its handlers' metrics and invocations, and the queues sampled
    once it ends, evaluated and kept in REMINDERS_HOME for ``reminders status`` and the
    console. Against AWS, or without a template, nothing (CloudWatch has the real ones)."""
    from contextlib import nullcontext
    from urllib.parse import urlsplit

    from reminders import config
    from reminders.local import stack
    from reminders.local.twin import watch

    endpoint = environment().get("AWS_ENDPOINT_URL") or ""
    if urlsplit(endpoint).hostname not in ("127.0.0.1", "localhost", "::1"):
        return nullcontext(None)
    template, _ = watch.watch_template()
    if template is None:
        return nullcontext(None)
    urls = config.require_queues(rt.settings)
    try:
        watching = watch.AlarmWatch.for_local_queues(
            template, rt.clock, endpoint_url=endpoint, sqs=rt.deliveries.client,
            deliveries_url=urls.deliveries, simulated=False)
    except ValueError:  # queues named otherwise than the template's: not the local stack's
        return nullcontext(None)
    rt.metrics = watching.metrics
    return watch.persisted(watching, watch.alarms_path(stack.home()))


def cmd_tick(args: argparse.Namespace) -> int:
    from reminders.local import pipeline

    rt = _runtime()
    with _local_alarms(rt) as observe:
        summary = pipeline.tick(rt, observe=observe)
    emit(args, summary, f"leased {summary['leased']}, published {summary['published']}, "
                        f"released {summary['released']}, "
                        f"reclaimed {_counts_text(summary['reclaimed'])}")
    return 0


WORK_EXIT_STATUSES = (
    "exit status: 0 the queues emptied and no record failed; 1 the queues did not empty within "
    "the bounds; 4 some records failed or an invocation raised (a partial failure: the counts "
    "and the first error go to stderr, and the failed records are retried, dead-lettered or "
    "parked as in Lambda); 2 a bad argument; 5 the database or AWS unreachable.")


def cmd_work(args: argparse.Namespace) -> int:
    from reminders.local import pipeline

    rt = _runtime()
    with _local_alarms(rt) as observe:
        summary = pipeline.work(rt, max_seconds=args.max_seconds, observe=observe)
    emit(args, summary, f"consumer: {_work_counts(summary['consumer'])}; "
                        f"redrive: {_work_counts(summary['redrive'])}; "
                        + ("queues empty" if summary["idle"] else "queues not empty"))
    not_idle = f"the queues did not empty within {args.max_seconds:g}s"
    if summary["failed_records"] or summary["invocation_errors"]:
        tail = "" if summary["idle"] else f"; {not_idle}"
        sys.stderr.write(f"reminders: work: partial failure: {_work_failures(summary)}{tail}\n")
        return EXIT_PARTIAL_FAILURE
    if not summary["idle"]:
        sys.stderr.write(f"reminders: work: {not_idle}\n")
        return EXIT_NOT_DONE
    return 0


def _counts_text(value: Any) -> str:
    """``{"unknown": 2, "retrying": 1}`` as ``2 unknown, 1 retrying``; a number as itself."""
    if isinstance(value, dict):
        parts = [f"{n} {name}" for name, n in value.items() if n]
        return ", ".join(parts) if parts else "0"
    return str(value)


def _work_counts(counts: dict[str, Any]) -> str:
    return (f"{counts['batches']} batches, {counts['records']} records, "
            f"{counts['failures']} failed, {counts['errors']} invocations raised")


def _work_failures(summary: dict[str, Any]) -> str:
    """One line: per function what failed, then the first invocation error, if one raised."""
    parts = [f"{name} {summary[name]['failures']} of {summary[name]['records']} records "
             f"failed, {summary[name]['errors']} invocations raised"
             for name in ("consumer", "redrive")]
    first = next((f"{name}: {summary[name]['first_error']}" for name in ("consumer", "redrive")
                  if summary[name]["first_error"]), None)
    why = f"first error: {first}" if first else "the handlers' log lines above say why"
    return "; ".join([*parts, why])


_BLOCKED_NAMES = ("localhost", "metadata.google.internal", "instance-data",
                  "metadata", "metadata.azure.internal")


def _check_endpoint_url(url: str) -> str:
    """Refused when typed, not at send time: a control character or whitespace anywhere
    (naming the part and the code point), a URL with credentials (never echoed back), a
    scheme other than http(s), and a host that is an address deliveries may not go to
    (private, loopback, link-local, metadata) unless REMINDERS_WEBHOOK_ALLOW allows it. Names
    are resolved at send time, where the same guard applies again."""
    import ipaddress
    from urllib.parse import urlsplit

    from reminders.channels.addresses import (
        ALLOW_ENV,
        check_url_characters,
        parse_allow_list,
        refusal_reason,
    )

    check_url_characters(url, "endpoint URL")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise InvalidInput(f"endpoint URL is not valid: {exc}") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise InvalidInput("endpoint URL must be http(s)://HOST/..., got "
                           f"{parts.scheme or 'no scheme'}://{parts.hostname or ''}")
    if parts.username is not None or parts.password is not None:
        raise InvalidInput("endpoint URL must not carry credentials (user:password@); "
                           "the receiver verifies the webhook signature instead")
    host = parts.hostname.rstrip(".").lower()
    allow = parse_allow_list(environment().get(ALLOW_ENV, ""))
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        if (host in _BLOCKED_NAMES or host.endswith(".localhost")) and not allow:
            raise InvalidInput(f"endpoint host {host} is a local or metadata name; "
                               "deliveries may not go there") from None
        return url
    if not any(address.version == n.version and address in n for n in allow):
        reason = refusal_reason(address)
        if reason is not None:
            metadata = " (a cloud metadata address)" if str(address) in (
                "169.254.169.254", "fd00:ec2::254") else ""
            raise InvalidInput(f"endpoint address {address} is {reason}{metadata}; "
                               f"add it to {ALLOW_ENV} to permit")
    return url


def _secret(args: argparse.Namespace, env: dict[str, str]) -> str:
    given = [flag for flag, value in (("--secret", args.secret),
                                      ("--secret-file", args.secret_file),
                                      ("--secret-env", args.secret_env)) if value]
    if len(given) != 1:
        raise InvalidInput("give the signing secret with one of --secret-file PATH ('-' for "
                           "stdin), --secret-env NAME, or --secret (local stacks only)")
    if args.secret_file:
        try:
            text = (sys.stdin.read() if args.secret_file == "-"
                    else Path(args.secret_file).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"--secret-file: cannot read {args.secret_file!r}: "
                               f"{type(exc).__name__}") from None
        return text.strip()
    if args.secret_env:
        value = os.environ.get(args.secret_env)
        if not value:
            raise InvalidInput(f"--secret-env: {args.secret_env} is not set")
        return value.strip()
    if not _local_aws(env):
        raise InvalidInput("--secret is for local stacks only (the command line is visible to "
                           "other users of the machine): use --secret-file PATH ('-' for "
                           "stdin) or --secret-env NAME")
    return str(args.secret)


def _local_aws(env: dict[str, str]) -> bool:
    """Whether AWS calls go to a server on this machine (moto), not to AWS."""
    from urllib.parse import urlsplit

    endpoint = env.get("AWS_ENDPOINT_URL", "")
    host = urlsplit(endpoint).hostname if endpoint else None
    return host in ("127.0.0.1", "localhost", "::1")


def _secret_box(env: dict[str, str]) -> Any:
    from reminders import aws, config
    from reminders.runtime import secret_box

    return secret_box(config.load(env), aws.runtime_client)


def cmd_endpoints_add(args: argparse.Namespace) -> int:
    from reminders import db, endpoints
    from reminders.channels.signing import validate_secret

    env = _aws_environment()
    secret = _secret(args, env)
    validate_secret(secret)
    url = _check_endpoint_url(args.url)
    if args.tenant:
        _plain_text(args.tenant, "--tenant")
    box = _secret_box(env)
    with _conn() as conn, db.transaction(conn):
        if args.tenant:
            db.execute(conn, "tenant_ensure", {"tenant": args.tenant})
        row = endpoints.register(conn, box, tenant=args.tenant, url=url, secret=secret,
                                 now=_now())
        _record(conn, args, "added", "endpoint", url, args.tenant)
    emit(args, row, f"endpoint registered: {url} (secret encrypted with {box.key_id})")
    return 0


def cmd_endpoints_remove(args: argparse.Namespace) -> int:
    """One endpoint, by URL and tenant (none: the shared one). Deliveries already scheduled
    to a removed URL fail when they come due (no endpoint)."""
    from reminders import db

    params: dict[str, Any] = {"url": args.url, "tenant": args.tenant}
    with _conn() as conn, db.transaction(conn):
        row = db.fetch_one(conn, "endpoint_remove", params)
        if row is not None:
            _record(conn, args, "removed", "endpoint", args.url, args.tenant)
    if row is None:
        whose = f"tenant {args.tenant}" if args.tenant else "every tenant (no --tenant)"
        raise NotFound(f"no endpoint {args.url} registered for {whose}")
    emit(args, {**row, "action": args.action}, f"endpoint removed: {args.url}")
    return 0


def cmd_endpoints_rotate(args: argparse.Namespace) -> int:
    """A new secret, sent beside the old one for --overlap (default 24h); or --finish: only
    the new one from now on."""
    from reminders import db, endpoints
    from reminders.clock import iso

    now = _now()
    if args.finish:
        if any((args.secret, args.secret_file, args.secret_env, args.overlap)):
            raise InvalidInput("--finish takes no secret and no --overlap: it ends the "
                               "rotation in progress")
        with _conn() as conn, db.transaction(conn):
            row = endpoints.finish(conn, tenant=args.tenant, url=args.url, now=now)
            _record(conn, args, "finished the secret rotation of", "endpoint", args.url,
                    args.tenant)
        emit(args, {**row, "action": "finish"},
             f"rotation finished: {args.url} signs with the new secret only")
        return 0
    env = _aws_environment()
    secret = _secret(args, env)
    from reminders.channels.signing import validate_secret

    validate_secret(secret)
    text = (args.overlap or DEFAULT_OVERLAP).strip()
    overlap = timedelta(0) if text == "0" else parse_duration(text, "--overlap")
    if overlap is None:
        raise InvalidInput(f"--overlap: give a duration such as 24h, or 0 to replace the "
                           f"secret at once, not {args.overlap!r}")
    box = _secret_box(env)
    with _conn() as conn, db.transaction(conn):
        rotation = endpoints.rotate(conn, box, tenant=args.tenant, url=args.url,
                                    secret=secret, overlap=overlap, now=now)
        _record(conn, args, "rotated the secret of", "endpoint", args.url, args.tenant)
    until = rotation.overlap_until
    emit(args, {**rotation.row, "action": args.action},
         f"secret rotated: {args.url} signs with the old and the new secret until {iso(until)}, "
         "then with the new one only" if until is not None else
         f"secret rotated: {args.url} signs with the new secret only")
    return 0


DEFAULT_OVERLAP = "24h"
ENCRYPT_BATCH = 100
ENCRYPT_MAX_BATCHES = 100


def cmd_endpoints_encrypt(args: argparse.Namespace) -> int:
    """Seal the secrets still stored in plaintext (rows from before migration 0008, or
    written by old code during a deploy), in bounded batches."""
    from reminders import endpoints

    box = _secret_box(_aws_environment())
    with _conn() as conn:
        done = endpoints.encrypt_plaintext(conn, box, batch=args.batch,
                                           max_batches=args.max_batches, now=_now())
    emit(args, done, f"encrypted {done['encrypted']} secrets in {done['batches']} batches; "
                     f"{done['remaining']} still in plaintext")
    return 0 if done["remaining"] == 0 else EXIT_NOT_DONE


def cmd_endpoints_list(args: argparse.Namespace) -> int:
    from reminders import operator
    from reminders.cli_format import table

    with _conn() as conn:
        rows = operator.endpoints(conn, tenant=args.tenant)
    emit(args, rows, table(["id", "tenant", "url", "created"], [
        (r["id"], r["tenant"] or "(any)", r["url"], r["created_at"]) for r in rows])
         if rows else "no endpoints")
    return 0


def cmd_opt_outs_list(args: argparse.Namespace) -> int:
    from reminders import operator
    from reminders.cli_format import table

    with _conn() as conn:
        rows = operator.opt_outs(conn, tenant=args.tenant, channel=args.channel,
                                 recipient=args.recipient, limit=args.limit)
    emit(args, rows, table(["tenant", "recipient", "channel", "since"], [
        (r["tenant"], r["recipient"], r["channel"], r["created_at"]) for r in rows])
         if rows else "no opt-outs")
    return 0


def _kind_json(row: dict[str, Any]) -> dict[str, Any]:
    return {"name": row["name"],
            "stale_after_seconds": row["stale_after"].total_seconds()
            if row["stale_after"] is not None else None,
            "max_attempts": row["max_attempts"], "redrive_budget": row["redrive_budget"],
            "backoff_base_seconds": row["backoff_base"].total_seconds(),
            "backoff_cap_seconds": row["backoff_cap"].total_seconds(),
            "retention_seconds": row["retention"].total_seconds()}


def cmd_kinds_set(args: argparse.Namespace) -> int:
    from reminders import schedules

    stale = (schedules.KEEP if args.stale_after is None
             else parse_duration(args.stale_after, "--stale-after"))
    base = parse_duration(args.backoff_base, "--backoff-base") if args.backoff_base else None
    cap = parse_duration(args.backoff_cap, "--backoff-cap") if args.backoff_cap else None
    keep = parse_duration(args.retention, "--retention") if args.retention else None
    from reminders import db

    with _conn() as conn, db.transaction(conn):
        before = db.fetch_one(conn, "kind_get", {"name": args.name})
        row = schedules.set_kind(conn, name=args.name, now=_now(), stale_after=stale,
                                 max_attempts=args.max_attempts,
                                 redrive_budget=args.redrive_budget, backoff_base=base,
                                 backoff_cap=cap, retention=keep)
        changed = before is None or _kind_json(before) != _kind_json(row)
        if changed:  # a repeat that changes nothing is not an action
            _record(conn, args, "set", "kind", row["name"], None)
    from reminders.cli_format import duration

    data = {**_kind_json(row), "changed": changed}
    emit(args, data, f"kind {row['name']}: stale after "
                     f"{duration(data['stale_after_seconds'])}, max attempts "
                     f"{data['max_attempts']}, redrive budget {data['redrive_budget']}, backoff "
                     f"{duration(data['backoff_base_seconds'])} to "
                     f"{duration(data['backoff_cap_seconds'])}, retention "
                     f"{duration(data['retention_seconds'])}")
    return 0


def cmd_kinds_list(args: argparse.Namespace) -> int:
    from reminders import db
    from reminders.cli_format import duration, table

    with _conn() as conn:
        rows = [_kind_json(r) for r in db.fetch_all(conn, "kinds_list")]
    emit(args, rows, table(
        ["kind", "stale after", "max attempts", "redrive budget", "backoff", "retention"],
        [(r["name"], duration(r["stale_after_seconds"]), r["max_attempts"],
          r["redrive_budget"],
          f"{duration(r['backoff_base_seconds'])}..{duration(r['backoff_cap_seconds'])}",
          duration(r["retention_seconds"])) for r in rows]))
    return 0


_FLAG_FOR_FIELD = {"rrule:": "--rrule:", "tz:": "--tz:", "local_start:": "--start:",
                   "gap:": "--gap:", "overlap:": "--overlap:", "count:": "--count:"}


def _as_flags(exc: InvalidInput) -> InvalidInput:
    """The API names its parameters; the command line names the flags the user typed."""
    text = str(exc)
    for field, flag in _FLAG_FOR_FIELD.items():
        if text.startswith(field):
            return InvalidInput(flag + text[len(field):])
    return exc


def _parse_recurrence(rrule: str, tz: str, start: str, gap: str, overlap: str) -> Any:
    from reminders.recurrence import Recurrence

    try:
        return Recurrence.parse(rrule, tz, start, gap=gap, overlap=overlap)
    except InvalidInput as exc:
        raise _as_flags(exc) from None


def _recurrence(args: argparse.Namespace) -> Any:
    if not (args.rrule or args.tz or args.start):
        if args.gap or args.overlap:
            raise InvalidInput("--gap and --overlap apply to --rrule schedules only")
        return None
    missing = [flag for flag, value in (("--rrule", args.rrule), ("--tz", args.tz),
                                        ("--start", args.start)) if not value]
    if missing:
        raise InvalidInput(f"a recurring schedule needs --rrule, --tz and --start; "
                           f"missing {', '.join(missing)}")
    return _parse_recurrence(args.rrule, args.tz, args.start, args.gap or "shift",
                             args.overlap or "first")


def _recipients(args: argparse.Namespace) -> list[str]:
    from reminders.schedules import validate_recipient_text

    people: list[tuple[str, str]] = []  # (flag, recipient)
    if args.recipient is not None:
        if not args.recipient.strip():
            raise InvalidInput("--recipient: empty; give a recipient such as alice or "
                               "alice@example.com")
        people.append(("--recipient", args.recipient.strip()))
    if args.recipients is not None:
        given = [r.strip() for r in args.recipients.split(",") if r.strip()]
        if not given:
            raise InvalidInput("--recipients: empty; give comma-separated recipients")
        people += [("--recipients", r) for r in given]
    if args.recipients_file:
        path = Path(args.recipients_file)
        if path.is_dir():
            raise InvalidInput(f"--recipients-file: {str(path)!r} is a directory, not a file")
        if not path.exists():
            raise InvalidInput(f"--recipients-file: no such file {str(path)!r}")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"--recipients-file: cannot read {str(path)!r}: {exc}") from None
        for number, line in enumerate(text.splitlines(), start=1):
            item = line.strip()
            if item and not item.startswith("#"):
                people.append((f"--recipients-file line {number}", item))
        if not any(flag.startswith("--recipients-file") for flag, _ in people):
            raise InvalidInput(f"--recipients-file: no recipients in {args.recipients_file!r}")
    if not people:
        raise InvalidInput("give --recipient, --recipients or --recipients-file")
    for flag, person in people:
        try:
            validate_recipient_text(person)
        except InvalidInput as exc:
            raise InvalidInput(f"{flag}: {exc}") from None
    return [person for _, person in people]


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _payload(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        raise InvalidInput(f"--payload is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidInput("--payload must be a JSON object")
    from reminders.schedules import validate_payload

    try:
        validate_payload(value)
    except InvalidInput as exc:
        raise InvalidInput(f"--payload: {exc}") from None
    return value


def _schedule_text(data: dict[str, Any], verb: str) -> str:
    from reminders.cli_format import table

    head = f"schedule {data['schedule_key']} (tenant {data['tenant']}): {verb}"
    deliveries = data["deliveries"]
    if not deliveries:
        return head + "; no delivery pending"
    if isinstance(deliveries, str):
        return f"{head}; {deliveries}"
    return head + "\n" + table(["recipient", "due", "state", "delivery key"], [
        (d["recipient"], d["due_at"], d["state"], d["delivery_key"]) for d in deliveries])


def cmd_schedule(args: argparse.Namespace) -> int:
    from reminders import schedules

    recurrence = _recurrence(args)
    if args.at and recurrence is not None:
        raise InvalidInput("give either --at or --rrule/--tz/--start, not both")
    if not args.at and recurrence is None:
        raise InvalidInput("give --at ISO-8601 (with offset) or --rrule, --tz and --start")
    if args.channel == "webhook" and not args.to:
        raise InvalidInput("--channel webhook needs --to URL (a registered endpoint)")
    at = _instant(args.at, "--at") if args.at else None
    people = _recipients(args)
    payload = _payload(args.payload)
    _plain_text(args.tenant, "--tenant")
    if args.key is not None:
        _plain_text(args.key, "--key")
    now = _now()
    if recurrence is not None:
        from reminders.series import first_due

        if first_due(recurrence, now) is None:
            raise InvalidInput("--rrule: no occurrence at or after now "
                               f"({now.isoformat()}); nothing would ever be delivered")
    with _conn() as conn:
        result = schedules.schedule(
            conn, tenant=args.tenant, recipients=people, channel=args.channel,
            to=args.to, at=at, recurrence=recurrence, kind=args.kind,
            payload=payload, revision=args.revision, key=args.key, now=now)
    data = result.as_json()
    if args.json:
        print(_json_text(data))
        return 0
    if len(result.deliveries) > 20:
        data["deliveries"] = f"{len(result.deliveries)} deliveries"
    print(terminal_safe(_schedule_text(data, "created" if result.created
                                       else "already existed, unchanged")))
    return 0


def _resolve_tenant(conn: Any, key: str, tenant: str | None) -> str:
    from reminders.operator_commands import resolve_tenant

    return resolve_tenant(conn, key, tenant)


def _schedule_key(conn: Any, key: str, tenant: str) -> str:
    from reminders.operator_commands import schedule_key

    return schedule_key(conn, key, tenant)


def _unchanged(current: Any, at: Any, revision: str | None, recurrence: Any) -> bool:
    """Would this reschedule ask for what the schedule already is? Then it changes nothing."""
    if current["state"] == "cancelled":
        return False  # the API refuses it, with its own message
    if at is not None and current["at"] != at:
        return False
    if revision is not None and current["revision"] != revision:
        return False
    if recurrence is None:
        return True
    stored = (current["rrule"], current["tz"], current["local_start"], current["gap_policy"],
              current["overlap_policy"])
    return stored == (recurrence.rrule, recurrence.tz, recurrence.local_start, recurrence.gap,
                      recurrence.overlap)


def cmd_reschedule(args: argparse.Namespace) -> int:
    from reminders import db, schedules

    at = _instant(args.at, "--at") if args.at else None
    recurrence = _recurrence(args)
    if at is None and args.revision is None and recurrence is None:
        raise InvalidInput("reschedule needs --at, --revision, or --rrule/--tz/--start")
    if args.revision is not None:
        _plain_text(args.revision, "--revision")
    with _conn() as conn:
        tenant = _resolve_tenant(conn, args.key, args.tenant)
        key = _schedule_key(conn, args.key, tenant)
        current = db.fetch_one(conn, "schedule_get", {"tenant": tenant, "schedule_key": key})
        if current is not None and _unchanged(current, at, args.revision, recurrence):
            rows = db.fetch_all(conn, "deliveries_of_schedule_generation", {
                "schedule_id": current["id"], "tenant": tenant,
                "generation": current["generation"]})
            result = schedules.ScheduleResult(
                tenant, key, int(current["id"]), False,
                [schedules.DeliveryRef(r["recipient"], r["delivery_key"], r["due_at"],
                                       r["state"]) for r in rows])
            changed = False
        else:
            try:
                result = schedules.reschedule(conn, tenant=tenant, key=key, at=at,
                                              revision=args.revision, recurrence=recurrence,
                                              now=_now())
            except InvalidInput as exc:
                raise _as_flags(exc) from None
            changed = True
    data = {**result.as_json(), "changed": changed}
    emit(args, data, _schedule_text(data, "rescheduled" if changed
                                    else "unchanged (it already says that)"))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    return _operator(args, "cancel")


def cmd_opt(args: argparse.Namespace) -> int:
    from reminders import db, schedules

    _plain_text(args.recipient, "--recipient")
    with _conn() as conn:
        if args.command == "opt-out":
            before = db.fetch_one(conn, "opt_out_get", {
                "tenant": args.tenant, "recipient": args.recipient.strip(),
                "channel": args.channel})
            schedules.opt_out(conn, tenant=args.tenant, recipient=args.recipient,
                              channel=args.channel, now=_now())
            changed = before is None
        else:
            changed = schedules.opt_in(conn, tenant=args.tenant, recipient=args.recipient,
                                       channel=args.channel)
    verb = "opted out of" if args.command == "opt-out" else "opted in to"
    emit(args, {"tenant": args.tenant, "recipient": args.recipient, "channel": args.channel,
                "opted_out": args.command == "opt-out", "changed": changed},
         f"{args.recipient} {verb} {args.channel}" + ("" if changed else " (already)"))
    return 0


def cmd_tenants(args: argparse.Namespace) -> int:
    return _operator(args, f"tenants {args.action}")


def cmd_tenants_list(args: argparse.Namespace) -> int:
    return _operator(args, "tenants list")


def cmd_status(args: argparse.Namespace) -> int:
    if args.watch is None:
        return _status_once(args)
    import time

    shown = 0
    code = 0
    while args.times is None or shown < args.times:
        if shown:
            time.sleep(args.watch)
        if not args.json and sys.stdout.isatty():
            sys.stdout.write("\x1b[H\x1b[2J")
        code = _status_once(args)
        sys.stdout.flush()
        shown += 1
    return code


def _status_once(args: argparse.Namespace) -> int:
    return _operator(args, "status")


def cmd_show(args: argparse.Namespace) -> int:
    return _operator(args, "show")


def cmd_list(args: argparse.Namespace) -> int:
    return _operator(args, "list")


def cmd_reconcile(args: argparse.Namespace) -> int:
    return _operator(args, "reconcile")


# ---------------------------------------------------------------- operator commands


# The commands ``--stack`` runs through the operations function, and the arguments each sends
# (the parser's names; the function refuses any other). ``drill`` is not among them: it starts
# its own Postgres and moto and injects faults (kill -9, Postgres restarts) on one machine.
REMOTE_COMMANDS: dict[str, tuple[str, ...]] = {
    "status": ("tenant",),
    "show": ("key", "tenant"),
    "list": ("state", "attention", "tenant", "kind", "channel", "recipient", "due_from",
             "due_to", "after", "limit", "sort", "schedule"),
    "reconcile": ("key", "tenant", "state", "kind", "channel", "recipient", "due_from",
                  "due_to", "limit", "dry_run", "as", "reason"),
    "cancel": ("key", "tenant", "dry_run", "reason"),
    "tenants pause": ("tenant", "create", "reason"),
    "tenants resume": ("tenant", "create", "reason"),
    "tenants list": (),
}


def _operator(args: argparse.Namespace, command: str) -> int:
    """Run an operator command against the local database, or with ``--stack`` through the
    deployed stack's operations function; print and exit the same way either way."""
    if getattr(args, "stack", None) or getattr(args, "ops_function", None):
        from reminders import ops_client

        arguments = {name: getattr(args, "as_" if name == "as" else name)
                     for name in REMOTE_COMMANDS[command]}
        outcome = ops_client.run_remote(command, arguments, stack=args.stack,
                                        function_name=args.ops_function)
        if command == "status" and isinstance(outcome.data, dict):
            from reminders.operator import alarms_text

            outcome.data["alarms"] = STACK_ALARMS
            if outcome.text:
                outcome.text += "\n" + alarms_text(STACK_ALARMS)
    else:
        outcome = _operator_local(args, command)
    return _print_outcome(args, outcome)


def _operator_local(args: argparse.Namespace, command: str) -> Outcome:
    """The command against the local database; a write is by the current user (REMINDERS_ACTOR
    or the OS user), through the command line."""
    from reminders import operator
    from reminders import operator_commands as commands

    with _conn() as conn:
        if command == "status":
            return commands.status(conn, now=_now(), tenant=args.tenant,
                                   queue_counts=_queue_counts(), alarms=local_alarms)
        if command == "show":
            return commands.show(conn, key=args.key, tenant=args.tenant)
        if command == "list":
            return commands.list_deliveries(
                conn, limit=args.limit, state=args.state, tenant=args.tenant, kind=args.kind,
                channel=args.channel, recipient=args.recipient, due_from=args.due_from,
                due_to=args.due_to, after=args.after, attention=args.attention,
                sort=args.sort, schedule=args.schedule)
        if command == "tenants list":
            return commands.tenants_list(conn)
        if command == "cancel":  # a dry run changes nothing and names no one
            return commands.cancel(conn, now=_now(), key=args.key, tenant=args.tenant,
                                   who=None if args.dry_run else operator.current_user(),
                                   via="cli", reason=args.reason, dry_run=args.dry_run)
        who = operator.current_user()
        if command == "reconcile":
            return commands.reconcile(
                conn, now=_now(), key=args.key, tenant=args.tenant, as_=args.as_,
                reason=args.reason, who=who, via="cli", state=args.state, kind=args.kind,
                channel=args.channel, recipient=args.recipient, due_from=args.due_from,
                due_to=args.due_to, limit=args.limit, dry_run=args.dry_run)
        return commands.tenants_set(conn, now=_now(), tenant=args.tenant,
                                    paused=args.action == "pause", who=who, via="cli",
                                    reason=args.reason, create=args.create)


STACK_ALARMS = {"available": False, "why": (
    "not shown with --stack: the deployed alarms are CloudWatch's (the stack's alarm topic "
    "and dashboard; `aws cloudwatch describe-alarms --state-value ALARM`)")}


def local_alarms() -> dict[str, Any]:
    """The local stack's alarms in ALARM as ``reminders tick``/``work`` last evaluated them
    (REMINDERS_HOME/alarms.json), or why there are none to show."""
    from reminders.local import stack
    from reminders.local.twin import watch

    path = watch.alarms_path(stack.home())
    state = watch.read_state(path)
    if state is None:
        return {"available": False, "why": (
            "not evaluated yet: on the local stack `reminders tick` and `reminders work` "
            f"evaluate the template's alarms and keep them in {path}")}
    return {"available": True, **state}


def _queue_counts() -> Callable[[], dict[str, dict[str, int]]] | None:
    """The transport's view beside the authority's, when queues are configured."""
    settings = _settings()
    if settings.queues is None:
        return None
    urls = settings.queues

    def counts() -> dict[str, dict[str, int]]:
        from reminders import aws
        from reminders.queue import Queue

        _aws_environment()
        sqs = aws.client("sqs")
        return {name: Queue(sqs, url).counts() for name, url in (
            ("deliveries", urls.deliveries), ("dlq", urls.dlq), ("parking", urls.parking))}

    return counts


def _print_outcome(args: argparse.Namespace, outcome: Outcome) -> int:
    emit(args, outcome.data, outcome.text)
    notes = outcome.notes + (outcome.json_notes if getattr(args, "json", False) else [])
    if notes:
        sys.stdout.flush()
    for note in notes:
        sys.stderr.write(f"reminders: {terminal_safe(note)}\n")
    return outcome.code


def cmd_preview(args: argparse.Namespace) -> int:
    from reminders.recurrence import preview

    rec = _parse_recurrence(args.rrule, args.tz, args.start, args.gap, args.overlap)
    after = _instant(args.after, "--after") if args.after else None
    try:
        if after is None:
            first = rec.first()
            items = preview(rec, first.utc - timedelta(seconds=1), args.count) if first else []
        else:
            items = preview(rec, after, args.count)
    except InvalidInput as exc:
        raise _as_flags(exc) from None
    emit(args, items, "\n".join(f"{i['utc']}  {i['local']}" for i in items) or "(no occurrences)")
    return 0


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
    print(completion_script(build_parser()))
    return 0


def cmd_version(args: argparse.Namespace) -> int:
    from reminders import __version__
    from reminders.timezones import tzdata_version

    data = {"reminders": __version__, "tzdata": tzdata_version(),
            "python": sys.version.split()[0]}
    emit(args, data, " ".join(f"{k} {v}" for k, v in data.items()))
    return 0


def cmd_console(args: argparse.Namespace) -> int:
    """The delivery console: a web page on this machine against the database and queues this
    command line is configured for. Its modules load only here (never in a Lambda handler)."""
    from reminders import operator
    from reminders.clock import clock_from_env
    from reminders.console import serve

    serve.require_packages()
    if args.demo:  # the last demo's database at its simulated time, on the local stack
        from reminders.local import demo

        for key, value in demo.console_environment().items():
            if key in ("DATABASE_URL", "REMINDERS_NOW") or key not in os.environ:
                os.environ[key] = value
    settings = _settings()
    _aws_environment()
    clock = clock_from_env(environment())

    def connect() -> Any:
        from reminders import db

        return db.connect(settings.database_url, prepare=settings.db_prepare,
                          application_name="reminders-console")

    serve.run(serve.ConsoleContext(connect=connect, now=clock.now,
                                   queues=lambda: operator.queue_counts(settings),
                                   actor=operator.current_user(), refresh_seconds=args.refresh,
                                   read_timeout_ms=args.statement_timeout * 1000,
                                   alarms=local_alarms),
              host=args.host, port=args.port, extra_hosts=tuple(args.allowed_host),
              behind_proxy=args.behind_proxy)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from reminders.local import demo

    return demo.main(json_output=args.json)


DRILLS = ("consumer-kill", "scanner-kill", "terminate-backends", "postgres-restart",
          "racing-scanners", "consumer-outage", "duplicate-message", "garbage")
_DRILL_EPILOG = """drills:
  consumer-kill       kill -9 of `reminders work` while it waits on a send
  scanner-kill        kill -9 of `reminders tick` once its leases are committed
  terminate-backends  pg_terminate_backend of the service's sessions mid-work
  postgres-restart    Postgres stopped and started again mid-work
  racing-scanners     four scanners start every tick together
  consumer-outage     no consumer for an hour of simulated time, the scanner ticking on
  duplicate-message   copies of lease messages, one taken while its send is in flight, and
                      messages of old leases on the deliveries queue and the dead-letter queue
  garbage             garbage bodies on the deliveries queue and the dead-letter queue

The drills run on a Postgres and a moto server of their own (started in a temporary directory
and removed afterwards; a running `reminders local up` stack is left alone), each drill on its
own database and queues, on a simulated clock.

exit status: 0 when no drill found a violation, 1 when one did, 2 on a bad argument."""


def cmd_drill(args: argparse.Namespace) -> int:
    from reminders.local import drills

    names = list(DRILLS) if args.name == "all" else [args.name]

    def show(result: drills.DrillResult) -> None:
        if not args.json:
            print(drills.text(result) + "\n", flush=True)

    results = drills.run_drills(names, short=args.short, on_result=show)
    found = sum(len(r.violations) for r in results)
    emit(args, {"short": args.short, "violations": found,
                "drills": [r.as_json() for r in results]},
         f"{len(results)} drill(s), {found} violation(s)")
    return 0 if found == 0 else EXIT_NOT_DONE


# ---------------------------------------------------------------- parser


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON")


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


def _recurrence_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rrule", help="RFC 5545 rule, e.g. FREQ=WEEKLY;BYDAY=MO;BYHOUR=9")
    p.add_argument("--tz", help="IANA time zone, e.g. Europe/Berlin")
    p.add_argument("--start", help="local start without offset, e.g. 2027-01-04T09:00")
    p.add_argument("--gap", choices=["shift", "skip"], help="DST gap policy (default shift)")
    p.add_argument("--overlap", choices=["first", "later"],
                   help="DST overlap policy (default first)")


_TENANT_HELP = "only this tenant, e.g. acme (with a key: needed only if several tenants use it)"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="reminders", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="store_true",
                        help="print the versions (as `reminders version`) and exit")
    parser.add_argument("--stack", metavar="NAME",
                        help="run the command in the deployed stack NAME (its operations "
                             "functions, with your AWS credentials: reads through NAME-ops-read, "
                             "writes through NAME-ops-write): status, show, list, reconcile, "
                             "cancel, tenants; e.g. `reminders --stack Reminders status`")
    parser.add_argument("--ops-function", metavar="NAME",
                        help="as --stack, naming the operations functions themselves, NAME-read "
                             "and NAME-write (e.g. Reminders-ops; skips the CloudFormation "
                             "lookup)")
    parser.epilog = EXIT_STATUSES
    sub = parser.add_subparsers(dest="command", required=False, parser_class=_Parser)

    p = sub.add_parser("migrate", help="apply database migrations",
                       description="E.g. `DATABASE_URL=postgresql://... reminders migrate`.")
    _json_flag(p)
    p.set_defaults(func=cmd_migrate)

    local = sub.add_parser("local", help="the one-machine stack",
                           description="E.g. `reminders local up`, then `reminders local down`.")
    local_sub = local.add_subparsers(dest="action", required=True, parser_class=_Parser)
    p = local_sub.add_parser("up", help="start Postgres, moto and the webhook receiver",
                             description="E.g. `eval \"$(reminders local up --env)\"`.")
    p.add_argument("--env", action="store_true",
                   help="print RECEIVER_URL and RECEIVER_SECRET as shell exports, for eval")
    p.add_argument("--explain", action="store_true",
                   help="start nothing; print, per resource type of the synthesized template, "
                        "how it runs here (real, stand-in or not run)")
    _json_flag(p)
    p.set_defaults(func=cmd_local_up)
    p = local_sub.add_parser("down", help="stop them",
                             description="E.g. `reminders local down --json`.")
    _json_flag(p)
    p.set_defaults(func=cmd_local_down)

    p = sub.add_parser("tick", help="one scanner pass",
                       description="E.g. `REMINDERS_NOW=2027-03-01T09:00:00Z reminders tick`.")
    _json_flag(p)
    p.set_defaults(func=cmd_tick)
    p = sub.add_parser("work", help="run the consumer and redrive loops until the queues idle",
                       description="Feed the queues to the consumer and redrive handlers, as "
                                   "Lambda's event source mappings do, until the queues are "
                                   "empty or --max-seconds has passed. E.g. `reminders "
                                   "work --max-seconds 30 --json`.",
                       epilog=WORK_EXIT_STATUSES)
    _json_flag(p)
    p.add_argument("--max-seconds", type=_seconds, default=60.0,
                   help="wall-time bound, more than 0 (default: 60)")
    p.set_defaults(func=cmd_work)

    endpoints = sub.add_parser("endpoints", help="webhook endpoints")
    ep_sub = endpoints.add_subparsers(dest="action", required=True, parser_class=_Parser)
    p = ep_sub.add_parser("add", help="register an endpoint and its signing secret")
    p.add_argument("url", help="https://hooks.example.com/reminders")
    p.add_argument("--secret-file", help="a file holding whsec_... ('-' reads stdin)")
    p.add_argument("--secret-env", help="the name of an environment variable holding whsec_...")
    p.add_argument("--secret", help="whsec_... on the command line (local stacks only: argv "
                                    "is visible to other users of the machine)")
    p.add_argument("--tenant", help="only this tenant may use it (default: any)")
    _reason_flag(p)
    _json_flag(p)
    p.set_defaults(func=cmd_endpoints_add)
    p = ep_sub.add_parser("remove", help="remove an endpoint, e.g. `endpoints remove URL`")
    p.add_argument("url", help="the URL as registered")
    p.add_argument("--tenant", help="the tenant it was registered for (default: any tenant)")
    _reason_flag(p)
    _json_flag(p)
    p.set_defaults(func=cmd_endpoints_remove)
    p = ep_sub.add_parser(
        "rotate-secret",
        help="give an endpoint a new signing secret, e.g. "
             "`endpoints rotate-secret URL --secret-file - --overlap 24h`",
        description="Give an endpoint a new signing secret. During the overlap every webhook "
                    "carries two signatures in webhook-signature, the old secret's and the new "
                    "one's; after it, the new one's only. --finish ends the overlap now.")
    p.add_argument("url", help="the URL as registered")
    p.add_argument("--tenant", help="the tenant it was registered for (default: any tenant)")
    p.add_argument("--secret-file", help="a file holding whsec_... ('-' reads stdin)")
    p.add_argument("--secret-env", help="the name of an environment variable holding whsec_...")
    p.add_argument("--secret", help="whsec_... on the command line (local stacks only)")
    p.add_argument("--overlap", help=f"how long both signatures are sent, e.g. 24h, 30m; 0 "
                                     f"replaces the secret at once (default: {DEFAULT_OVERLAP})")
    p.add_argument("--finish", action="store_true",
                   help="end the rotation in progress now: the new secret only from now on")
    _reason_flag(p)
    _json_flag(p)
    p.set_defaults(func=cmd_endpoints_rotate)
    p = ep_sub.add_parser(
        "encrypt-secrets",
        help="encrypt the signing secrets still stored in plaintext, in bounded batches",
        description="Encrypt (with the KMS key in REMINDERS_SECRETS_KEY_ID) the endpoints' "
                    "signing secrets still stored in plaintext. Exit 0 when none is left, 1 "
                    "when some remain after --max-batches (run it again). E.g. `reminders "
                    "endpoints encrypt-secrets --batch 100 --max-batches 50`.")
    p.add_argument("--batch", type=_count("--batch", 1, 1000), default=ENCRYPT_BATCH,
                   help=f"endpoints per transaction, 1 to 1000 (default: {ENCRYPT_BATCH})")
    p.add_argument("--max-batches", type=_count("--max-batches", 1, 10_000),
                   default=ENCRYPT_MAX_BATCHES,
                   help=f"batches at most, 1 to 10000 (default: {ENCRYPT_MAX_BATCHES})")
    _json_flag(p)
    p.set_defaults(func=cmd_endpoints_encrypt)
    p = ep_sub.add_parser("list", help="registered endpoints (never their secrets)",
                          description="E.g. `reminders endpoints list --tenant acme`.")
    p.add_argument("--tenant", help="endpoints this tenant may use")
    _json_flag(p)
    p.set_defaults(func=cmd_endpoints_list)

    kinds = sub.add_parser("kinds", help="kinds of reminder and their policies")
    k_sub = kinds.add_subparsers(dest="action", required=True, parser_class=_Parser)
    p = k_sub.add_parser("set", help="create or change a kind, e.g. `kinds set trip "
                                     "--stale-after 3h --max-attempts 5`")
    p.add_argument("name", help="a-z 0-9 _ . -, e.g. trip")
    p.add_argument("--stale-after", help="e.g. 3h; 'none' for never")
    p.add_argument("--max-attempts", type=int, help="sends per delivery, 1 to 100 (default 8)")
    p.add_argument("--redrive-budget", type=int,
                   help="dead-letter replays per delivery, 0 to 100 (default 3)")
    p.add_argument("--backoff-base", help="first retry delay, e.g. 30s")
    p.add_argument("--backoff-cap", help="longest retry delay, e.g. 1h")
    p.add_argument("--retention", help="how long finished deliveries are kept, e.g. 30d")
    _reason_flag(p)
    _json_flag(p)
    p.set_defaults(func=cmd_kinds_set)
    p = k_sub.add_parser("list", help="kinds and their policies",
                         description="E.g. `reminders kinds list --json`.")
    _json_flag(p)
    p.set_defaults(func=cmd_kinds_list)

    p = sub.add_parser("schedule", help="schedule a reminder",
                       description="Schedule one reminder for one or many recipients, once "
                                   "(--at) or recurring (--rrule, --tz, --start). E.g. "
                                   "`reminders schedule --tenant acme --recipient "
                                   "alice@example.com --channel email --at "
                                   "2027-03-01T09:00:00+01:00 --key invoice-42`.")
    p.add_argument("--tenant", required=True, help="the application's tenant, e.g. acme")
    p.add_argument("--recipient", help="one recipient, e.g. alice@example.com")
    p.add_argument("--recipients", help="comma-separated, e.g. a@example.com,b@example.com")
    p.add_argument("--recipients-file", help="one recipient per line; # starts a comment")
    p.add_argument("--channel", required=True, choices=["webhook", "email", "sms"],
                   help="how it is delivered")
    p.add_argument("--to", help="webhook URL (registered with `endpoints add`), or the "
                                "address for a single recipient")
    p.add_argument("--at", help="ISO-8601 instant with offset, e.g. 2027-03-01T09:00:00Z")
    _recurrence_flags(p)
    p.add_argument("--kind", default="default", help="a kind from `kinds list` (default: "
                                                     "default)")
    p.add_argument("--key", help="idempotency key: retrying with it creates nothing new")
    p.add_argument("--revision", default="1", help="content revision (default 1)")
    p.add_argument("--payload", help='JSON object, e.g. \'{"invoice": 42}\'')
    _json_flag(p)
    p.set_defaults(func=cmd_schedule)

    p = sub.add_parser("reschedule", help="new time, rule or revision",
                       description="Move a schedule; repeating the same request changes "
                                   "nothing. E.g. `reminders reschedule invoice-42 --at "
                                   "2027-03-02T09:00:00Z`.")
    p.add_argument("key", help="schedule key or delivery key")
    p.add_argument("--tenant", help="needed only when the key exists for several tenants")
    p.add_argument("--at", help="new ISO-8601 instant with offset (one-off schedules)")
    p.add_argument("--revision", help="new content revision")
    _recurrence_flags(p)
    _json_flag(p)
    p.set_defaults(func=cmd_reschedule)

    p = sub.add_parser("cancel", help="cancel a schedule and its pending deliveries",
                       description="E.g. `reminders cancel invoice-42`; cancelling again "
                                   "changes nothing.")
    p.add_argument("key", help="schedule key or delivery key")
    p.add_argument("--tenant", help="needed only when the key exists for several tenants")
    p.add_argument("--dry-run", action="store_true",
                   help="list the pending deliveries it would suppress; change nothing")
    _reason_flag(p)
    _json_flag(p)
    p.set_defaults(func=cmd_cancel)

    for name in ("opt-out", "opt-in"):
        p = sub.add_parser(name, help=f"{name} a recipient on a channel, e.g. `{name} "
                                      "--tenant acme --recipient bob@example.com --channel "
                                      "email`")
        p.add_argument("--tenant", required=True, help="e.g. acme")
        p.add_argument("--recipient", required=True, help="as scheduled, e.g. bob@example.com")
        p.add_argument("--channel", required=True, choices=["webhook", "email", "sms"],
                       help="the channel to stop or resume")
        _json_flag(p)
        p.set_defaults(func=cmd_opt)

    tenants = sub.add_parser("tenants", help="list, pause or resume tenants")
    t_sub = tenants.add_subparsers(dest="action", required=True, parser_class=_Parser)
    for action in ("pause", "resume"):
        p = t_sub.add_parser(action, help=f"{action} a tenant, e.g. `tenants {action} acme`")
        p.add_argument("tenant", help="e.g. acme")
        p.add_argument("--create", action="store_true",
                       help="also for a tenant that has never scheduled anything")
        _reason_flag(p)
        _json_flag(p)
        p.set_defaults(func=cmd_tenants)
    p = t_sub.add_parser("list", help="tenants, paused or not, with their pending deliveries",
                         description="E.g. `reminders tenants list --json`.")
    _json_flag(p)
    p.set_defaults(func=cmd_tenants_list)

    p = sub.add_parser("opt-outs", help="recipients who opted out")
    o_sub = p.add_subparsers(dest="action", required=True, parser_class=_Parser)
    p = o_sub.add_parser("list", help="e.g. `opt-outs list --tenant acme --channel email`")
    p.add_argument("--tenant", help=_TENANT_HELP)
    p.add_argument("--channel", choices=["webhook", "email", "sms"], help="only this channel")
    p.add_argument("--recipient", help="only this recipient")
    p.add_argument("--limit", type=_count("--limit"), default=1000,
                   help="at most this many, 1 to 10000 (default 1000)")
    _json_flag(p)
    p.set_defaults(func=cmd_opt_outs_list)

    p = sub.add_parser("status", help="counts by state and channel, oldest overdue, leases",
                       description="What Postgres knows (counts by state and channel, "
                                   "lateness by tenant, kind and channel, paused tenants, "
                                   "expired leases) and, beside it, the queues' counts. "
                                   "E.g. `reminders status --tenant acme --watch 5`.")
    p.add_argument("--tenant", help=_TENANT_HELP)
    p.add_argument("--watch", type=_seconds, metavar="SECONDS",
                   help="refresh every SECONDS until interrupted")
    p.add_argument("--times", type=_count("--times", 1, 1_000_000),
                   help="with --watch: stop after this many refreshes")
    _json_flag(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("show", help="a delivery (or a schedule's deliveries) with attempts")
    p.add_argument("key", help="delivery key or schedule key")
    p.add_argument("--tenant", help=_TENANT_HELP)
    _json_flag(p)
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("list", help="deliveries by state, tenant, kind, channel, recipient, due",
                       description="Deliveries matching every filter given, by due time, a "
                                   "page at a time; e.g. `reminders list --state dead "
                                   "--tenant acme --due-from 2027-03-01T00:00Z`.")
    p.add_argument("--state", help=f"one of {', '.join(STATES_FOR_CLI)}")
    p.add_argument("--attention", action="store_true",
                   help="only parked deliveries (unknown, dead, failed, stale): the worklist "
                        "the console's Attention page shows")
    p.add_argument("--tenant", help="only this tenant's, e.g. acme")
    p.add_argument("--kind", help="only this kind's, e.g. trip")
    p.add_argument("--channel", choices=["webhook", "email", "sms"], help="only this channel's")
    p.add_argument("--recipient", help="only this recipient's, e.g. alice@example.com")
    p.add_argument("--due-from", help="ISO-8601 instant: due at or after it")
    p.add_argument("--due-to", help="ISO-8601 instant: due before it")
    p.add_argument("--after", help="continue after the cursor a previous page printed")
    p.add_argument("--schedule", help="only this schedule's (its key), e.g. invoice-8")
    p.add_argument("--sort", choices=["due", "updated"], default="due",
                   help="due: by due time, oldest first (default); updated: newest change first")
    p.add_argument("--limit", type=_count("--limit"), default=100,
                   help="rows per page, 1 to 10000 (default 100)")
    _json_flag(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser(
        "reconcile", help="settle parked deliveries after checking the receiver",
        description="Settle one delivery by KEY, or many: every delivery of --state in a "
                    "--tenant or --kind (and a due range), at most --limit; --dry-run lists "
                    "them first. E.g. `reminders reconcile --state dead --tenant acme --as "
                    "retry --reason 'endpoint fixed' --dry-run`.")
    p.add_argument("key", nargs="?", help="delivery key (omit for a bulk reconcile)")
    p.add_argument("--tenant", help=_TENANT_HELP)
    p.add_argument("--state", help=f"bulk: one of {', '.join(BULK_STATES)}")
    p.add_argument("--kind", help="bulk: only this kind")
    p.add_argument("--channel", choices=["webhook", "email", "sms"],
                   help="bulk: only this channel")
    p.add_argument("--recipient", help="bulk: only this recipient")
    p.add_argument("--due-from", help="bulk: due at or after this ISO-8601 instant")
    p.add_argument("--due-to", help="bulk: due before this ISO-8601 instant")
    p.add_argument("--limit", type=_count("--limit"), default=100,
                   help="bulk: at most this many (default 100)")
    p.add_argument("--dry-run", action="store_true", help="bulk: list them, change nothing")
    p.add_argument("--as", dest="as_", required=True, choices=["sent", "failed", "dead", "retry"],
                   help="sent (it arrived), failed/dead (give up), retry (due again, same key)")
    p.add_argument("--reason", required=True,
                   help=f"what you checked: one line, at most {MAX_REASON_LENGTH} characters")
    _json_flag(p)
    p.set_defaults(func=cmd_reconcile)

    p = sub.add_parser("preview", help="the next due instants of a rule")
    p.add_argument("--rrule", required=True, help="RFC 5545 rule, e.g. FREQ=WEEKLY;BYDAY=MO")
    p.add_argument("--tz", required=True, help="IANA time zone, e.g. Europe/Berlin")
    p.add_argument("--start", required=True, help="local start, e.g. 2027-01-04T09:00")
    p.add_argument("--gap", choices=["shift", "skip"], default="shift",
                   help="DST gap policy (default shift)")
    p.add_argument("--overlap", choices=["first", "later"], default="first",
                   help="DST overlap policy (default first)")
    p.add_argument("--count", type=int, default=10, help="0 to 1000 (default 10)")
    p.add_argument("--after", help="ISO-8601 instant; default: from the start")
    _json_flag(p)
    p.set_defaults(func=cmd_preview)

    p = sub.add_parser("completion", help="shell completion: eval \"$(reminders completion "
                                          "bash)\"",
                       description="E.g. `eval \"$(reminders completion bash)\"` in ~/.bashrc.")
    p.add_argument("shell", choices=["bash"], help="the shell (bash)")
    p.set_defaults(func=cmd_completion)

    p = sub.add_parser("version", help="versions, including the time-zone data",
                       description="E.g. `reminders version --json`.")
    _json_flag(p)
    p.set_defaults(func=cmd_version)

    p = sub.add_parser("console", help="the delivery console: a web page on 127.0.0.1",
                       description="Serve the delivery console (overview, attention list, "
                                   "a delivery's story, operator actions) against the database "
                                   "and queues this command line is configured for, on this "
                                   "machine only by default. E.g. `reminders console --port "
                                   "8765`, then open http://127.0.0.1:8765/.")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; on any "
                        "other address every browser needs the access token printed at start, "
                        "or --behind-proxy)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a host name the console also answers to (its Host header, port "
                        "aside), beside this machine's and the --host address; repeatable")
    p.add_argument("--behind-proxy", metavar="HEADER",
                   help="the header an authenticating proxy in front sets (e.g. "
                        "X-Forwarded-User): requests without it are refused, and no token is "
                        "needed")
    p.add_argument("--port", type=_count("--port", 1, 65535), default=8765,
                   help="port to listen on (default 8765)")
    p.add_argument("--refresh", type=_count("--refresh", 2, 3600), default=10,
                   help="seconds between the overview's refreshes (default 10)")
    p.add_argument("--statement-timeout", type=_count("--statement-timeout", 1, 600),
                   default=15, help="seconds a page's query may run at most (default 15)")
    p.add_argument("--demo", action="store_true",
                   help="on the last `reminders demo`'s database, at its simulated time "
                        "(starts the local stack if it is down)")
    p.set_defaults(func=cmd_console)

    p = sub.add_parser("demo", help="the whole pipeline on one machine, on a simulated clock",
                       description="E.g. `reminders demo` (or `make demo`).")
    _json_flag(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("drill", help="inject a fault into the pipeline on one machine and count "
                                     "the invariants broken (exit 1 if any)",
                       description="Run a fault drill: schedule a batch, inject the fault, run "
                                   "the clock on until everything due has an outcome, and "
                                   "report what was done, the time to recover and every "
                                   "violation of the invariants found (the goal is none). "
                                   "E.g. `reminders drill consumer-kill --short --json`.",
                       epilog=_DRILL_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", choices=[*DRILLS, "all"], metavar="NAME|all",
                   help="a drill (listed below), or all of them")
    p.add_argument("--short", action="store_true",
                   help="smaller batches, as CI runs them")
    _json_flag(p)
    p.set_defaults(func=cmd_drill)
    return parser


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


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", os.environ["LOG_LEVEL"])
    raw = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(_join_negative_values(raw))
    if args.version and args.command is None:
        args.func, args.json = cmd_version, False
    elif args.command is None:
        parser.error("give a command, e.g. `reminders status`")
    if (args.stack or args.ops_function) and args.command is not None:
        command = str(args.command) + (f" {args.action}" if args.command == "tenants" else "")
        if command not in REMOTE_COMMANDS:
            parser.error(f"`{command}` does not run with --stack: it runs where the database "
                         "is reachable (DATABASE_URL); through the operations function run "
                         "status, show, list, reconcile, cancel and tenants pause|resume|list"
                         + (" (drills run on one machine only)" if command == "drill" else ""))
    try:
        if getattr(args, "reason", None) is not None:  # refused before anything is done
            checked_reason(args.reason, required=args.command == "reconcile")
        code: int = args.func(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        _stdout_gone()
        return EXIT_OK
    except KeyboardInterrupt:
        sys.stderr.write("reminders: interrupted\n")
        return 130
    except Exception as exc:
        if os.environ.get("REMINDERS_DEBUG"):
            raise
        return _exit_for(exc)


if __name__ == "__main__":
    raise SystemExit(main())
