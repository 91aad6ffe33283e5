"""The operator who runs the command line and the console on the database directly (the local
stack, or a deployed stack's database through the port-forward), as an IAM principal holding
exactly the operator-direct policy of docs/operator-access.md.

Those commands read and write Postgres themselves; their only AWS calls are the queues' depths
beside the database's counts (``status``, the console's overview: ``sqs:GetQueueAttributes``)
and sealing a webhook endpoint's signing secret (``endpoints add``, ``endpoints rotate``,
``endpoints encrypt``: ``kms:GenerateDataKey`` on the secrets key, for the endpoint-secret
purpose only). On the local stack the operator is an IAM user in moto with that policy on the
stack's own queues and key, made by ``local up``; every command that finds the stack through
``REMINDERS_HOME`` runs with its key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reminders.aws_http import Credentials
from reminders.kms import PURPOSE

POLICY_NAME = "reminders-operator-direct"
LOCAL_USER = "reminders-operator"
# The queues whose depths `status` shows, in the order the documented policy names them.
QUEUES = ("deliveries", "dlq", "parking")


def queue_arn(url: str, region: str) -> str:
    """A queue's ARN from its URL (``…/ACCOUNT/NAME``), as SQS makes it."""
    account, name = url.rstrip("/").rsplit("/", 2)[-2:]
    return f"arn:aws:sqs:{region}:{account}:{name}"


def direct_policy(queue_arns: Mapping[str, str], secrets_key_arn: str) -> dict[str, Any]:
    """The operator-direct policy for these queues (by name: deliveries, dlq, parking; those
    absent are left out) and the secrets key."""
    statements: list[dict[str, Any]] = []
    named = [queue_arns[name] for name in QUEUES if name in queue_arns]
    if named:
        statements.append({"Sid": "ReadQueueDepths", "Effect": "Allow",
                           "Action": "sqs:GetQueueAttributes", "Resource": named})
    statements.append({"Sid": "SealEndpointSecrets", "Effect": "Allow",
                       "Action": "kms:GenerateDataKey", "Resource": secrets_key_arn,
                       "Condition": {"StringEquals": {"kms:EncryptionContext:purpose":
                                                      PURPOSE}}})
    return {"Version": "2012-10-17", "Statement": statements}


def grant(iam: Any, user: str, document: Mapping[str, Any],
          known: Credentials | None = None) -> Credentials:
    """The IAM user ``user`` (made when missing) holding ``document`` as its only policy
    (replaced, so a stack whose queues were made again is granted the new ones), and its key:
    ``known`` when given (the stack recorded it), else a new one."""
    import contextlib
    import json

    with contextlib.suppress(iam.exceptions.EntityAlreadyExistsException):
        iam.create_user(UserName=user)
    iam.put_user_policy(UserName=user, PolicyName=POLICY_NAME,
                        PolicyDocument=json.dumps(document))
    if known is not None:
        return known
    key = iam.create_access_key(UserName=user)["AccessKey"]
    return Credentials(key["AccessKeyId"], key["SecretAccessKey"])
