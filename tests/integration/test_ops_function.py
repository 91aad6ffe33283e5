"""The operations function: a JSON command in (the event a synchronous Lambda invoke passes),
the same output and exit status as the local command line out, the caller proven through STS
and recorded. And ``reminders --stack NAME``: the stack's output found through CloudFormation,
the stack found in moto's CloudFormation over HTTP, the proof signed for and checked by the
SigV4-verifying STS stand-in (reminders.local.sts_server), the function invoked by boto3 over
HTTP."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from functions.ops.handler import handler as ops_handler
from reminders import config, db, ops, ops_client, runtime
from reminders.clock import FixedClock
from reminders.local import stack
from reminders.local.sts_server import Principal, StsStandIn
from tests.aws_principals import OPERATOR_ARN, grant_operator, operator
from tests.conftest import make_runtime
from tests.integration.cli_helpers import BAD_REASONS, BLANK_OPTIONAL, BLANK_REQUIRED, Cli
from tests.integration.lambda_invoke import ACCOUNT, Context, LambdaStandIn

DUE = "2027-03-01T09:05:00Z"
_stacks = itertools.count()


_environ = threading.Lock()


def handler(event: Any, context: Context) -> dict[str, Any]:
    """The handler as the function named by ``context`` runs it: STACK-ops-read with
    REMINDERS_OPS_SERVES=read, STACK-ops-write with write (one code, deployed twice)."""
    serves = context.function_name.rsplit("-", 1)[-1]
    with _environ:
        before = os.environ.get(ops.SERVES_ENV)
        os.environ[ops.SERVES_ENV] = serves
        try:
            return ops_handler(event, context)
        finally:
            if before is None:
                del os.environ[ops.SERVES_ENV]
            else:
                os.environ[ops.SERVES_ENV] = before


class SigningClock(FixedClock):
    """The function's clock in these tests: the instant the proofs are signed at (botocore
    signs with the system's clock, and the STS stand-in checks with it), moved only by the
    test (``advance``), never by a fixed instant of its own."""

    def __init__(self) -> None:
        super().__init__(datetime.now(UTC))
        self.offset = timedelta()

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def advance(self, delta: timedelta) -> datetime:
        self.offset += delta
        return self.now()


@pytest.fixture
def ops_runtime(database_url: str, queue_urls: config.QueueUrls, moto_endpoint: str,
                sts_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[runtime.Runtime]:
    monkeypatch.setenv("REMINDERS_STS_ENDPOINT", sts_endpoint)
    rt = make_runtime(database_url, queue_urls, moto_endpoint, SigningClock())
    runtime.install(rt)
    yield rt
    rt.close()
    runtime.install(None)


@pytest.fixture
def sts(sts_endpoint: str, moto_endpoint: str) -> Any:
    """STS (the stand-in) as the operator: what the command line signs its proofs with."""
    return stack.aws_client("sts", sts_endpoint, credentials=operator(moto_endpoint))


def invoke(sts: Any, command: str, args: dict[str, Any] | None = None,
           context: Context | None = None) -> dict[str, Any]:
    context = context or Context(f"Reminders-ops-{ops.kind_of(command)}")
    event = ops_client.request(command, args or {}, sts, context.function_name)
    # Lambda hands the handler the invoke's JSON payload, decoded.
    return handler(json.loads(json.dumps(event)), context)


def one(conn: db.Connection, query: str) -> Any:
    row = conn.execute(query).fetchone()
    assert row is not None
    return row


def schedule(cli: Cli, key: str = "inv-1") -> None:
    cli("schedule", "--tenant", "acme", "--channel", "email", "--recipient", "a@example.com",
        "--at", DUE, "--key", key, "--json").json()


# ---------------------------------------------------------------- the handler, in process


def test_status_answers_as_the_local_command_with_the_queues_and_the_caller(
        ops_runtime: runtime.Runtime, sts: Any, cli: Cli) -> None:
    schedule(cli)
    answer = invoke(sts, "status", {"tenant": None})
    assert answer["code"] == 0, answer
    assert answer["caller"] == OPERATOR_ARN
    assert answer["data"]["by_state"]["scheduled"] == 1
    assert set(answer["data"]["queues"]) == {"deliveries", "dlq", "parking"}
    local = json.loads(cli("status", "--json").out)
    assert answer["data"]["by_state"] == local["by_state"]
    assert answer["text"].startswith("deliveries: 1 (scheduled 1)")


def test_a_reconcile_records_the_verified_caller_with_the_event(
        ops_runtime: runtime.Runtime, sts: Any, cli: Cli, conn: db.Connection) -> None:
    schedule(cli)
    schedule(cli, "inv-2")
    conn.execute("update deliveries set state = 'unknown', reason = 'test'")
    answer = invoke(sts, "reconcile", {"key": None, "tenant": "acme", "state": "unknown",
                                       "kind": None, "channel": "email",
                                       "recipient": "a@example.com", "due_from": None,
                                       "due_to": None, "limit": 1, "dry_run": False,
                                       "as": "sent", "reason": "receiver log shows it"})
    assert answer["code"] == 0, answer
    assert [d["state"] for d in answer["data"]["reconciled"]] == ["sent"]
    assert answer["data"]["more"] is True
    (event,) = conn.execute("select actor, who, event, detail from delivery_events "
                            "where event like 'reconciled%%'").fetchall()
    assert event == {"actor": "operator", "who": OPERATOR_ARN, "event": "reconciled as sent",
                     "detail": "receiver log shows it (bulk through the operations function, "
                               f"by {OPERATOR_ARN})"}
    (action,) = conn.execute("select who, via, action, object, name, tenant, reason, detail "
                             "from operator_actions").fetchall()
    assert action == {
        "who": OPERATOR_ARN, "via": "ops", "action": "reconciled as sent", "object": "deliveries",
        "name": "state=unknown tenant=acme channel=email recipient=a@example.com",
        "tenant": "acme", "reason": "receiver log shows it",
        "detail": {"filters": {"state": "unknown", "tenant": "acme", "channel": "email",
                               "recipient": "a@example.com", "limit": 1},
                   "reconciled": 1, "refused": 0,
                   "caller": {"principal": OPERATOR_ARN}}}


def test_one_reconcile_by_key_names_the_caller(ops_runtime: runtime.Runtime, sts: Any, cli: Cli,
                                               conn: db.Connection) -> None:
    schedule(cli)
    conn.execute("update deliveries set state = 'unknown', reason = 'test'")
    key = one(conn, "select delivery_key from deliveries")["delivery_key"]
    answer = invoke(sts, "reconcile", {"key": key, "as": "retry", "reason": "endpoint fixed"})
    assert answer["code"] == 0, answer
    event = one(conn, "select who, detail from delivery_events where event = "
                      "'reconciled as retry'")
    assert event == {"who": OPERATOR_ARN, "detail": "endpoint fixed"}
    shown = invoke(sts, "show", {"key": key})
    assert shown["data"]["events"][-1]["who"] == OPERATOR_ARN
    assert f"operator {OPERATOR_ARN}: reconciled as retry (endpoint fixed)" in shown["text"]


def test_errors_keep_the_local_exit_statuses(ops_runtime: runtime.Runtime, sts: Any,
                                             cli: Cli) -> None:
    answer = invoke(sts, "show", {"key": "nope"})
    local = cli("show", "nope")
    assert (answer["code"], answer["error"]) == (3, "no schedule or delivery with key 'nope'")
    assert local.code == 3 and local.err == f"reminders: error: {answer['error']}\n"
    answer = invoke(sts, "tenants pause", {"tenant": "ghost"})
    assert answer["code"] == 3 and "pass --create" in answer["error"]


def test_writes_through_the_function_change_the_database(ops_runtime: runtime.Runtime,
                                                         sts: Any, cli: Cli,
                                                         conn: db.Connection) -> None:
    schedule(cli)
    dry = invoke(sts, "cancel", {"key": "inv-1", "dry_run": True})
    assert dry["code"] == 0 and len(dry["data"]["would_suppress"]) == 1
    done = invoke(sts, "cancel", {"key": "inv-1", "reason": "customer left"})
    assert done["data"] == {"tenant": "acme", "schedule_key": "inv-1", "suppressed": 1,
                            "changed": True}
    assert one(conn, "select state from schedules")["state"] == "cancelled"
    paused = invoke(sts, "tenants pause", {"tenant": "acme", "reason": "INC-7"})
    assert paused["data"] == {"tenant": "acme", "paused": True, "changed": True}
    again = invoke(sts, "tenants pause", {"tenant": "acme"})  # no change: nothing recorded
    assert again["text"] == "tenant acme paused (already)"
    listed = invoke(sts, "tenants list")
    assert [t["paused"] for t in listed["data"]] == [True]
    # Who did it is the proven caller, in Postgres beside the command line's and the console's.
    rows = conn.execute("select who, via, action, object, name, tenant, reason "
                        "from operator_actions order by id").fetchall()
    assert rows == [
        {"who": OPERATOR_ARN, "via": "ops", "action": "cancelled", "object": "schedule",
         "name": "inv-1", "tenant": "acme", "reason": "customer left"},
        {"who": OPERATOR_ARN, "via": "ops", "action": "paused", "object": "tenant",
         "name": "acme", "tenant": "acme", "reason": "INC-7"}]


def test_the_attention_list_and_reasons_are_checked_as_locally(
        ops_runtime: runtime.Runtime, sts: Any, cli: Cli, conn: db.Connection) -> None:
    schedule(cli)
    schedule(cli, "inv-2")
    conn.execute("update deliveries set state = 'dead', reason = 'budget spent' "
                 "where schedule_id = (select id from schedules where schedule_key = 'inv-2')")
    answer = invoke(sts, "list", {"attention": True})
    assert [(r["state"], r["reason"]) for r in answer["data"]] == [("dead", "budget spent")]
    assert answer["data"] == cli("list", "--attention", "--json").json()
    answer = invoke(sts, "list", {"attention": True, "state": "scheduled"})
    assert answer["code"] == 2
    assert answer["error"] == "state must be one of unknown, dead, failed, stale, got 'scheduled'"
    for command, args in (("tenants pause", {"tenant": "acme", "reason": "a\nb"}),
                          ("cancel", {"key": "inv-1", "reason": "a\nb"})):
        answer = invoke(sts, command, args)
        local = cli(*command.split(), args.get("key") or args["tenant"], "--reason", "a\nb")
        assert (answer["code"], answer["error"]) == (2, "--reason: contains a line break: "
                                                        "'a\\nb'")
        assert (local.code, local.err) == (2, f"reminders: error: {answer['error']}\n")
    answer = invoke(sts, "tenants resume", {"tenant": "acme", "reason": " "})
    assert answer["error"] == "--reason: empty; say why, or leave --reason out"
    assert conn.execute("select count(*) as n from operator_actions").fetchone() == {"n": 0}
    assert one(conn, "select state from schedules where schedule_key = 'inv-1'")["state"] == (
        "active")


# Every command the operations function runs that takes a reason, and whether it needs one.
REMOTE_REASONS: dict[str, tuple[str, dict[str, Any], bool]] = {
    "reconcile": ("reconcile", {"key": "KEY", "as": "failed"}, True),
    "reconcile bulk": ("reconcile", {"state": "unknown", "tenant": "acme", "as": "failed"}, True),
    "cancel": ("cancel", {"key": "inv-1"}, False),
    "tenants pause": ("tenants pause", {"tenant": "acme"}, False),
    "tenants resume": ("tenants resume", {"tenant": "acme"}, False),
    "schedules pause": ("schedules pause", {"key": "inv-1"}, False),
    "schedules resume": ("schedules resume", {"key": "inv-1"}, False),
    "schedules trigger": ("schedules trigger", {"key": "inv-1"}, False),
    "schedules backfill": ("schedules backfill", {"key": "inv-1", "from": "2027-03-01T00:00:00Z",
                                                  "to": "2027-03-01T09:00:00Z"}, False),
}


@pytest.mark.parametrize("name", REMOTE_REASONS)
def test_a_reason_is_refused_as_locally_through_the_operations_function(
        ops_runtime: runtime.Runtime, sts: Any, cli: Cli, conn: db.Connection,
        name: str) -> None:
    from reminders.ops import COMMANDS

    assert {c for c, (allowed, _) in COMMANDS.items() if "reason" in allowed} == {
        command for command, _, _ in REMOTE_REASONS.values()}
    schedule(cli)
    conn.execute("update deliveries set state = 'unknown', reason = 'test'")
    command, args, required = REMOTE_REASONS[name]
    if args.get("key") == "KEY":
        args = {**args, "key": one(conn, "select delivery_key from deliveries")["delivery_key"]}
    blank = BLANK_REQUIRED if required else BLANK_OPTIONAL
    cases = [*BAD_REASONS.values(), ("a\x00b", "--reason: contains a control character: "
                                               "'a\\x00b'"),
             (" ", blank), ("", blank)]
    for reason, line in cases:
        answer = invoke(sts, command, {**args, "reason": reason})
        assert (answer["code"], answer["error"]) == (2, line), reason
    assert conn.execute("select count(*) as n from operator_actions").fetchone() == {"n": 0}
    assert one(conn, "select state from deliveries")["state"] == "unknown"
    assert one(conn, "select state from schedules")["state"] == "active"


@pytest.mark.parametrize(("command", "args", "line"), [
    ("drop", {}, "request: command must be one of status, show, list, reconcile, cancel, "
                 "tenants pause, tenants resume, tenants list, schedules list, schedules show, "
                 "schedules pause, schedules resume, schedules trigger, schedules backfill, "
                 "got 'drop'"),
    ("status", {"sql": "select 1"}, "status: no argument 'sql' through the operations function"),
    ("list", {"limit": 5000}, "--limit: must be from 1 to 1000 through the operations "
                              "function, got 5000"),
    ("list", {"limit": "10"}, "--limit: must be a whole number, got '10'"),
    ("list", {"state": "gone"}, "--state: must be one of scheduled, leased, retrying, sent, "
                                "failed, suppressed, stale, unknown, dead, got 'gone'"),
    ("show", {}, "show: --key is required"),
    ("reconcile", {"key": "k", "as": "sent"}, "reconcile: --reason is required"),
    ("cancel", {"key": "a\nb"}, "--key: contains a control character"),
    ("tenants pause", {"tenant": "x", "create": "yes"}, "--create: must be true or false, "
                                                        "got 'yes'"),
], ids=["command", "argument", "limit", "type", "choice", "required", "reason", "newline",
        "bool"])
def test_a_request_outside_the_allow_list_is_refused_before_anything_runs(
        ops_runtime: runtime.Runtime, sts: Any, conn: db.Connection, command: str,
        args: dict[str, Any], line: str) -> None:
    answer = invoke(sts, command, args)
    assert answer == {"version": 1, "code": 2, "error": line, "caller": None}
    assert conn.execute("select count(*) as n from tenants").fetchone() == {"n": 0}


def test_a_request_without_a_valid_proof_is_refused(ops_runtime: runtime.Runtime, sts: Any,
                                                    sts_endpoint: str) -> None:
    event = ops_client.request("status", {}, sts, "Reminders-ops-read")
    without = {**event, "identity": {"claimed_arn": "arn:aws:iam::1:user/root"}}
    answer = handler(without, Context("Reminders-ops-read"))
    assert answer["code"] == 2 and "identity.proof is required" in answer["error"]
    # A proof aimed anywhere but the function's own STS endpoint is never fetched.
    elsewhere = event["identity"]["proof"].replace(sts_endpoint, "http://169.254.169.254")
    answer = handler({**event, "identity": {**event["identity"], "proof": elsewhere}},
                     Context("Reminders-ops-read"))
    assert answer["error"] == f"identity: the proof is not a request to {sts_endpoint}"
    # Another STS action, or a proof that does not sign the command's digest.
    other = event["identity"]["proof"].replace("GetCallerIdentity", "AssumeRole")
    answer = handler({**event, "identity": {**event["identity"], "proof": other}},
                     Context("Reminders-ops-read"))
    assert answer["error"] == "identity: the proof is not a GetCallerIdentity request"
    unbound = event["identity"]["proof"].replace("x-reminders-request", "x-other")
    answer = handler({**event, "identity": {**event["identity"], "proof": unbound}},
                     Context("Reminders-ops-read"))
    assert answer["error"] == "identity: the proof does not sign x-reminders-request"


def test_a_proof_for_other_arguments_is_refused_by_sts(ops_runtime: runtime.Runtime, sts: Any,
                                                      cli: Cli, conn: db.Connection) -> None:
    """The proof binds the command and every argument: STS (the stand-in) recomputes the
    signature with the digest of what the function received, and a changed argument, or
    another command, changes the signed header's value."""
    schedule(cli)
    args = {"key": "inv-1", "reason": "customer left"}
    event = ops_client.request("cancel", args, sts, "Reminders-ops-write")
    for changed in ({**event, "args": {**args, "reason": "customer stayed"}},
                    {**event, "args": {**args, "key": "inv-2"}},
                    {**event, "args": {**args, "dry_run": False}},
                    {**event, "command": "tenants pause", "args": {"tenant": "acme"}}):
        answer = handler(changed, Context("Reminders-ops-write"))
        assert answer["code"] == 2, answer
        assert answer["error"] == (
            "identity: STS refused the proof (HTTP 403 SignatureDoesNotMatch): it expired, "
            "was altered, or was signed for another command")
    assert one(conn, "select state from schedules")["state"] == "active"
    answer = handler(event, Context("Reminders-ops-write"))  # the proof as signed: good
    assert (answer["code"], answer["caller"]) == (0, OPERATOR_ARN), answer
    assert one(conn, "select state from schedules")["state"] == "cancelled"


@pytest.fixture
def own_sts(ops_runtime: runtime.Runtime, moto_endpoint: str,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[StsStandIn]:
    """A stand-in of the test's own (which it may stop, or make fail) as the function's STS."""
    stand_in = StsStandIn(region=stack.REGION)
    key = operator(moto_endpoint)
    stand_in.registry.add(Principal(key.access_key, key.secret_key, OPERATOR_ARN))
    monkeypatch.setenv("REMINDERS_STS_ENDPOINT", stand_in.start())
    yield stand_in
    stand_in.stop()


def test_sts_down_is_unreachable_not_a_refused_proof(own_sts: StsStandIn, cli: Cli,
                                                      conn: db.Connection,
                                                      moto_endpoint: str) -> None:
    schedule(cli)
    event = ops_client.request("cancel", {"key": "inv-1"}, stack.aws_client(
        "sts", own_sts.url, credentials=operator(moto_endpoint)), "Reminders-ops-write")
    own_sts.fault = 500
    answer = handler(event, Context("Reminders-ops-write"))
    assert answer == {"version": 1, "code": 5, "caller": None, "error": (
        "identity: STS could not check the proof (HTTP 500 ServiceUnavailable); nothing ran, "
        "try again")}
    own_sts.fault = None
    own_sts.stop()
    answer = handler(event, Context("Reminders-ops-write"))
    assert answer["code"] == 5, answer
    assert answer["error"].startswith(f"identity: STS could not be reached at {own_sts.url} (")
    assert answer["error"].endswith("); nothing ran, try again")
    assert "altered" not in answer["error"]
    assert one(conn, "select state from schedules")["state"] == "active"


def test_a_caller_from_another_account_is_refused(ops_runtime: runtime.Runtime,
                                                  sts: Any) -> None:
    there = Context("Reminders-ops-read", account="999999999999")
    # A proof for the function of the caller's own account is not for this one.
    answer = invoke(sts, "status", {}, there)
    assert (answer["code"], answer["caller"]) == (2, None)
    assert answer["error"] == (
        f"identity: the proof is for arn:aws:lambda:{stack.REGION}:{ACCOUNT}:function:"
        f"Reminders-ops-read, not this function ({there.invoked_function_arn})")
    # One made for this function (by its ARN): STS names a caller of another account.
    event = ops_client.request("status", {}, sts, there.invoked_function_arn)
    answer = handler(event, there)
    assert answer["code"] == 2
    assert answer["error"] == (f"identity: the caller belongs to account {ACCOUNT}, not this "
                               "function's")


# ---------------------------------------------------------------- reads and writes apart


def test_each_operations_function_serves_its_own_kind_of_command_only(
        ops_runtime: runtime.Runtime, sts: Any, cli: Cli, conn: db.Connection) -> None:
    """STACK-ops-read and STACK-ops-write are one code with REMINDERS_OPS_SERVES: whoever may
    invoke the read function (a reader's permission) cannot write through it, and a write
    command is refused there before its proof is even checked."""
    from reminders.ops import COMMANDS, READS, WRITES

    assert set(COMMANDS) == READS | WRITES and not READS & WRITES
    assert {"status", "show", "list", "tenants list", "schedules list", "schedules show"} == READS
    schedule(cli)
    reader = Context("Reminders-ops-read")
    event = ops_client.request("cancel", {"key": "inv-1"}, sts, reader.function_name)
    answer = handler(event, reader)
    assert answer == {"version": 1, "code": 2, "caller": None, "error": (
        "request: cancel is a write command; this operations function serves the read "
        "commands only (status, show, list, tenants list, schedules list, schedules show): send "
        "it to the stack's ops-write function")}
    assert one(conn, "select state from schedules")["state"] == "active"
    writer = Context("Reminders-ops-write")
    event = ops_client.request("status", {}, sts, writer.function_name)
    assert handler(event, writer)["error"] == (
        "request: status is a read command; this operations function serves the write "
        "commands only (reconcile, cancel, tenants pause, tenants resume, schedules pause, "
        "schedules resume, schedules trigger, schedules backfill): send it to the stack's "
        "ops-read function")
    assert conn.execute("select count(*) as n from identity_proofs").fetchone() == {"n": 0}
    # Each where it belongs.
    assert invoke(sts, "cancel", {"key": "inv-1"})["code"] == 0
    assert invoke(sts, "status")["code"] == 0
    assert one(conn, "select state from schedules")["state"] == "cancelled"


def test_an_operations_function_without_its_kind_refuses_every_command(
        ops_runtime: runtime.Runtime, sts: Any) -> None:
    event = ops_client.request("status", {}, sts, "Reminders-ops-read")
    assert os.environ.get(ops.SERVES_ENV) is None
    answer = ops_handler(event, Context("Reminders-ops-read"))
    assert answer == {"version": 1, "code": 2, "caller": None, "error": (
        "REMINDERS_OPS_SERVES must be read or write (the commands this operations function "
        "serves), got ''")}


# ---------------------------------------------------------------- the proof is not a bearer token


PAUSE = ("tenants pause", {"tenant": "acme", "create": True, "reason": "INC-3"})
USED = ("identity: this proof was used already (a proof is good for one command, once; run "
        "the command again for a new one)")


def paused(conn: db.Connection) -> list[Any]:
    return [r["paused"] for r in conn.execute("select paused from tenants").fetchall()]


def test_a_captured_proof_is_refused_a_second_time(ops_runtime: runtime.Runtime, sts: Any,
                                                   conn: db.Connection) -> None:
    """Whoever captures a request (a log, a proxy, a shared terminal) cannot run it again as
    its signer: the proof is remembered in Postgres until it expires."""
    event = json.loads(json.dumps(ops_client.request(*PAUSE, sts, "Reminders-ops-write")))
    assert handler(event, Context("Reminders-ops-write"))["code"] == 0
    assert paused(conn) == [True]
    conn.execute("update tenants set paused = false")
    again = handler(json.loads(json.dumps(event)), Context("Reminders-ops-write"))
    assert again == {"version": 1, "code": 2, "error": USED, "caller": OPERATOR_ARN}
    assert paused(conn) == [False]
    assert conn.execute("select count(*) as n from operator_actions").fetchone() == {"n": 1}
    (kept,) = conn.execute("select caller_arn, command, expires_at - accepted_at <= "
                           "interval '120 seconds' as bounded from identity_proofs").fetchall()
    assert kept == {"caller_arn": OPERATOR_ARN, "command": "tenants pause", "bounded": True}


def test_a_proof_for_another_stacks_function_is_refused(ops_runtime: runtime.Runtime, sts: Any,
                                                        conn: db.Connection) -> None:
    """A proof made for another stack's operations function (same account, same caller) does
    not run here, even with the request's audience rewritten to this function: the function
    computes the signed digest with its own ARN."""
    event = ops_client.request(*PAUSE, sts, "Other-ops-write")
    here = Context("Reminders-ops-write")
    answer = handler(event, here)
    assert answer["error"] == (
        f"identity: the proof is for arn:aws:lambda:{stack.REGION}:{ACCOUNT}:function:"
        f"Other-ops-write, not this function ({here.invoked_function_arn})")
    rewritten = {**event, "identity": {**event["identity"],
                                       "audience": here.invoked_function_arn}}
    answer = handler(rewritten, here)
    assert answer["code"] == 2
    assert answer["error"].startswith("identity: STS refused the proof (HTTP 403 "
                                      "SignatureDoesNotMatch)")
    # Nor without the claim, nor with another nonce: the nonce is signed too.
    unclaimed = {**event, "identity": {k: v for k, v in event["identity"].items()
                                       if k != "audience"}}
    assert handler(unclaimed, here)["error"] == answer["error"]
    renonced = {**event, "identity": {**event["identity"], "audience": here.invoked_function_arn,
                                      "nonce": "0" * 32}}
    assert handler(renonced, here)["error"] == answer["error"]
    assert paused(conn) == []
    assert handler(event, Context("Other-ops-write"))["code"] == 0  # where it was made for
    assert paused(conn) == [True]


def test_a_proof_signed_more_than_120_s_from_the_functions_clock_is_refused(
        ops_runtime: runtime.Runtime, sts: Any, conn: db.Connection) -> None:
    clock = ops_runtime.clock
    assert isinstance(clock, SigningClock)
    event = ops_client.request(*PAUSE, sts, "Reminders-ops-write")
    clock.advance(timedelta(seconds=122))
    answer = handler(event, Context("Reminders-ops-write"))
    assert answer["code"] == 2, answer
    assert answer["error"].startswith("identity: the proof was signed 12")
    assert answer["error"].endswith(" s ago; a proof is good for 120 s (run the command again, "
                                    "and check the clock where it runs)")
    clock.advance(timedelta(seconds=-244))  # a proof from the function's future
    answer = handler(event, Context("Reminders-ops-write"))
    assert "s ahead of the function's clock; a proof is good for 120 s" in answer["error"]
    assert paused(conn) == []
    clock.advance(timedelta(seconds=122 + 100))  # 100 s old: still good
    assert handler(event, Context("Reminders-ops-write"))["code"] == 0
    assert paused(conn) == [True]


@pytest.mark.parametrize("seconds", [900, 121])
def test_a_proof_good_for_more_than_120_s_is_refused(ops_runtime: runtime.Runtime, sts: Any,
                                                     conn: db.Connection, seconds: int) -> None:
    from reminders.identity import presign

    event = ops_client.request(*PAUSE, sts, "Reminders-ops-write")
    digest = ops.parse_request(event).digest(event["identity"]["audience"])
    longer = {**event, "identity": {**event["identity"],
                                    "proof": presign(sts, digest, seconds=seconds)}}
    answer = handler(longer, Context("Reminders-ops-write"))
    assert answer == {"version": 1, "code": 2, "caller": None, "error": (
        f"identity: the proof must expire within 120 s (X-Amz-Expires '{seconds}')")}
    assert paused(conn) == []
    good = {**event, "identity": {**event["identity"], "proof": presign(sts, digest,
                                                                          seconds=120)}}
    assert handler(good, Context("Reminders-ops-write"))["code"] == 0


def test_two_uses_of_one_proof_at_once_run_it_once(ops_runtime: runtime.Runtime, sts: Any,
                                                   sts_endpoint: str, database_url: str,
                                                   conn: db.Connection) -> None:
    """Both uses pass STS; both then claim the proof. The primary key decides: the test holds
    the claim's row in an open transaction until both are waiting on it, then lets go, and
    exactly one runs the command."""
    event = ops_client.request(*PAUSE, sts, "Reminders-ops-write")
    audience = Context("Reminders-ops-write").invoked_function_arn
    digest = ops.parse_request(event).digest(audience)
    answers: list[dict[str, Any]] = []

    def use() -> None:
        with db.connect(database_url) as own:
            answers.append(ops.handle(json.loads(json.dumps(event)), connection=lambda: own,
                                      now=ops_runtime.clock.now, queue_counts=None,
                                      sts_endpoint=sts_endpoint, account=ACCOUNT,
                                      audience=audience, serves="write"))

    with db.connect(database_url) as blocker, blocker.transaction():
        blocker.execute("insert into identity_proofs values (%s, 'test', 'test', now(), "
                        "now())", (digest,))
        threads = [threading.Thread(target=use) for _ in range(2)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            waiting = conn.execute(
                "select count(*) as n from pg_stat_activity where wait_event_type = 'Lock' "
                "and query like '%%identity_proofs%%'").fetchone()
            if waiting == {"n": 2}:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the two uses never both waited on the claim")
        raise psycopg.Rollback()  # lets both go: one claims, the other finds it
    for thread in threads:
        thread.join(30)
    assert sorted(a["code"] for a in answers) == [0, 2], answers
    assert [a["error"] for a in answers if a["code"] == 2] == [USED]
    assert paused(conn) == [True]
    assert conn.execute("select count(*) as n from operator_actions").fetchone() == {"n": 1}


def test_expired_proofs_are_forgotten_a_bounded_batch_at_a_time(
        ops_runtime: runtime.Runtime, sts: Any, conn: db.Connection) -> None:
    now = ops_runtime.clock.now()
    conn.execute("insert into identity_proofs select md5(i::text) || md5(i::text), 'x', 'status',"
                 " %s, %s from generate_series(1, %s) as i",
                 (now - timedelta(seconds=300), now - timedelta(seconds=1),
                  ops.PROOF_PURGE_BATCH + 30))
    conn.execute("insert into identity_proofs values (repeat('a', 64), 'x', 'status', %s, %s)",
                 (now, now + timedelta(seconds=60)))
    assert invoke(sts, "tenants list")["code"] == 0
    left = conn.execute("select count(*) filter (where expires_at <= %s) as expired, "
                        "count(*) filter (where expires_at > %s) as live from identity_proofs",
                        (now, now)).fetchone()
    assert left == {"expired": 30, "live": 2}
    assert invoke(sts, "tenants list")["code"] == 0
    assert conn.execute("select count(*) as n from identity_proofs where expires_at <= %s",
                        (now,)).fetchone() == {"n": 0}


# ---------------------------------------------------------------- reminders --stack, end to end


@pytest.fixture
def lambda_endpoint(ops_runtime: runtime.Runtime) -> Iterator[tuple[str, LambdaStandIn]]:
    stand_in = LambdaStandIn({"Reminders-ops-fn-read": handler, "Reminders-ops-fn-write": handler})
    url = stand_in.start()
    yield url, stand_in
    stand_in.stop()


@pytest.fixture
def deployed(moto_endpoint: str) -> str:
    """A stack in moto's CloudFormation whose output names the function; the operator has the
    documented operator policy for it."""
    name = f"Reminders{next(_stacks)}"
    template = {"Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
                "Outputs": {"OpsReadFunctionName": {"Value": "Reminders-ops-fn-read"},
                            "OpsWriteFunctionName": {"Value": "Reminders-ops-fn-write"}}}
    stack.aws_client("cloudformation", moto_endpoint).create_stack(
        StackName=name, TemplateBody=json.dumps(template))
    grant_operator(moto_endpoint, name, "Reminders-ops-fn")
    return name


@pytest.fixture
def remote(cli: Cli, moto_endpoint: str, sts_endpoint: str,
           lambda_endpoint: tuple[str, LambdaStandIn], tmp_path: Path) -> Cli:
    """The command line as the operator (an IAM user in moto, the documented operator policy
    for the stacks the test deploys) and no database of its own."""
    env = {k: v for k, v in cli.env.items() if k != "DATABASE_URL"}
    return Cli({**env, **stack.AWS_TEST_ENV, **stack.credentials_env(operator(moto_endpoint)),
                "AWS_ENDPOINT_URL": moto_endpoint,
                "AWS_ENDPOINT_URL_STS": sts_endpoint,
                "AWS_ENDPOINT_URL_LAMBDA": lambda_endpoint[0]})


def test_stack_runs_the_command_in_the_function_and_prints_as_locally(
        remote: Cli, cli: Cli, deployed: str, lambda_endpoint: tuple[str, LambdaStandIn],
        conn: db.Connection, moto_endpoint: str) -> None:
    schedule(cli)
    for command in (["status"], ["list", "--state", "scheduled"], ["show", "inv-1"],
                    ["tenants", "list"]):
        here, there = cli(*command), remote("--stack", deployed, *command)
        assert (there.code, there.err) == (0, ""), there.err
        here_json = cli(*command, "--json").json()
        there_json = remote("--stack", deployed, *command, "--json").json()
        if command == ["status"]:
            assert there.out.splitlines()[:2] == here.out.splitlines()[:2]
            assert there_json["by_state"] == here_json["by_state"]
        else:
            assert there.out == here.out
            assert there_json == here_json
    (call, *_) = lambda_endpoint[1].calls
    assert call["function"] == "Reminders-ops-fn-read"
    assert {c["function"] for c in lambda_endpoint[1].calls} == {"Reminders-ops-fn-read"}
    assert call["headers"].get("X-Amz-Invocation-Type") == "RequestResponse"
    sent = json.loads(call["body"])
    assert sent["command"] == "status" and sent["identity"]["claimed_arn"] == OPERATOR_ARN
    # A write, and its exit status and text, through the function.
    got = remote("--stack", deployed, "cancel", "inv-1")
    assert (got.code, got.out, got.err) == (0, "cancelled inv-1: 1 pending deliveries "
                                               "suppressed\n", "")
    assert one(conn, "select state from schedules")["state"] == "cancelled"
    got = remote("--stack", deployed, "tenants", "pause", "acme", "--reason", "INC-9")
    assert (got.code, got.out, got.err) == (0, "tenant acme paused\n", "")
    rows = conn.execute("select who, via, action, reason from operator_actions order by id"
                        ).fetchall()
    assert rows == [{"who": OPERATOR_ARN, "via": "ops", "action": "cancelled", "reason": None},
                    {"who": OPERATOR_ARN, "via": "ops", "action": "paused", "reason": "INC-9"}]
    sent = json.loads(lambda_endpoint[1].calls[-1]["body"])
    assert sent["args"] == {"tenant": "acme", "create": False, "reason": "INC-9"}
    # The writes went to the write function, each proof for it alone.
    writes = [c for c in lambda_endpoint[1].calls if json.loads(c["body"])["command"] in
              ("cancel", "tenants pause")]
    assert [c["function"] for c in writes] == ["Reminders-ops-fn-write"] * 2
    assert {json.loads(c["body"])["identity"]["audience"] for c in writes} == {
        f"arn:aws:lambda:{stack.REGION}:{ACCOUNT}:function:Reminders-ops-fn-write"}
    # A captured request, sent again as it went over the wire: refused, exit status 2.
    replayed = stack.aws_client("lambda", lambda_endpoint[0],
                                credentials=operator(moto_endpoint)).invoke(
        FunctionName="Reminders-ops-fn-write", Payload=writes[-1]["body"])
    answer = json.loads(replayed["Payload"].read())
    assert (answer["code"], answer["error"]) == (2, USED)


def test_stack_errors_have_the_local_lines_and_statuses(remote: Cli, cli: Cli, deployed: str,
                                                        moto_endpoint: str) -> None:
    here, there = cli("show", "nope"), remote("--stack", deployed, "show", "nope")
    assert (there.code, there.out, there.err) == (here.code, here.out, here.err) == (
        3, "", "reminders: error: no schedule or delivery with key 'nope'\n")
    got = remote("--stack", deployed, "list", "--limit", "5000")
    assert (got.code, got.err) == (2, "reminders: error: --limit: must be from 1 to 1000 "
                                      "through the operations function, got 5000\n")
    # A stack the operator may describe (the documented policy names it) that is not deployed.
    grant_operator(moto_endpoint, "NoSuchStack", "Reminders-ops")
    got = remote("--stack", "NoSuchStack", "status")
    assert got.code == 3
    assert got.err == (f"reminders: error: --stack: no stack 'NoSuchStack' in {stack.REGION} "
                       "(set AWS_REGION or AWS_PROFILE)\n")
    got = remote("--stack", deployed, "schedule", "--tenant", "a", "--channel", "sms",
                 "--recipient", "+15550100", "--at", DUE)
    assert got.code == 2 and "`schedule` does not run with --stack" in got.err
    got = remote("--stack", deployed, "drill", "garbage")
    assert got.code == 2 and "drills run on one machine only" in got.err


def test_ops_function_skips_the_stack_lookup(remote: Cli, cli: Cli) -> None:
    schedule(cli)
    got = remote("--ops-function", "Reminders-ops-fn", "status", "--json")
    assert got.json()["by_state"]["scheduled"] == 1
    got = remote("--ops-function", "missing-fn", "status")
    assert got.code == 5 and "Function not found: missing-fn-read" in got.err


def test_stack_exits_5_when_the_functions_sts_is_down(
        cli: Cli, own_sts: StsStandIn, lambda_endpoint: tuple[str, LambdaStandIn],
        remote: Cli, conn: db.Connection) -> None:
    """The command line signs with STS; by the time the function asks it, STS fails (500) or
    is gone: exit status 5 (unreachable), not a proof that "was altered"."""
    schedule(cli)
    functions = lambda_endpoint[1].functions
    here = Cli({**remote.env, "AWS_ENDPOINT_URL_STS": own_sts.url})

    def failing(event: Any, context: Any) -> Any:
        own_sts.fault = 500
        return handler(event, context)

    functions["Reminders-ops-fn-write"] = failing
    got = here("--ops-function", "Reminders-ops-fn", "cancel", "inv-1")
    assert (got.code, got.out, got.err) == (5, "", (
        "reminders: error: identity: STS could not check the proof (HTTP 500 "
        "ServiceUnavailable); nothing ran, try again\n"))

    def gone(event: Any, context: Any) -> Any:
        own_sts.stop()
        return handler(event, context)

    functions["Reminders-ops-fn-write"] = gone
    own_sts.fault = None  # up while the command line signs
    got = here("--ops-function", "Reminders-ops-fn", "cancel", "inv-1")
    assert got.code == 5, got.err
    assert got.err.startswith("reminders: error: identity: STS could not be reached at "
                              f"{own_sts.url} (")
    assert one(conn, "select state from schedules")["state"] == "active"


def test_the_log_never_holds_a_recipient_or_a_delivery_key(
        ops_runtime: runtime.Runtime, sts: Any, cli: Cli) -> None:
    """The operations function's log (kept 30 days) records each command and its arguments;
    a recipient filter and a delivery key name a person, and are logged as digests."""
    import logging

    schedule(cli)
    key = json.loads(cli("list", "--json").out)[0]["delivery_key"]
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep()
    logger = logging.getLogger("reminders")  # the service's logger (Powertools wraps it)
    logger.addHandler(keep)
    try:
        assert invoke(sts, "list", {"recipient": "a@example.com"})["code"] == 0
        assert invoke(sts, "show", {"key": key})["code"] == 0
    finally:
        logger.removeHandler(keep)
    audits = [r for r in records if r.getMessage() == "operator command done"]
    assert len(audits) == 2
    logged = " ".join(str(vars(r)) for r in records)
    assert "a@example.com" not in logged and key not in logged
    assert [str(getattr(r, "arguments", {})) for r in audits] == [
        str({"recipient": f"redacted:{_digest('a@example.com')}"}),
        str({"key": f"redacted:{_digest(key)}"})]


def _digest(value: str) -> str:
    import hashlib

    return hashlib.sha256(value.encode()).hexdigest()[:12]


def test_stack_without_a_region_is_bad_input_not_unreachable(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "REMINDERS_"))}
    env.update({"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "x",
                "HOME": str(tmp_path), "AWS_CONFIG_FILE": str(tmp_path / "none")})
    done = subprocess.run([sys.executable, "-m", "reminders.cli", "--stack", "Reminders",
                           "status"], env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("reminders: error: no AWS region: set AWS_REGION")


@pytest.mark.refusals_expected
def test_the_operator_policy_finds_only_the_stacks_it_names(remote: Cli, deployed: str,
                                                            moto_endpoint: str) -> None:
    """The documented operator policy names one stack: describing another is refused (moto
    checks DescribeStacks against the stack's ARN, as AWS does), and nothing is invoked."""
    other = f"Other{next(_stacks)}"
    template = {"Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
                "Outputs": {"OpsReadFunctionName": {"Value": "Reminders-ops-fn-read"},
                            "OpsWriteFunctionName": {"Value": "Reminders-ops-fn-write"}}}
    stack.aws_client("cloudformation", moto_endpoint).create_stack(
        StackName=other, TemplateBody=json.dumps(template))
    seen = stack.decision_count(moto_endpoint)
    got = remote("--stack", other, "status")
    assert got.code == 5
    assert "AccessDenied" in got.err and "cloudformation:DescribeStacks" in got.err
    refused = [d for d in stack.decisions(moto_endpoint, since=seen) if d["outcome"] != "allowed"]
    assert [(d["action"], d["outcome"]) for d in refused] == [
        ("cloudformation:DescribeStacks", "AccessDenied")]
    assert refused[0]["resource"].startswith(
        f"arn:aws:cloudformation:{stack.REGION}:{ACCOUNT}:stack/{other}/")
    assert remote("--stack", deployed, "status").code == 0


def test_schedule_commands_leave_the_same_rows_through_the_stack_as_locally(
        remote: Cli, cli: Cli, deployed: str, lambda_endpoint: tuple[str, LambdaStandIn],
        conn: db.Connection) -> None:
    """`schedules pause|resume|trigger` on the command line and through --stack: the same
    answers (but for the key), the same rows, and the same operator actions (but for who and
    via); list and show answer alike; the reads go to the read function, the writes to the
    write function."""
    schedule(cli, "here")
    schedule(cli, "there")

    def both(*command: str) -> None:
        mine = cli("schedules", command[0], "here", *command[1:])
        theirs = remote("--stack", deployed, "schedules", command[0], "there", *command[1:])
        assert (theirs.code, theirs.err.replace("there", "here"),
                theirs.out.replace("there", "here")) == (mine.code, mine.err, mine.out)

    both("pause", "--reason", "INC-3")
    both("pause")  # again: no change, nothing recorded
    both("trigger")  # refused while paused, alike
    both("resume", "--reason", "INC-3 done")
    assert cli("schedules", "trigger", "here").code == 0
    assert remote("--stack", deployed, "schedules", "trigger", "there").code == 0
    listed = cli("schedules", "list", "--json").json()
    assert remote("--stack", deployed, "schedules", "list", "--json").json() == listed
    assert [s["state"] for s in listed] == ["active", "active"]

    def rows(key: str) -> Any:
        return (conn.execute("select paused, state from schedules where schedule_key = %s",
                             (key,)).fetchall(),
                conn.execute("select d.origin, d.state, q.held from deliveries d"
                             " join schedules s on s.id = d.schedule_id"
                             " left join due_queue q on q.id = d.id"
                             " where s.schedule_key = %s order by d.id", (key,)).fetchall(),
                conn.execute("select action, reason from operator_actions where name = %s"
                             " order by id", (key,)).fetchall())

    assert rows("there") == rows("here")
    assert rows("here")[2] == [{"action": "paused", "reason": "INC-3"},
                               {"action": "resumed", "reason": "INC-3 done"},
                               {"action": "triggered", "reason": None}]
    assert [r["origin"] for r in rows("here")[1]] == ["series", "trigger"]
    mine = cli("schedules", "show", "here", "--json").json()
    theirs = remote("--stack", deployed, "schedules", "show", "there", "--json").json()
    assert [(a["action"], a["via"]) for a in theirs["timeline"]] == [
        (a["action"], "ops") for a in mine["timeline"]]
    assert theirs["state"] == mine["state"] == "active"
    assert {r["via"] for r in conn.execute(
        "select via from operator_actions where name = 'there'")} == {"ops"}
    commands = {json.loads(c["body"])["command"]: c["function"]
                for c in lambda_endpoint[1].calls}
    assert commands == {"schedules pause": "Reminders-ops-fn-write",
                        "schedules trigger": "Reminders-ops-fn-write",
                        "schedules resume": "Reminders-ops-fn-write",
                        "schedules show": "Reminders-ops-fn-read",
                        "schedules list": "Reminders-ops-fn-read"}
