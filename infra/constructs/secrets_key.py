"""The KMS key the webhook signing secrets are sealed with (envelope encryption).

The key policy names who may do what, with nothing left to IAM alone:

- the account administers the key (no cryptographic use comes with that);
- the consumer's role may ``kms:Decrypt``, and only data keys made for endpoint secrets (the
  encryption context ``purpose``), which the consumer unwraps once per cold start;
- whoever registers or rotates endpoints (the ``reminders endpoints`` commands, run by an
  operator) needs ``kms:GenerateDataKey`` with the same context, granted in their own IAM
  policy: the key policy delegates that one action to the account's IAM policies. Nobody but
  the consumer can decrypt.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

# reminders.kms.PURPOSE: the encryption context every call names.
PURPOSE = "reminders-endpoint-secret"
ADMIN_ACTIONS = [
    "kms:Create*",
    "kms:Describe*",
    "kms:Enable*",
    "kms:List*",
    "kms:Put*",
    "kms:Update*",
    "kms:Revoke*",
    "kms:Disable*",
    "kms:Get*",
    "kms:Delete*",
    "kms:TagResource",
    "kms:UntagResource",
    "kms:ScheduleKeyDeletion",
    "kms:CancelKeyDeletion",
    "kms:RotateKeyOnDemand",
]
FOR_ENDPOINT_SECRETS = {"StringEquals": {"kms:EncryptionContext:purpose": PURPOSE}}


class SecretsKey(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, decrypters: Sequence[iam.IRole]
    ) -> None:
        super().__init__(scope, construct_id)
        account = iam.AccountRootPrincipal()
        policy = iam.PolicyDocument(
            statements=[
                iam.PolicyStatement(
                    sid="AdministerTheKey",
                    principals=[account],
                    actions=ADMIN_ACTIONS,
                    resources=["*"],
                ),
                iam.PolicyStatement(
                    sid="SealEndpointSecretsWhereIamAllows",
                    principals=[account],
                    actions=["kms:GenerateDataKey"],
                    resources=["*"],
                    conditions=FOR_ENDPOINT_SECRETS,
                ),
                iam.PolicyStatement(
                    sid="OpenEndpointSecrets",
                    principals=[iam.ArnPrincipal(role.role_arn) for role in decrypters],
                    actions=["kms:Decrypt"],
                    resources=["*"],
                    conditions=FOR_ENDPOINT_SECRETS,
                ),
            ]
        )
        self.key = kms.Key(
            self,
            "Key",
            description="Wraps the data keys that seal reminders' webhook signing secrets",
            enable_key_rotation=True,
            policy=policy,
            # Without the key no stored secret can be read again.
            removal_policy=RemovalPolicy.RETAIN,
        )
