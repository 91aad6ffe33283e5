"""The command line's side of ``--stack``: find the stack's operations function for the
command (a read command goes to STACK-ops-read, a write to STACK-ops-write: each has its own
concurrency and its own permission), prove who is calling, invoke it with the caller's IAM
credentials, and hand back its :class:`Outcome`.

The invoker is a port: :class:`LambdaInvoker` (reminders.lambdas) calls Lambda's Invoke API
with boto3; tests and other callers may install another with :func:`install_invoker` (for
instance one that calls the handler in the same process).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from reminders.errors import CommandFailed, InvalidInput, NotFound
from reminders.lambdas import LambdaInvoker
from reminders.outcome import EXIT_UNAVAILABLE, EXIT_USAGE, Outcome

# The stack outputs that name the operations functions (infra/stack.py), by the kind of
# command each serves.
OUTPUT_KEYS = {"read": "OpsReadFunctionName", "write": "OpsWriteFunctionName"}
VERSION = 1
# The function's timeout is at most this (infra: opsTimeoutSeconds); the read waits longer.
INVOKE_READ_TIMEOUT_SECONDS = 330


class Invoker(Protocol):
    function_name: str  # the proof's audience is this function

    def invoke(self, payload: dict[str, Any]) -> dict[str, Any]: ...


def lambda_client() -> Any:
    from botocore.config import Config

    from reminders import aws

    return aws.send_client("lambda", Config(
        retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=5,
        read_timeout=INVOKE_READ_TIMEOUT_SECONDS))


def function_for_stack(stack: str, cloudformation: Any, kind: str) -> str:
    """The function named by the stack's output for ``kind`` (read or write) commands."""
    from botocore.exceptions import ClientError

    try:
        stacks = cloudformation.describe_stacks(StackName=stack)["Stacks"]
    except ClientError as exc:
        if "does not exist" in str(exc.response.get("Error", {}).get("Message", "")):
            region = cloudformation.meta.region_name
            raise NotFound(f"--stack: no stack {stack!r} in {region} (set AWS_REGION or "
                           "AWS_PROFILE)") from None
        raise
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
    key = OUTPUT_KEYS[kind]
    if key not in outputs:
        raise NotFound(f"--stack: stack {stack!r} has no {key} output (deployed before the "
                       "operations functions were split into read and write? deploy it again)")
    return str(outputs[key])


def function_for_prefix(prefix: str, kind: str) -> str:
    """``--ops-function NAME``: the functions are NAME-read and NAME-write."""
    return f"{prefix}-{kind}"


def _boto_invoker(stack: str | None, function_name: str | None, kind: str) -> Invoker:
    from reminders import aws

    name = function_for_prefix(function_name, kind) if function_name else \
        function_for_stack(str(stack), aws.client("cloudformation"), kind)
    return LambdaInvoker(name, lambda_client())


_make_invoker: Callable[[str | None, str | None, str], Invoker] = _boto_invoker


def install_invoker(factory: Callable[[str | None, str | None, str], Invoker] | None) -> None:
    """Use ``factory(stack, function_name, kind)`` to reach the function for ``kind`` (read or
    write) commands; None: Lambda via boto3."""
    global _make_invoker
    _make_invoker = factory or _boto_invoker


def request(command: str, arguments: dict[str, Any], sts: Any,
            function_name: str) -> dict[str, Any]:
    """The request: the command, its arguments and the proof of who asks (signed by ``sts``'s
    credentials, bound to this command, to the function ``function_name`` in ``sts``'s region
    and the caller's account, and to a fresh nonce), with the caller's own idea of who that
    is and which function the proof is for."""
    from reminders.identity import function_arn, new_nonce, presign, request_digest

    claimed = sts.get_caller_identity()
    audience = function_arn(function_name, partition=sts.meta.partition,
                            region=sts.meta.region_name, account=str(claimed.get("Account")))
    nonce = new_nonce()
    digest = request_digest(command, arguments, audience=audience, nonce=nonce)
    return {"version": VERSION, "command": command, "args": arguments,
            "identity": {"proof": presign(sts, digest), "nonce": nonce, "audience": audience,
                         "claimed_arn": claimed.get("Arn")}}


def outcome_of(answer: dict[str, Any]) -> Outcome:
    """The function's answer as the Outcome the local command would have returned; a failure
    raises CommandFailed with the function's line and exit status."""
    if answer.get("version") != VERSION or not isinstance(answer.get("code"), int):
        raise CommandFailed("the operations function answered in a form this command line "
                            "does not know (deploy the same version)", code=EXIT_UNAVAILABLE)
    if answer.get("error") is not None:
        raise CommandFailed(str(answer["error"]), code=int(answer["code"]))
    notes = answer.get("notes") or []
    json_notes = answer.get("json_notes") or []
    return Outcome(answer.get("data"), answer.get("text"), int(answer["code"]),
                   [str(n) for n in notes], [str(n) for n in json_notes])


def run_remote(command: str, arguments: dict[str, Any], *, stack: str | None,
               function_name: str | None) -> Outcome:
    from reminders import aws

    if not (stack or function_name):
        raise InvalidInput("give --stack NAME or --ops-function NAME")
    if command not in _COMMANDS:
        raise CommandFailed(f"{command} does not run through the operations function",
                            code=EXIT_USAGE)
    from reminders.ops import kind_of

    region = aws.region()  # none: bad input, before any client is made
    invoker = _make_invoker(stack, function_name, kind_of(command))
    # The proof is signed for the stack's region's STS host, the one the function accepts,
    # and for this function alone.
    return outcome_of(invoker.invoke(request(command, arguments, aws.sts_client(region),
                                             invoker.function_name)))


_COMMANDS = ("status", "show", "list", "reconcile", "cancel", "tenants pause",
             "tenants resume", "tenants list", "schedules list", "schedules show",
             "schedules pause", "schedules resume", "schedules trigger", "schedules backfill")
