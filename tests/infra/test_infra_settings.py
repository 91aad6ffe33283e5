"""Context parsing and the derived values, without synthesizing anything."""

from __future__ import annotations

import pytest
from aws_cdk import App
from aws_cdk import aws_logs as logs

from infra.settings import Settings, SettingsError, retention_days


def _settings(**context: object) -> Settings:
    return Settings.from_node(App(context=context).node)


def test_defaults_need_no_context() -> None:
    settings = _settings()
    assert (settings.account, settings.region) == ("123456789012", "eu-west-1")
    assert settings.azs == ["eu-west-1a", "eu-west-1b"]
    assert settings.webhook_egress and settings.scanner_enabled
    assert settings.max_receive_count == 5
    thresholds = (
        settings.unknown_alarm_threshold,
        settings.dead_alarm_threshold,
        settings.failed_alarm_threshold,
    )
    assert thresholds == (1, 1, 10)


def test_command_line_strings_are_parsed() -> None:
    settings = _settings(
        scannerEnabled="false",
        webhookEgress="0",
        dbConnectionBudget="12",
        alarmEmails="a@example.com, b@example.com",
        availabilityZones="us-east-1a,us-east-1b,us-east-1c",
        region="us-east-1",
    )
    assert not settings.scanner_enabled
    assert not settings.webhook_egress
    assert settings.db_connection_budget == 12
    assert settings.alarm_emails == ("a@example.com", "b@example.com")
    assert settings.azs == ["us-east-1a", "us-east-1b", "us-east-1c"]


def test_cdk_json_values_are_accepted_typed() -> None:
    settings = _settings(scannerEnabled=False, alarmEmails=["ops@example.com"], scanBatch=50)
    assert settings.alarm_emails == ("ops@example.com",)
    assert settings.scan_batch == 50


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"scannerEnabled": "maybe"}, "scannerEnabled"),
        ({"dbConnectionBudget": "forty"}, "dbConnectionBudget"),
        ({"maxReceiveCount": "3"}, "maxReceiveCount"),
        ({"deliveriesRetentionDays": "14"}, "deliveriesRetentionDays"),
        ({"emailSender": "nobody"}, "emailSender"),
        ({"unknownAlarmThreshold": "0"}, "unknownAlarmThreshold"),
        ({"deadAlarmThreshold": "0"}, "deadAlarmThreshold"),
        ({"failedAlarmThreshold": "-1"}, "failedAlarmThreshold"),
        ({"deadAlarmThreshold": "one"}, "deadAlarmThreshold"),
    ],
)
def test_bad_context_fails_synth_with_the_key_named(
    context: dict[str, object], message: str
) -> None:
    with pytest.raises(SettingsError, match=message):
        _settings(**context)


@pytest.mark.parametrize(
    ("budget", "expected"),
    [(40, 36), (10, 6), (6, 2), (3, 2), (0, 2)],
)
def test_consumer_concurrency_formula(budget: int, expected: int) -> None:
    settings = _settings(dbConnectionBudget=budget)
    assert settings.consumer_max_concurrency == expected


def test_ses_identity_defaults_to_the_sender_domain() -> None:
    assert _settings(emailSender="no-reply@mail.example.org").ses_identity == "mail.example.org"
    assert _settings(emailIdentity="example.org").ses_identity == "example.org"


def test_retention_rounds_up_to_an_allowed_value() -> None:
    assert retention_days(30) is logs.RetentionDays.ONE_MONTH
    assert retention_days(31) is logs.RetentionDays.TWO_MONTHS
    assert retention_days(1) is logs.RetentionDays.ONE_DAY
