"""The moto server is as strict as AWS about who calls: a wrong signature is refused, each
function's role allows what the template grants it and nothing else, and every grant the
template gives a function is one its code (or Lambda, with its role) uses."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from reminders import schedules
from reminders.aws_http import AwsError, Credentials
from reminders.local import stack
from tests.aws_principals import function_roles
from tests.conftest import Harness, make_runtime
from tests.integration.pipeline_helpers import register, tick, work

PAGE = Path(__file__).resolve().parents[2] / "docs" / "local-stack.md"


def _urls(h: Harness) -> Any:
    from reminders.config import QueueUrls

    return QueueUrls(h.rt.deliveries.url, h.rt.dlq.url, h.rt.parking.url)


def _code(exc: ClientError) -> str:
    return str(exc.response["Error"]["Code"])


@pytest.mark.refusals_expected
def test_a_request_signed_with_a_wrong_secret_is_refused(harness: Harness) -> None:
    h = harness
    admin = stack.administrator(h.endpoint)
    forged = Credentials(admin.access_key, admin.secret_key[::-1])
    for client in (stack.aws_client("sqs", h.endpoint, credentials=forged),
                   stack.service_client("sqs", h.endpoint, credentials=forged)):
        with pytest.raises((ClientError, AwsError)) as refused:
            client.get_queue_attributes(QueueUrl=h.rt.deliveries.url,
                                        AttributeNames=["QueueArn"])
        assert isinstance(refused.value, ClientError | AwsError)
        error = refused.value.response["Error"]
        assert error["Code"] == "SignatureDoesNotMatch", error


@pytest.mark.refusals_expected
def test_an_unknown_access_key_is_refused(harness: Harness) -> None:
    client = stack.aws_client("sqs", harness.endpoint,
                              credentials=Credentials("testing", "testing"))
    with pytest.raises(ClientError) as refused:
        client.list_queues()
    assert _code(refused.value) == "InvalidClientTokenId"


@pytest.mark.refusals_expected
def test_the_consumer_role_may_not_delete_its_queue_nor_send_where_it_was_not_granted(
        harness: Harness) -> None:
    h = harness
    role = function_roles(h.endpoint, _urls(h))["consumer"]
    sqs = stack.aws_client("sqs", h.endpoint, credentials=role.credentials)
    sqs.get_queue_attributes(QueueUrl=h.rt.deliveries.url, AttributeNames=["QueueArn"])
    calls: list[Callable[[], Any]] = [
        lambda: sqs.delete_queue(QueueUrl=h.rt.deliveries.url),
        lambda: sqs.send_message(QueueUrl=h.rt.parking.url, MessageBody="x"),
        lambda: sqs.send_message(QueueUrl=h.rt.deliveries.url, MessageBody="x"),
        lambda: sqs.receive_message(QueueUrl=h.rt.dlq.url)]
    for call in calls:
        with pytest.raises(ClientError) as refused:
            call()
        assert _code(refused.value) == "AccessDenied"
    redrive = function_roles(h.endpoint, _urls(h))["redrive"]
    kms = stack.aws_client("kms", h.endpoint, credentials=redrive.credentials)
    with pytest.raises(ClientError) as refused:  # only the consumer opens endpoint secrets
        kms.decrypt(CiphertextBlob=b"x" * 64, KeyId=h.rt.settings.secrets_key_id)
    assert _code(refused.value) == "AccessDenied"


def _kept_in_readme() -> set[str]:
    """The grants the "AWS permissions" section of docs/local-stack.md says no code calls, and
    why kept."""
    text = PAGE.read_text()
    section = text.split("\n## AWS permissions on the local stack\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| Kept grant")]
    assert rows, "docs/local-stack.md lists no kept grants"
    return set(re.findall(r"`([a-z0-9]+:[A-Za-z*]+)`", "\n".join(rows)))


def test_every_grant_a_function_has_is_one_it_calls(harness: Harness) -> None:
    """Drive the scanner, the consumer (webhook, e-mail and SMS sends, sealed secrets) and
    redrive through a pipeline; moto's decisions name each call's principal and action. A
    function's grant it never used fails, unless docs/local-stack.md says why it is kept. The
    consumer reads the SES account's sending quota at its cold start, as deployed
    (``emailRateFromAccount``)."""
    h = harness
    database_url = h.rt.settings.database_url
    h.rt.close()
    h.rt = make_runtime(database_url, _urls(h), h.endpoint, h.clock,
                        email_rate_from_account="on")  # type: ignore[arg-type]
    url = register(h, h.receiver.hook_url("ok"))
    for channel, to in (("webhook", url), ("email", "ida@example.com"), ("sms", "+15555550100")):
        schedules.schedule(h.conn, tenant="acme", recipients=["r"], channel=channel, to=to,
                           at=h.clock.now(), now=h.clock.now(), key=f"calls-{channel}")
    h.rt.deliveries.send_raw("{not json", {})  # fails until the DLQ: redrive parks it
    seen = stack.decision_count(h.endpoint)
    for _ in range(4):
        tick(h)
        work(h)
    roles = function_roles(h.endpoint, _urls(h))
    by_key = {role.credentials.access_key: name for name, role in roles.items()}
    called: dict[str, set[str]] = {name: set() for name in ("scanner", "consumer", "redrive")}
    for decision in stack.decisions(h.endpoint, since=seen):
        if decision["key"] in by_key:
            called[by_key[decision["key"]]].add(decision["action"])
    from reminders.local.roles import granted_actions

    kept = _kept_in_readme()
    report = {name: {"called": sorted(called[name]),
                     "granted": sorted(granted_actions(roles[name].document))}
              for name in called}
    for name in called:
        unused = granted_actions(roles[name].document) - called[name] - kept
        assert not unused, (name, unused, report)
        assert called[name] <= granted_actions(roles[name].document), (name, report)
    assert called["consumer"] >= {"sqs:ReceiveMessage", "sqs:DeleteMessage", "ses:SendEmail",
                                  "ses:GetSendQuota", "sns:Publish", "kms:Decrypt"}, report
    assert "sqs:SendMessage" in called["scanner"] and "sqs:SendMessage" in called["redrive"]
