"""The KMS key of the webhook signing secrets: rotated, kept, usable for Decrypt by the
consumer only, for GenerateDataKey only where an IAM policy allows it, reachable from the VPC."""

from __future__ import annotations

from typing import Any

from infra.constructs.secrets_key import PURPOSE
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
    assert set(statements) == {"AdministerTheKey", "SealEndpointSecretsWhereIamAllows",
                               "OpenEndpointSecrets"}
    condition = {"StringEquals": {"kms:EncryptionContext:purpose": PURPOSE}}
    admin = statements["AdministerTheKey"]
    assert not _actions(admin) & CRYPTO_ACTIONS and "Condition" not in admin
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
