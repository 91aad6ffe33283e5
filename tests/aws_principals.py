"""The AWS principals the tests run as, made once per moto server (a module of its own: pytest
may import conftest.py twice, once as ``conftest`` and once as ``tests.conftest``, and each
copy would cache its own)."""

from __future__ import annotations

import functools
import itertools
import json
from pathlib import Path
from typing import Any

from reminders import config
from reminders.aws_http import Credentials
from reminders.local import operator_access, roles, stack
from reminders.local.moto_server import ACCOUNT


@functools.cache
def secrets_key(endpoint: str) -> str:
    """The KMS key (in the moto server at ``endpoint``) the tests seal webhook secrets with."""
    return stack.create_secrets_key(endpoint)


@functools.cache
def function_roles(endpoint: str, urls: config.QueueUrls) -> dict[str, roles.FunctionRole]:
    """Each service function's role in the moto server at ``endpoint``, granted what the
    template (the variant whose scanner publishes itself, as the tests' runtime does) grants
    it, on these queues and the tests' secrets key."""
    return make_roles(endpoint, urls)


def make_roles(endpoint: str, urls: config.QueueUrls,
               functions: tuple[str, ...] = roles.SERVICE_FUNCTIONS,
               **resources: str) -> dict[str, roles.FunctionRole]:
    """Roles for ``functions`` as :func:`function_roles` makes them, with ``resources`` (the
    ARNs of more local resources by roles.LOCAL_RESOURCES name: ``app_secret``) resolved too;
    new ones every call."""
    return roles.local_roles(endpoint, urls, secrets_key(endpoint), functions=functions,
                             **resources)


# The operator the tests' STS stand-in names for the operator's key (see operator()).
OPERATOR_ARN = f"arn:aws:iam::{ACCOUNT}:user/operator"
_OPERATOR_ACCESS = Path(__file__).resolve().parents[1] / "docs" / "operator-access.md"


OPERATOR_KINDS = ("read", "write")


def readme_operator_policy(*, region: str, account: str, stack_name: str,
                           function_name: str, kind: str) -> dict[str, Any]:
    """The operator-read or operator-write policy (``kind``) of docs/operator-access.md, under
    "The IAM permissions an operator needs", with its account, region, stack name and function
    name prefix (``STACK-ops``: the functions are ``STACK-ops-read`` and ``STACK-ops-write``)
    replaced, as the page tells the reader to."""
    text = _OPERATOR_ACCESS.read_text()
    after = text.split("The IAM permissions an operator needs", 1)[1]
    after = after.split(f"operator-{kind} policy", 1)[1]
    block = after.split("```json\n", 1)[1].split("```", 1)[0]
    document: dict[str, Any] = json.loads(block)
    for statement in document["Statement"]:
        statement["Resource"] = (
            statement["Resource"].replace("eu-west-1", region).replace("111122223333", account)
            .replace("stack/Reminders/", f"stack/{stack_name}/")
            .replace("function:Reminders-ops", f"function:{function_name}"))
    return document


@functools.cache
def operator(endpoint: str) -> Credentials:
    """An IAM user "operator" in the moto server at ``endpoint`` with an access key and no
    permissions yet (grant_operator gives it the documented ones, for a stack)."""
    iam = stack.aws_client("iam", endpoint)
    iam.create_user(UserName="operator")
    key = iam.create_access_key(UserName="operator")["AccessKey"]
    return Credentials(key["AccessKeyId"], key["SecretAccessKey"])


def grant_operator(endpoint: str, stack_name: str, function_name: str,
                   kinds: tuple[str, ...] = OPERATOR_KINDS) -> None:
    """Give the operator the documented operator policies (``kinds``: read, write) for
    ``stack_name`` and its functions ``function_name``-read and -write (one policy per stack
    and kind, as an administrator would name it)."""
    operator(endpoint)
    for kind in kinds:
        document = readme_operator_policy(region=stack.REGION, account=ACCOUNT,
                                          stack_name=stack_name, function_name=function_name,
                                          kind=kind)
        stack.aws_client("iam", endpoint).put_user_policy(
            UserName="operator", PolicyName=f"reminders-operator-{kind}-{stack_name}",
            PolicyDocument=json.dumps(document))


def readme_direct_policy(*, queue_arns: dict[str, str], secrets_key_arn: str) -> dict[str, Any]:
    """The operator-direct policy of docs/operator-access.md, with the stack's queue ARNs
    (deliveries, dlq, parking: the ``DeliveriesQueueArn``, ``DeadLetterQueueArn`` and
    ``ParkingQueueArn`` outputs) and key ARN in place of its examples, as the page tells the
    reader to."""
    text = _OPERATOR_ACCESS.read_text()
    after = text.split("The operator-direct policy (`reminders-operator-direct`)", 1)[1]
    block = after.split("```json\n", 1)[1].split("```", 1)[0]
    examples = {"deliveries": "arn:aws:sqs:eu-west-1:111122223333:Reminders-Deliveries",
                "dlq": "arn:aws:sqs:eu-west-1:111122223333:Reminders-DeadLetter",
                "parking": "arn:aws:sqs:eu-west-1:111122223333:Reminders-Parking"}
    key_example = "arn:aws:kms:eu-west-1:111122223333:key/SECRETS-KEY-ID"
    assert key_example in block and all(arn in block for arn in examples.values()), block
    for name, arn in examples.items():
        block = block.replace(arn, queue_arns[name])
    document: dict[str, Any] = json.loads(block.replace(key_example, secrets_key_arn))
    assert "111122223333" not in json.dumps(document), document
    return document


_direct_operators = itertools.count()


def direct_operator(endpoint: str, urls: config.QueueUrls | None) -> Credentials:
    """A new IAM user in the moto server at ``endpoint`` holding the documented operator-direct
    policy on these queues (None: on none, for a command line given no queues) and the tests'
    secrets key: what the command line and the console run as on the database directly."""
    key_arn = secrets_key(endpoint)
    if urls is None:
        document = operator_access.direct_policy({}, key_arn)
    else:
        arns = {name: operator_access.queue_arn(url, stack.REGION) for name, url in
                (("deliveries", urls.deliveries), ("dlq", urls.dlq), ("parking", urls.parking))}
        document = readme_direct_policy(queue_arns=arns, secrets_key_arn=key_arn)
    return operator_access.grant(stack.aws_client("iam", endpoint),
                                 f"operator-direct-{next(_direct_operators)}", document)
