"""The KMS key the webhook signing secrets are sealed with (envelope encryption).

The key policy names who may do what, with nothing left to IAM alone:

- the key's administrators, by name (``keyAdministrators``, by default the CDK bootstrap's
  CloudFormation execution role, which deploys the stack), administer it: no cryptographic use,
  and no grant but one an AWS service asks for on their behalf; the account may only read the
  key's description and policy. A key administrator can still rewrite the key policy
  (``kms:PutKeyPolicy``) and so give anyone Decrypt: whoever holds one of those roles can
  reach every webhook secret, as with any KMS key;
- the consumer's role may ``kms:Decrypt``, and only data keys made for endpoint secrets (the
  encryption context ``purpose``), which the consumer unwraps once per cold start;
- whoever registers or rotates endpoints (the ``reminders endpoints`` commands, run by an
  operator) needs ``kms:GenerateDataKey`` with the same context, granted in their own IAM
  policy: the key policy delegates that one action to the account's IAM policies. Nobody but
  the consumer can decrypt.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import DefaultStackSynthesizer, Fn, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

# reminders.kms.PURPOSE: the encryption context every call names.
PURPOSE = "reminders-endpoint-secret"
ADMIN_ACTIONS = [
    "kms:CreateAlias",
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
# What the rest of the account may see of the key: its description and policy, never a use.
READ_ACTIONS = ["kms:DescribeKey", "kms:GetKeyPolicy", "kms:GetKeyRotationStatus",
                "kms:ListResourceTags"]
FOR_ENDPOINT_SECRETS = {"StringEquals": {"kms:EncryptionContext:purpose": PURPOSE}}


def deploy_role_arn(scope: Construct) -> str:
    """The role CloudFormation deploys the stack with: the bootstrap's execution role under the
    default synthesizer (it must administer the key, or no later deploy could update it)."""
    synthesizer = Stack.of(scope).synthesizer
    if isinstance(synthesizer, DefaultStackSynthesizer):
        return Fn.sub(synthesizer.cloud_formation_execution_role_arn)
    raise ValueError("keyAdministrators is required with a synthesizer other than the default")


class SecretsKey(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, decrypters: Sequence[iam.IRole],
        administrators: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        account = iam.AccountRootPrincipal()
        admins = [iam.ArnPrincipal(arn) for arn in administrators] or [
            iam.ArnPrincipal(deploy_role_arn(self))]
        policy = iam.PolicyDocument(
            statements=[
                iam.PolicyStatement(
                    sid="AdministerTheKey",
                    principals=admins,
                    actions=ADMIN_ACTIONS,
                    resources=["*"],
                ),
                iam.PolicyStatement(
                    sid="GrantOnlyForAwsServices",
                    principals=admins,
                    actions=["kms:CreateGrant"],
                    resources=["*"],
                    conditions={"Bool": {"kms:GrantIsForAWSResource": "true"}},
                ),
                iam.PolicyStatement(
                    sid="DescribeTheKey",
                    principals=[account],
                    actions=READ_ACTIONS,
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
