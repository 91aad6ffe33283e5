"""Webhook endpoints and their signing secrets (``endpoints``); kinds and their policies
(``kinds``)."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from reminders import cli_windows
from reminders.cli.common import (
    _aws_environment,
    _conn,
    _count,
    _json_flag,
    _local_aws,
    _now,
    _Parser,
    _plain_text,
    _reason_flag,
    _record,
    emit,
    environment,
    parse_duration,
)
from reminders.errors import InvalidInput
from reminders.outcome import EXIT_NOT_DONE

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
    from reminders import settings_commands

    with _conn() as conn:
        row = settings_commands.remove_endpoint(conn, url=args.url, tenant=args.tenant,
                                                now=_now(), who=None, via="cli",
                                                reason=args.reason)
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
        from reminders import settings_commands

        with _conn() as conn:
            row = settings_commands.finish_rotation(conn, url=args.url, tenant=args.tenant,
                                                    now=now, who=None, via="cli",
                                                    reason=args.reason)
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


def kind_set_options(args: Any) -> dict[str, Any]:
    """set_kind's options from ``kinds set``'s flags (or the console's fields of the same
    names): what is not given is kept."""
    from reminders import schedules

    stale = (schedules.KEEP if args.stale_after is None
             else parse_duration(args.stale_after, "--stale-after"))
    base = parse_duration(args.backoff_base, "--backoff-base") if args.backoff_base else None
    cap = parse_duration(args.backoff_cap, "--backoff-cap") if args.backoff_cap else None
    keep = parse_duration(args.retention, "--retention") if args.retention else None
    return {"stale_after": stale, "max_attempts": args.max_attempts,
            "redrive_budget": args.redrive_budget, "backoff_base": base, "backoff_cap": cap,
            "retention": keep, **cli_windows.kind_options(args)}


def cmd_kinds_set(args: argparse.Namespace) -> int:
    from reminders import settings_commands

    options = kind_set_options(args)
    with _conn() as conn:
        data = settings_commands.set_kind(conn, name=args.name, now=_now(), who=None,
                                          via="cli", reason=args.reason, **options)
    from reminders.cli_format import duration

    emit(args, data, f"kind {data['name']}: stale after "
                     f"{duration(data['stale_after_seconds'])}, max attempts "
                     f"{data['max_attempts']}, redrive budget {data['redrive_budget']}, backoff "
                     f"{duration(data['backoff_base_seconds'])} to "
                     f"{duration(data['backoff_cap_seconds'])}, retention "
                     f"{duration(data['retention_seconds'])}{cli_windows.kind_text(data)}")
    return 0


def cmd_kinds_list(args: argparse.Namespace) -> int:
    from reminders import settings_commands
    from reminders.cli_format import duration, table

    with _conn() as conn:
        rows = settings_commands.kinds(conn)
    emit(args, rows, table(
        ["kind", "stale after", "max attempts", "redrive budget", "backoff", "retention"],
        [(r["name"], duration(r["stale_after_seconds"]), r["max_attempts"],
          r["redrive_budget"],
          f"{duration(r['backoff_base_seconds'])}..{duration(r['backoff_cap_seconds'])}",
          duration(r["retention_seconds"])) for r in rows]))
    return 0


def add_parsers(sub: Any) -> None:
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
    from reminders.cli.channels import add_endpoint_parser

    add_endpoint_parser(ep_sub)

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
    cli_windows.add_kind_flags(p)
    _reason_flag(p)
    _json_flag(p)
    p.set_defaults(func=cmd_kinds_set)
    p = k_sub.add_parser("list", help="kinds and their policies",
                         description="E.g. `reminders kinds list --json`.")
    _json_flag(p)
    p.set_defaults(func=cmd_kinds_list)
