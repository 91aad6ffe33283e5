"""Context parsing and the derived values, without synthesizing anything."""

from __future__ import annotations

import pytest
from aws_cdk import App
from aws_cdk import aws_logs as logs

from infra.app import build_app
from infra.settings import MAX_SEND_CONCURRENCY, Settings, SettingsError, retention_days
from reminders.config import limits_from_env
from reminders.errors import ConfigError


def _settings(**context: object) -> Settings:
    return Settings.from_node(App(context=context).node, environ={})


def test_defaults_need_no_context() -> None:
    settings = _settings()
    # Nothing account- or region-specific by default: environment-agnostic, zones at deploy.
    assert (settings.account, settings.region) == ("", "")
    assert settings.azs == []
    assert settings.zone_count == 2
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


def test_account_and_region_default_to_the_cdk_cli_environment() -> None:
    environ = {"CDK_DEFAULT_ACCOUNT": "210987654321", "CDK_DEFAULT_REGION": "us-east-1"}
    settings = Settings.from_node(App().node, environ=environ)
    assert (settings.account, settings.region) == ("210987654321", "us-east-1")
    # -c region=... alone works: no zones of another region come along.
    settings = Settings.from_node(App(context={"region": "ap-south-1"}).node, environ=environ)
    assert (settings.account, settings.region) == ("210987654321", "ap-south-1")
    assert settings.azs == []


def test_cdk_json_holds_nothing_account_or_region_specific() -> None:
    import json
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "cdk.json").read_text()
    context = json.loads(text)["context"]
    assert not {"account", "region", "availabilityZones"} & set(context)
    assert not re.search(r"\b\d{12}\b", text)
    assert not re.search(r"\b[a-z]{2}(-gov)?-[a-z]+-\d[a-z]?\b", text)


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


def test_throughput_defaults() -> None:
    settings = _settings()
    assert settings.consumer_batch_size == 300
    assert settings.consumer_send_concurrency == 300
    assert settings.consumer_batching_window_seconds == 1
    assert (settings.scanner_timeout_seconds, settings.effective_scan_seconds) == (120, 55)
    assert (settings.scan_batch, settings.publish_concurrency) == (1000, 10)
    assert (settings.scanner_memory_mib, settings.consumer_memory_mib) == (1769, 3538)
    assert (settings.send_timeout_seconds, settings.invocation_margin_seconds) == (15, 5)
    assert (settings.db_lock_timeout_ms, settings.db_statement_timeout_ms) == (5000, 30_000)


def test_the_largest_batch_is_what_the_consumer_accepts_as_its_send_concurrency() -> None:
    # synth's ceiling for consumerBatchSize is the runtime's for REMINDERS_SEND_CONCURRENCY
    assert _settings(consumerBatchSize=str(MAX_SEND_CONCURRENCY)).consumer_send_concurrency == \
        MAX_SEND_CONCURRENCY
    env = {"REMINDERS_SEND_CONCURRENCY": str(MAX_SEND_CONCURRENCY)}
    assert limits_from_env(env).send_concurrency == MAX_SEND_CONCURRENCY
    with pytest.raises(ConfigError, match="REMINDERS_SEND_CONCURRENCY must be between 1 and"):
        limits_from_env({"REMINDERS_SEND_CONCURRENCY": str(MAX_SEND_CONCURRENCY + 1)})
    with pytest.raises(SettingsError, match="consumerBatchSize must be between 1 and"):
        _settings(consumerBatchSize=str(MAX_SEND_CONCURRENCY + 1))


def test_the_deployed_consumer_defaults_are_the_ones_the_benchmarks_price() -> None:
    # `make bench` prices and measures these (tests/bench/cost.py); a default changed without
    # them would leave the README's cost and throughput figures describing another deployment
    from tests.bench import cost

    settings = _settings()
    assert settings.consumer_batch_size == cost.CONSUMER_BATCH
    assert settings.consumer_memory_mib == cost.CONSUMER_MEMORY_MIB
    assert settings.scanner_memory_mib == cost.SCANNER_MEMORY_MIB
    assert settings.scan_batch == cost.SCAN_BATCH
    assert settings.consumer_max_concurrency == cost.CONSUMER_INSTANCES


@pytest.mark.parametrize(
    ("context", "expected"),
    [
        ({}, 36 * 300 * 4),
        ({"inflightFactor": "2"}, 36 * 300 * 2),
        ({"consumerBatchSize": "50"}, 36 * 50 * 4),
        ({"dbConnectionBudget": "20", "consumerBatchSize": "25"}, 16 * 25 * 4),
        ({"inflightBudget": "5000"}, 5000),
        ({"inflightBudget": "5000", "inflightFactor": "9"}, 5000),
    ],
)
def test_inflight_budget_is_what_the_consumers_can_take(
    context: dict[str, object], expected: int
) -> None:
    # consumer maximum concurrency x batch size x inflightFactor, unless inflightBudget is set
    assert _settings(**context).effective_inflight_budget == expected


@pytest.mark.parametrize(
    ("context", "expected"),
    [
        ({}, 55),  # min(120 // 2, 60 - 5): never into the next minute's tick
        ({"scannerTimeoutSeconds": "60"}, 30),  # half the invocation: the scanner's own cap
        ({"scannerTimeoutSeconds": "30"}, 15),
        ({"scannerTimeoutSeconds": "900"}, 55),
        ({"scanSeconds": "20"}, 20),
    ],
)
def test_scan_seconds_follow_the_scanner_timeout(
    context: dict[str, object], expected: int
) -> None:
    assert _settings(**context).effective_scan_seconds == expected


def test_the_consumer_timeout_needs_a_send_a_margin_and_time_to_settle() -> None:
    # 15 s send + 5 s margin + 35 s to record the outcomes (a 5 s borrow, a 30 s statement)
    assert _settings().consumer_time_needed_seconds == 55
    assert _settings(consumerTimeoutSeconds="55").consumer_timeout_seconds == 55
    settings = _settings(sendTimeoutSeconds="40", consumerTimeoutSeconds="80")
    assert settings.consumer_time_needed_seconds == 80
    # a webhook's shorter deadline leaves e-mail's and SMS's 15 s; a shorter statement
    # timeout leaves the 10 s floor
    settings = _settings(sendTimeoutSeconds="5", dbStatementTimeoutMs="2000")
    assert settings.consumer_time_needed_seconds == 15 + 5 + 10


@pytest.mark.parametrize(
    ("context", "message"),
    [
        (
            {"consumerTimeoutSeconds": "54"},
            r"consumerTimeoutSeconds must be at least 55 \(a send's 15 s: sendTimeoutSeconds "
            r"15, at least 15; \+ invocationMarginSeconds 5 \+ 35 s to record the outcomes: "
            r"the proxy's 5 s borrow timeout and dbStatementTimeoutMs 30000, at least 10\), "
            r"got 54",
        ),
        (
            {"sendTimeoutSeconds": "50"},
            "consumerTimeoutSeconds must be at least 90 .*sendTimeoutSeconds 50",
        ),
        (
            {"dbStatementTimeoutMs": "40000"},
            "consumerTimeoutSeconds must be at least 65 .*dbStatementTimeoutMs 40000",
        ),
        (
            {"invocationMarginSeconds": "46"},
            "consumerTimeoutSeconds must be at least 96 .*invocationMarginSeconds 46",
        ),
        ({"consumerBatchSize": "501"}, "consumerBatchSize must be between 1 and 500, got 501"),
        ({"consumerBatchSize": "0"}, "consumerBatchSize must be between 1 and 500, got 0"),
        (
            {"consumerBatchSize": "25", "consumerBatchingWindowSeconds": "0"},
            "consumerBatchingWindowSeconds must be at least 1 when consumerBatchSize",
        ),
        (
            {"redriveBatchSize": "20"},
            "redriveBatchingWindowSeconds must be at least 1 when redriveBatchSize",
        ),
        ({"inflightFactor": "0"}, "inflightFactor must be at least 1, got 0"),
        (
            {"dbConnectionBudget": "1004", "consumerBatchSize": "100", "inflightFactor": "11"},
            r"derived in-flight budget 1100000 \(consumer maximum concurrency 1000 x "
            r"consumerBatchSize 100 x inflightFactor 11\) exceeds 1000000; lower "
            "inflightFactor or set inflightBudget",
        ),
        (
            {"dbConnectionBudget": "2000"},
            "dbConnectionBudget 2000 gives a consumer maximum concurrency of 1996; an SQS "
            "event source allows at most 1000",
        ),
        ({"inflightBudget": "1000001"}, "inflightBudget must be between 1 and 1000000"),
        ({"inflightBudget": "-1"}, "inflightBudget must be between 1 and 1000000"),
        ({"scanSeconds": "56"}, "scanSeconds must be between 1 and 55, got 56"),
        (
            {"scanSeconds": "31", "scannerTimeoutSeconds": "60"},
            r"scanSeconds must be between 1 and 30, got 31: .*scannerTimeoutSeconds 60",
        ),
        ({"scannerTimeoutSeconds": "1"}, "scannerTimeoutSeconds must be at least 2"),
        ({"scannerTimeoutSeconds": "901"}, "scannerTimeoutSeconds must be between 1 and 900"),
        ({"consumerTimeoutSeconds": "0"}, "consumerTimeoutSeconds must be between 1 and 900"),
        ({"scanBatch": "10001"}, "scanBatch must be between 1 and 10000"),
        ({"publishConcurrency": "65"}, "publishConcurrency must be between 1 and 64"),
        ({"publishConcurrency": "0"}, "publishConcurrency must be between 1 and 64"),
        ({"sendTimeoutSeconds": "121"}, "sendTimeoutSeconds must be between 1 and 120"),
        ({"invocationMarginSeconds": "-1"}, "invocationMarginSeconds must be between 0 and 600"),
        ({"dbLockTimeoutMs": "0"}, "dbLockTimeoutMs must be between 1 and 600000"),
        ({"dbStatementTimeoutMs": "99"}, "dbStatementTimeoutMs must be between 100 and 3600000"),
        ({"leaseSeconds": "4"}, "leaseSeconds must be between 5 and 43200"),
        ({"consumerMemoryMib": "64"}, "consumerMemoryMib must be between 128 and 10240"),
        ({"scannerMemoryMib": "20000"}, "scannerMemoryMib must be between 128 and 10240"),
    ],
)
def test_throughput_settings_that_disagree_fail_synth(
    context: dict[str, object], message: str
) -> None:
    with pytest.raises(SettingsError, match=message):
        _settings(**context)


def test_a_bad_throughput_setting_stops_the_app_before_anything_is_built() -> None:
    with pytest.raises(SettingsError, match="consumerTimeoutSeconds must be at least 55"):
        build_app(context={"consumerTimeoutSeconds": "20"})


def test_ses_identity_defaults_to_the_sender_domain() -> None:
    assert _settings(emailSender="no-reply@mail.example.org").ses_identity == "mail.example.org"
    assert _settings(emailIdentity="example.org").ses_identity == "example.org"


def test_retention_rounds_up_to_an_allowed_value() -> None:
    assert retention_days(30) is logs.RetentionDays.ONE_MONTH
    assert retention_days(31) is logs.RetentionDays.TWO_MONTHS
    assert retention_days(1) is logs.RetentionDays.ONE_DAY
