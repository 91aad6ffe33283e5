"""The operator-direct policy: what the command line and the console need from AWS when they
run on the database directly (the local stack; a deployed database through the port-forward).
The documented policy (docs/operator-access.md) is the one ``local up`` grants, every grant in
it is used, and without either grant the command that needs it is refused by moto's IAM, as
AWS would refuse it. (That
the commands need nothing more is shown by every command-line and console test: their fixtures
run as this operator, and a refused call fails the test that made it.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from reminders import config
from reminders.local import operator_access, stack
from tests.aws_principals import readme_direct_policy, secrets_key
from tests.integration.cli_helpers import Cli

ARNS = {"deliveries": "arn:aws:sqs:us-east-1:123456789012:x-deliveries",
        "dlq": "arn:aws:sqs:us-east-1:123456789012:x-dlq",
        "parking": "arn:aws:sqs:us-east-1:123456789012:x-parking"}
KEY = "arn:aws:kms:us-east-1:123456789012:key/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


def test_the_documented_policy_is_the_one_local_up_grants() -> None:
    assert readme_direct_policy(queue_arns=ARNS, secrets_key_arn=KEY) == \
        operator_access.direct_policy(ARNS, KEY)


def test_the_policy_grants_two_actions_on_the_stack_s_own_resources() -> None:
    document = operator_access.direct_policy(ARNS, KEY)
    granted = {(s["Action"], json.dumps(s["Resource"])) for s in document["Statement"]}
    assert granted == {("sqs:GetQueueAttributes", json.dumps(list(ARNS.values()))),
                       ("kms:GenerateDataKey", json.dumps(KEY))}
    sealing = next(s for s in document["Statement"] if s["Action"] == "kms:GenerateDataKey")
    # The key's policy lets the account seal only for this purpose (infra's secrets key).
    assert sealing["Condition"] == {
        "StringEquals": {"kms:EncryptionContext:purpose": "reminders-endpoint-secret"}}


def _operator_without(endpoint: str, urls: config.QueueUrls, sid: str) -> dict[str, str]:
    arns = {name: operator_access.queue_arn(url, stack.REGION) for name, url in
            (("deliveries", urls.deliveries), ("dlq", urls.dlq), ("parking", urls.parking))}
    document: dict[str, Any] = operator_access.direct_policy(arns, secrets_key(endpoint))
    document["Statement"] = [s for s in document["Statement"] if s["Sid"] != sid]
    user = f"operator-without-{sid}-{urls.deliveries.rsplit('/', 1)[1]}"
    key = operator_access.grant(stack.aws_client("iam", endpoint), user, document)
    return stack.credentials_env(key)


@pytest.mark.refusals_expected
def test_status_reads_the_queue_depths_only_with_its_grant(
        aws_cli: Cli, moto_endpoint: str, queue_urls: config.QueueUrls) -> None:
    idle = {"visible": 0, "in_flight": 0}
    assert aws_cli("status", "--json").json()["queues"] == {
        "deliveries": idle, "dlq": idle, "parking": idle}

    without = _operator_without(moto_endpoint, queue_urls, "ReadQueueDepths")
    seen = stack.decision_count(moto_endpoint)
    answer = aws_cli("status", "--json", **without)
    # The database's figures, and the transport's refusal in one line (exit 4: partly answered).
    assert answer.code == 4 and len(answer.err.splitlines()) == 1, answer.err
    assert answer.err.startswith("reminders: status: queues unreachable: AWS: ")
    assert "AccessDenied" in answer.err
    status = json.loads(answer.out)
    assert "queues" not in status and status["total"] == 0
    assert status["queues_error"].startswith("AWS: ")
    assert "AccessDenied" in status["queues_error"], status["queues_error"]
    refused = {(d["action"], d["outcome"]) for d in stack.decisions(moto_endpoint, since=seen)
               if d["key"] == without["AWS_ACCESS_KEY_ID"]}
    assert refused == {("sqs:GetQueueAttributes", "AccessDenied")}


@pytest.mark.refusals_expected
def test_endpoints_add_seals_the_secret_only_with_its_grant(
        aws_cli: Cli, moto_endpoint: str, queue_urls: config.QueueUrls) -> None:
    secret = "whsec_" + "A" * 43 + "="
    added = aws_cli("endpoints", "add", "http://127.0.0.1:9/a", "--secret", secret, "--json")
    assert added.json()["url"] == "http://127.0.0.1:9/a"

    without = _operator_without(moto_endpoint, queue_urls, "SealEndpointSecrets")
    seen = stack.decision_count(moto_endpoint)
    refused = aws_cli("endpoints", "add", "http://127.0.0.1:9/b", "--secret", secret,
                      **without)
    assert refused.code != 0 and refused.out == ""
    assert "AccessDenied" in refused.err and len(refused.err.splitlines()) == 1, refused.err
    decided = {(d["action"], d["outcome"]) for d in stack.decisions(moto_endpoint, since=seen)
               if d["key"] == without["AWS_ACCESS_KEY_ID"]}
    assert decided == {("kms:GenerateDataKey", "AccessDenied")}
    listed = aws_cli("endpoints", "list", "--json").json()
    assert [e["url"] for e in listed] == ["http://127.0.0.1:9/a"]  # nothing written
