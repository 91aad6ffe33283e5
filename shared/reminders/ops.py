"""The operations function's logic: a small JSON command in, the command's output and exit
status out, run by the same code as the local command line (:mod:`reminders.operator_commands`).

A request is validated strictly before anything runs: one of :data:`COMMANDS`, only that
command's arguments, each of its type and within bounds. The caller's identity is proven
(:mod:`reminders.identity`) and every command is logged with it; every write records it in
Postgres as who did it, via ``ops`` (a delivery's operator event, an ``operator_actions`` row).

Request (version 1)::

    {"version": 1, "command": "reconcile", "args": {"key": "...", "as": "sent", ...},
     "identity": {"proof": "https://sts.REGION.amazonaws.com/?Action=GetCallerIdentity&...",
                  "nonce": "9f86d081884c7d659a2feaa0c55ad015",
                  "audience": "arn:aws:lambda:REGION:111122223333:function:Reminders-ops",
                  "claimed_arn": "arn:aws:iam::111122223333:user/alice"}}

The proof signs the digest of the command, its arguments, the nonce and the audience; the
function computes it with its own ARN as the audience (``audience`` in the request is the
caller's claim, compared only to say plainly that a proof is for another function). An
accepted proof is remembered in ``identity_proofs`` and refused a second time.

Response: ``{"version": 1, "code": 0, "data": ..., "text": ..., "notes": [...],
"json_notes": [...], "caller": ARN}``, or ``{"version": 1, "code": N, "error": LINE, ...}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from reminders import db
from reminders.errors import InvalidInput
from reminders.identity import Caller, IdentityRefused, check_nonce, request_digest
from reminders.outcome import EXIT_USAGE, Outcome, error_line
from reminders.reasons import checked_reason

VERSION = 1
# The most rows one remote ``list`` or bulk ``reconcile`` touches (locally: 10000); an
# invocation ends within the function's timeout and its answer within Lambda's 6 MB.
MAX_REMOTE_LIMIT = 1000
# Lambda refuses a synchronous response above 6 MB; a larger answer is refused with a hint.
MAX_RESPONSE_BYTES = 5_000_000
# Expired proofs forgotten at each invocation, at most (one is added per invocation).
PROOF_PURGE_BATCH = 100
STATES = ("scheduled", "leased", "retrying", "sent", "failed", "suppressed", "stale",
          "unknown", "dead")
CHANNELS = ("webhook", "email", "sms")
TARGETS = ("sent", "failed", "dead", "retry")


@dataclass(frozen=True)
class Arg:
    kind: type
    max_length: int = 0
    low: int = 0
    high: int = 0
    choices: tuple[str, ...] = ()
    one_line: bool = True  # False: checked by its own rule (a reason: reminders.reasons)

    def check(self, flag: str, value: Any) -> Any:
        if value is None:
            return None
        if self.kind is bool:
            if not isinstance(value, bool):
                raise InvalidInput(f"{flag}: must be true or false, got {value!r}")
            return value
        if self.kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidInput(f"{flag}: must be a whole number, got {value!r}")
            if not self.low <= value <= self.high:
                raise InvalidInput(f"{flag}: must be from {self.low} to {self.high} through "
                                   f"the operations function, got {value}")
            return value
        if not isinstance(value, str):
            raise InvalidInput(f"{flag}: must be text, got {type(value).__name__}")
        if self.choices:
            if value not in self.choices:
                raise InvalidInput(f"{flag}: must be one of {', '.join(self.choices)}, got "
                                   f"{value[:40]!r}")
            return value
        if not self.one_line:
            return value
        if len(value) > self.max_length:
            raise InvalidInput(f"{flag}: longer than {self.max_length} characters")
        if any(ch in value for ch in ("\x00", "\n", "\r")):
            raise InvalidInput(f"{flag}: contains a control character")
        return value


ARGS: Mapping[str, Arg] = {
    "tenant": Arg(str, max_length=200),
    "key": Arg(str, max_length=1000),
    "state": Arg(str, choices=STATES),
    "kind": Arg(str, max_length=63),
    "channel": Arg(str, choices=CHANNELS),
    "recipient": Arg(str, max_length=1000),
    "due_from": Arg(str, max_length=64),
    "due_to": Arg(str, max_length=64),
    "after": Arg(str, max_length=500),  # a schedules page's TENANT/KEY too
    "limit": Arg(int, low=1, high=MAX_REMOTE_LIMIT),
    "dry_run": Arg(bool),
    "as": Arg(str, choices=TARGETS),
    "reason": Arg(str, one_line=False),
    "create": Arg(bool),
    "attention": Arg(bool),
    "schedule_state": Arg(str, choices=("active", "paused", "cancelled", "finished")),
    "from": Arg(str, max_length=64),
    "to": Arg(str, max_length=64),
    "sort": Arg(str, choices=("due", "updated")),
    "schedule": Arg(str, max_length=1000),
}

# Each command: (the arguments it takes, those it must have).
COMMANDS: Mapping[str, tuple[frozenset[str], frozenset[str]]] = {
    "status": (frozenset({"tenant"}), frozenset()),
    "show": (frozenset({"key", "tenant", "limit"}), frozenset({"key"})),
    "list": (frozenset({"state", "attention", "tenant", "kind", "channel", "recipient",
                        "due_from", "due_to", "after", "limit", "sort", "schedule"}),
             frozenset()),
    "reconcile": (frozenset({"key", "tenant", "state", "kind", "channel", "recipient",
                             "due_from", "due_to", "limit", "dry_run", "as", "reason"}),
                  frozenset({"as", "reason"})),
    "cancel": (frozenset({"key", "tenant", "dry_run", "reason"}), frozenset({"key"})),
    "tenants pause": (frozenset({"tenant", "create", "reason"}), frozenset({"tenant"})),
    "tenants resume": (frozenset({"tenant", "create", "reason"}), frozenset({"tenant"})),
    "tenants list": (frozenset(), frozenset()),
    "schedules list": (frozenset({"tenant", "schedule_state", "after", "limit"}), frozenset()),
    "schedules show": (frozenset({"key", "tenant"}), frozenset({"key"})),
    "schedules pause": (frozenset({"key", "tenant", "reason"}), frozenset({"key"})),
    "schedules resume": (frozenset({"key", "tenant", "reason"}), frozenset({"key"})),
    "schedules trigger": (frozenset({"key", "tenant", "reason"}), frozenset({"key"})),
    "schedules backfill": (frozenset({"key", "tenant", "from", "to", "limit", "dry_run",
                                      "reason"}), frozenset({"key", "from", "to"})),
}
WRITES = frozenset({"reconcile", "cancel", "tenants pause", "tenants resume",
                    "schedules pause", "schedules resume", "schedules trigger",
                    "schedules backfill"})
READS = frozenset(COMMANDS) - WRITES
# Which commands a deployed operations function serves: "read" (READS) or "write" (WRITES).
# The stack deploys one of each from this code, each with its own reserved concurrency and
# its own lambda:InvokeFunction permission.
SERVES_ENV = "REMINDERS_OPS_SERVES"
SERVED = {"read": READS, "write": WRITES}


def kind_of(command: str) -> str:
    """Whether ``command`` is a read or a write."""
    return "write" if command in WRITES else "read"


def serves_from_env(env: Mapping[str, str]) -> str:
    from reminders.errors import ConfigError

    serves = env.get(SERVES_ENV, "")
    if serves not in SERVED:
        raise ConfigError(f"{SERVES_ENV} must be read or write (the commands this operations "
                          f"function serves), got {serves!r}")
    return serves


def check_served(request: Request, serves: str) -> None:
    """A command of the other kind is refused before its proof is checked."""
    if request.command not in SERVED[serves]:
        kind = kind_of(request.command)
        raise InvalidInput(f"request: {request.command} is a {kind} command; this operations "
                           f"function serves the {serves} commands only "
                           f"({', '.join(c for c in COMMANDS if c in SERVED[serves])}): send it "
                           f"to the stack's ops-{kind} function")


@dataclass(frozen=True)
class Request:
    command: str
    args: dict[str, Any]
    proof: str
    claimed_arn: str | None
    nonce: str = ""
    claimed_audience: str | None = None

    def digest(self, audience: str) -> str:
        """What the proof must sign, for the function whose ARN is ``audience``."""
        return request_digest(self.command, self.args, audience=audience, nonce=self.nonce)


def _flag(name: str) -> str:
    return "--as" if name == "as" else "--" + name.replace("_", "-")


def parse_request(event: Any) -> Request:
    """The request, or InvalidInput naming the first thing wrong with it."""
    if not isinstance(event, dict):
        raise InvalidInput("request: must be a JSON object")
    unknown = set(event) - {"version", "command", "args", "identity"}
    if unknown:
        raise InvalidInput(f"request: unknown field {sorted(unknown)[0]!r}")
    if event.get("version") != VERSION:
        raise InvalidInput(f"request: version must be {VERSION}, got {event.get('version')!r}")
    command = event.get("command")
    if not isinstance(command, str) or command not in COMMANDS:
        raise InvalidInput(f"request: command must be one of {', '.join(COMMANDS)}, got "
                           f"{str(command)[:40]!r}")
    raw = event.get("args", {})
    if not isinstance(raw, dict):
        raise InvalidInput("request: args must be a JSON object")
    allowed, required = COMMANDS[command]
    extra = set(raw) - allowed
    if extra:
        name = sorted(extra)[0]
        raise InvalidInput(f"{command}: no argument {str(name)[:40]!r} through the operations "
                           "function")
    args = {name: ARGS[name].check(_flag(name), value) for name, value in raw.items()}
    if args.get("reason") is not None:  # given: the one rule, as locally (blank included)
        checked_reason(args["reason"], required="reason" in required)
    missing = [name for name in sorted(required) if args.get(name) in (None, "")]
    if missing:
        raise InvalidInput(f"{command}: {_flag(missing[0])} is required")
    identity = event.get("identity")
    if not isinstance(identity, dict) or not isinstance(identity.get("proof"), str):
        raise InvalidInput("request: identity.proof is required (a presigned "
                           "GetCallerIdentity; the reminders command line sends it)")
    claimed = identity.get("claimed_arn")
    audience = identity.get("audience")
    return Request(command=command, args=args, proof=identity["proof"],
                   claimed_arn=claimed[:2048] if isinstance(claimed, str) else None,
                   nonce=check_nonce(identity.get("nonce")),
                   claimed_audience=audience[:300] if isinstance(audience, str) else None)


def check_audience(request: Request, audience: str) -> None:
    """A proof the caller says is for another function is refused as such (the digest, with
    this function's own ARN, would not match it anyway)."""
    if request.claimed_audience is not None and request.claimed_audience != audience:
        raise IdentityRefused(f"identity: the proof is for {request.claimed_audience}, not "
                              f"this function ({audience})")


def claim_proof(conn: db.Connection, request: Request, *, audience: str, caller: Caller,
                now: datetime, signed_at: datetime) -> None:
    """Remember an accepted proof until it expires, or refuse it if it was accepted before:
    one statement, decided by the table's primary key (two uses at once: one wins). Expired
    proofs are forgotten first, a bounded batch. Committed before the command runs, so a
    proof is spent even if its command then fails: run the command again for a new one."""
    from reminders.identity import remembered_until

    with db.transaction(conn):
        db.execute(conn, "identity_proofs_purge", {"now": now, "limit": PROOF_PURGE_BATCH})
        row = db.fetch_one(conn, "identity_proof_claim", {
            "digest": request.digest(audience), "caller_arn": caller.arn[:2048],
            "command": request.command, "now": now,
            "expires_at": remembered_until(signed_at)})
    if row is None:
        raise IdentityRefused("identity: this proof was used already (a proof is good for one "
                              "command, once; run the command again for a new one)")


def run(request: Request, conn: db.Connection, *, now: datetime, caller: Caller,
        queue_counts: Callable[[], dict[str, dict[str, int]]] | None) -> Outcome:
    """Run one validated command with the same functions the local command line calls; a
    write is recorded as by the proven caller, via ``ops``, with its role and session name
    apart in the action's detail."""
    from reminders.operator import ACTING

    token = ACTING.set(caller.principal)
    try:
        return _run(request, conn, now=now, caller=caller, queue_counts=queue_counts)
    finally:
        ACTING.reset(token)


def _run(request: Request, conn: db.Connection, *, now: datetime, caller: Caller,
         queue_counts: Callable[[], dict[str, dict[str, int]]] | None) -> Outcome:
    from reminders import operator_commands as commands

    a = request.args
    who, via = caller.arn, "ops"
    if request.command == "status":
        return commands.status(conn, now=now, tenant=a.get("tenant"), queue_counts=queue_counts)
    if request.command == "show":
        return commands.show(conn, key=a["key"], tenant=a.get("tenant"), limit=a.get("limit"))
    if request.command == "list":
        return commands.list_deliveries(
            conn, limit=a.get("limit") or 100, state=a.get("state"), tenant=a.get("tenant"),
            kind=a.get("kind"), channel=a.get("channel"), recipient=a.get("recipient"),
            due_from=a.get("due_from"), due_to=a.get("due_to"), after=a.get("after"),
            attention=bool(a.get("attention")), sort=a.get("sort") or "due",
            schedule=a.get("schedule"))
    if request.command == "reconcile":
        return commands.reconcile(
            conn, now=now, key=a.get("key"), tenant=a.get("tenant"), as_=a["as"],
            reason=a["reason"], who=who, via=via, state=a.get("state"), kind=a.get("kind"),
            channel=a.get("channel"), recipient=a.get("recipient"),
            due_from=a.get("due_from"), due_to=a.get("due_to"), limit=a.get("limit") or 100,
            dry_run=bool(a.get("dry_run")))
    if request.command == "cancel":
        return commands.cancel(conn, now=now, key=a["key"], tenant=a.get("tenant"), who=who,
                               via=via, reason=a.get("reason"), dry_run=bool(a.get("dry_run")))
    if request.command == "tenants list":
        return commands.tenants_list(conn)
    if request.command.startswith("schedules "):
        return _run_schedules(request, conn, now=now, who=who, via=via)
    return commands.tenants_set(conn, now=now, tenant=a["tenant"],
                                paused=request.command == "tenants pause", who=who, via=via,
                                reason=a.get("reason"), create=bool(a.get("create")))


def _run_schedules(request: Request, conn: db.Connection, *, now: datetime, who: str,
                   via: str) -> Outcome:
    from reminders import schedule_commands as commands

    a = request.args
    if request.command == "schedules list":
        return commands.list_schedules(conn, limit=a.get("limit") or 100,
                                       tenant=a.get("tenant"), state=a.get("schedule_state"),
                                       after=a.get("after"))
    if request.command == "schedules show":
        return commands.show(conn, key=a["key"], tenant=a.get("tenant"), now=now)
    if request.command == "schedules trigger":
        return commands.trigger(conn, now=now, key=a["key"], tenant=a.get("tenant"), who=who,
                                via=via, reason=a.get("reason"))
    if request.command == "schedules backfill":
        return commands.backfill(conn, now=now, key=a["key"], tenant=a.get("tenant"),
                                 start=a["from"], end=a["to"], limit=a.get("limit") or 100,
                                 who=who, via=via, reason=a.get("reason"),
                                 dry_run=bool(a.get("dry_run")))
    return commands.hold(conn, now=now, key=a["key"], tenant=a.get("tenant"),
                         paused=request.command == "schedules pause", who=who, via=via,
                         reason=a.get("reason"))


def response(outcome: Outcome, caller: Caller | None) -> dict[str, Any]:
    body = {"version": VERSION, **outcome.as_json(), "caller": caller.arn if caller else None}
    size = len(json.dumps(body, default=str))
    if size > MAX_RESPONSE_BYTES:
        return failure(EXIT_USAGE, f"the answer is {size} bytes, more than a Lambda response "
                                   "may carry; narrow it (--tenant, --state, --limit)", caller)
    return json.loads(json.dumps(body, default=str))  # type: ignore[no-any-return]


def failure(code: int, line: str, caller: Caller | None) -> dict[str, Any]:
    return {"version": VERSION, "code": code, "error": line,
            "caller": caller.arn if caller else None}


def failure_for(exc: BaseException, caller: Caller | None) -> dict[str, Any]:
    return failure(*error_line(exc), caller)


STS_ENDPOINT_ENV = "REMINDERS_STS_ENDPOINT"


def sts_endpoint_from_env(env: Mapping[str, str]) -> str:
    """The one STS endpoint identity proofs may go to: the function's own region's."""
    from reminders.errors import ConfigError

    endpoint = env.get(STS_ENDPOINT_ENV, "")
    if not endpoint.startswith(("https://", "http://")):
        raise ConfigError(f"{STS_ENDPOINT_ENV} must be the STS endpoint URL, e.g. "
                          f"https://sts.eu-west-1.amazonaws.com, got {endpoint!r}")
    return endpoint


# Arguments that name a person (a recipient's address or number, or a delivery key, which holds
# one): logged as a short digest, enough to match two log lines, never the value. The logs are
# kept for 30 days and readable by more people than the database.
PERSONAL_ARGUMENTS = frozenset({"recipient", "key"})


def redacted(arguments: dict[str, Any]) -> dict[str, Any]:
    import hashlib

    return {name: (f"redacted:{hashlib.sha256(str(value).encode()).hexdigest()[:12]}"
                   if name in PERSONAL_ARGUMENTS and value is not None else value)
            for name, value in arguments.items()}


def handle(event: Any, *, connection: Callable[[], db.Connection], now: Callable[[], datetime],
           queue_counts: Callable[[], dict[str, dict[str, int]]] | None, sts_endpoint: str,
           account: str | None, audience: str, serves: str,
           request_id: str = "") -> dict[str, Any]:
    """Validate (a command this function serves: ``serves``, read or write), prove the caller
    (for this function, ``audience``: its ARN), remember the proof, run, answer; every command
    is logged with who ran it. Nothing but a response leaves: errors become a line and an exit
    status."""
    from reminders.identity import check_proof, verify
    from reminders.observability import logger

    caller: Caller | None = None
    request: Request | None = None
    try:
        request = parse_request(event)
        check_served(request, serves)
        check_audience(request, audience)
        instant = now()
        signed_at = check_proof(request.proof, sts_endpoint, now=instant)
        caller = verify(request.proof, request.digest(audience), sts_endpoint=sts_endpoint,
                        now=instant)
        if account and caller.account != account:
            raise IdentityRefused(f"identity: the caller belongs to account {caller.account}, "
                                  "not this function's")
        claim_proof(connection(), request, audience=audience, caller=caller, now=instant,
                    signed_at=signed_at)
    except Exception as exc:  # noqa: BLE001 (a refused request is an answer, not a crash)
        result = failure_for(exc, caller)
        logger.warning("operator command refused", extra={
            "command": request.command if request else None, "code": result["code"],
            "error": result["error"], "caller_arn": caller.arn if caller else None,
            "claimed_arn": request.claimed_arn if request else None,
            "request_id": request_id})
        return result
    audit = {"command": request.command, "arguments": redacted(request.args),
             "caller_arn": caller.arn,
             "claimed_arn": request.claimed_arn, "write": request.command in WRITES,
             "request_id": request_id}
    logger.info("operator command", extra=audit)
    try:
        outcome = run(request, connection(), now=now(), caller=caller,
                      queue_counts=queue_counts)
    except Exception as exc:  # noqa: BLE001 (the caller gets a line and an exit status)
        result = failure_for(exc, caller)
        if result["code"] == 1:  # not one of ours: keep the traceback in the log
            logger.exception("operator command raised", extra=audit)
    else:
        result = response(outcome, caller)
    logger.info("operator command done", extra={**audit, "code": result["code"],
                                                "error": result.get("error")})
    return result


def handle_invocation(event: Any, context: Any, rt: Any) -> dict[str, Any]:
    """``handle`` with what a Lambda invocation and the runtime provide."""
    import os

    from reminders.errors import ConfigError
    from reminders.identity import audience_of

    arn = str(getattr(context, "invoked_function_arn", "") or "")
    parts = arn.split(":")
    try:
        serves = serves_from_env(os.environ)
        audience = audience_of(arn)
        sts_endpoint = sts_endpoint_from_env(os.environ)
    except (ConfigError, IdentityRefused) as exc:
        return failure_for(exc, None)
    rt = rt.for_function(f"ops-{serves}")
    rt_queues = (rt.deliveries, rt.dlq, rt.parking)

    def queue_counts() -> dict[str, dict[str, int]]:
        return {name: queue.counts()
                for name, queue in zip(("deliveries", "dlq", "parking"), rt_queues, strict=True)}

    try:
        return handle(event, connection=rt.connection, now=rt.clock.now,
                      queue_counts=queue_counts, sts_endpoint=sts_endpoint,
                      account=parts[4] if len(parts) > 4 and parts[4] else None,
                      audience=audience, serves=serves,
                      request_id=str(getattr(context, "aws_request_id", "") or ""))
    finally:
        # An operator's command is rare: hold no connection between them (the proxy's
        # connection budget counts the operations functions with migrate's one).
        rt.close()
