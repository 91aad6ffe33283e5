"""The KMS key of the webhook signing secrets: rotated, kept, usable for Decrypt by the
consumer only, for GenerateDataKey only where an IAM policy allows it, reachable from the VPC."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App

from infra.constructs.secrets_key import PURPOSE
from infra.settings import Settings, SettingsError
from reminders.kms import PURPOSE as RUNTIME_PURPOSE
from tests.infra.synth import Synthesized

CRYPTO_ACTIONS = {"kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:ReEncrypt*",
                  "kms:ReEncryptFrom", "kms:ReEncryptTo", "kms:GenerateDataKey*", "kms:*"}


def _secrets_key(synth: Synthesized) -> tuple[str, dict[str, Any]]:
    (found,) = [(logical_id, key) for logical_id, key in synth.resources("AWS::KMS::Key").items()
                if "webhook signing secrets" in key["Properties"].get("Description", "")]
    return found


def _actions(statement: dict[str, Any]) -> set[str]:
    action = statement["Action"]
    return {action} if isinstance(action, str) else set(action)


def test_the_secrets_key_rotates_and_outlives_the_stack(default: Synthesized) -> None:
    _, key = _secrets_key(default)
    assert key["Properties"]["EnableKeyRotation"] is True
    assert key["DeletionPolicy"] == "Retain" and key["UpdateReplacePolicy"] == "Retain"
    assert PURPOSE == RUNTIME_PURPOSE  # the policy's condition is what the code sends


def test_only_the_consumer_may_decrypt_and_only_endpoint_secrets(default: Synthesized) -> None:
    _, key = _secrets_key(default)
    consumer_role = default.function("consumer")[1]["Properties"]["Role"]["Fn::GetAtt"][0]
    statements = {s["Sid"]: s for s in key["Properties"]["KeyPolicy"]["Statement"]}
    assert set(statements) == {"AdministerTheKey", "GrantOnlyForAwsServices", "DescribeTheKey",
                               "SealEndpointSecretsWhereIamAllows", "OpenEndpointSecrets"}
    condition = {"StringEquals": {"kms:EncryptionContext:purpose": PURPOSE}}
    admin = statements["AdministerTheKey"]
    assert not _actions(admin) & CRYPTO_ACTIONS and "Condition" not in admin
    assert not any(a.startswith("kms:Create") and a != "kms:CreateAlias" for a in _actions(admin))
    seal = statements["SealEndpointSecretsWhereIamAllows"]
    assert _actions(seal) == {"kms:GenerateDataKey"} and seal["Condition"] == condition
    assert "root" in str(seal["Principal"]["AWS"])
    opened = statements["OpenEndpointSecrets"]
    assert _actions(opened) == {"kms:Decrypt"} and opened["Condition"] == condition
    assert opened["Principal"] == {"AWS": {"Fn::GetAtt": [consumer_role, "Arn"]}}
    for statement in statements.values():
        assert statement["Effect"] == "Allow"


def test_no_iam_policy_uses_the_secrets_key(default: Synthesized) -> None:
    """Decrypt comes from the key policy alone, so no role's policy widens it."""
    logical_id, _ = _secrets_key(default)
    for policy in default.resources("AWS::IAM::Policy").values():
        assert logical_id not in str(policy["Properties"]["PolicyDocument"])


def test_the_consumer_reaches_kms_from_the_vpc_and_operators_get_the_key_arn(
        default: Synthesized, switched: Synthesized) -> None:
    logical_id, _ = _secrets_key(default)
    assert default.json["Outputs"]["SecretsKeyArn"]["Value"] == {
        "Fn::GetAtt": [logical_id, "Arn"]}
    for synth in (default, switched):
        names = [str(e["Properties"]["ServiceName"])
                 for e in synth.resources("AWS::EC2::VPCEndpoint").values()]
        assert sum(name.endswith(".kms") or ".kms'" in name for name in names) == 1, names


def _principals(statement: dict[str, Any]) -> str:
    return str(statement["Principal"]["AWS"])


def test_nobody_in_the_account_can_grant_itself_decrypt(default: Synthesized) -> None:
    """Until now the whole account held kms:Create* and kms:Put* unconditionally: any principal
    with broad KMS rights could CreateGrant itself Decrypt and open every webhook secret. Now
    the account may only read the key and seal; the named administrators (the deploy role by
    default) may grant only for an AWS service, and only the consumer decrypts."""
    _, key = _secrets_key(default)
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    for statement in statements:
        actions = _actions(statement)
        if "root" in _principals(statement):
            assert actions <= {"kms:DescribeKey", "kms:GetKeyPolicy", "kms:GetKeyRotationStatus",
                               "kms:ListResourceTags", "kms:GenerateDataKey"}, statement
        if actions & {"kms:CreateGrant", "kms:Create*", "kms:*"}:
            assert statement["Condition"] == {"Bool": {"kms:GrantIsForAWSResource": "true"}}
    admin = next(s for s in statements if s["Sid"] == "AdministerTheKey")
    assert "cfn-exec-role" in _principals(admin)


def test_the_key_s_administrators_can_be_named() -> None:
    arn = "arn:aws:iam::111122223333:role/platform-admins"
    settings = Settings.from_node(App(context={"keyAdministrators": arn}).node, environ={})
    assert settings.key_administrators == (arn,)
    with pytest.raises(SettingsError, match="keyAdministrators must be IAM role ARNs"):
        Settings.from_node(App(context={"keyAdministrators": "alice"}).node, environ={})
