"""Publisher fan-out in the template: on by default, least privilege, bounded, alarmed; off
(publisherFanOut=false) the scanner publishes itself as before."""

from __future__ import annotations

from typing import Any

import pytest

from infra.settings import Settings, SettingsError
from tests.infra.synth import Synthesized
from tests.infra.test_infra_access import _actions, _statements_of


def _env(synth: Synthesized, name: str) -> dict[str, Any]:
    _, resource = synth.function(name)
    variables: dict[str, Any] = resource["Properties"]["Environment"]["Variables"]
    return variables


def _arn_of(synth: Synthesized, name: str) -> dict[str, Any]:
    logical_id, _ = synth.function(name)
    return {"Fn::GetAtt": [logical_id, "Arn"]}


def test_the_scanner_hands_chunks_to_the_publisher_by_default(default: Synthesized) -> None:
    publisher_id, publisher = default.function("publisher")
    env = _env(default, "scanner")
    assert env["REMINDERS_PUBLISHER_FUNCTION"] == {"Ref": publisher_id}
    assert env["REMINDERS_PUBLISH_CHUNK"] == "1000"
    props = publisher["Properties"]
    assert props["ReservedConcurrentExecutions"] == 10
    assert props["Timeout"] == 30 and props["MemorySize"] == 1769


def test_the_publisher_reads_no_database_and_sends_only_to_the_deliveries_queue(
        default: Synthesized) -> None:
    env = _env(default, "publisher")
    assert set(env) == {"REMINDERS_QUEUE_URL", "REMINDERS_PUBLISH_CONCURRENCY",
                        "POWERTOOLS_SERVICE_NAME", "LOG_LEVEL"}
    deliveries = _env(default, "consumer")["REMINDERS_QUEUE_URL"]
    assert env["REMINDERS_QUEUE_URL"] == deliveries
    statements = _statements_of(default, "publisher")
    sends = [s for s in statements if s["Action"] == "sqs:SendMessage"]
    assert len(sends) == 1
    assert sends[0]["Resource"] == {"Fn::GetAtt": [deliveries["Ref"], "Arn"]}
    actions = _actions(statements)
    assert not {a for a in actions if a.startswith(("secretsmanager:", "lambda:", "kms:"))}
    assert {a for a in actions if a.startswith("sqs:")} == {"sqs:SendMessage"}


def test_only_the_scanner_may_invoke_the_publisher(default: Synthesized) -> None:
    invokes = [(s, name) for name in ("scanner", "consumer", "redrive", "migrate", "ops-read",
                                      "ops-write", "publisher")
               for s in _statements_of(default, name) if "lambda:InvokeFunction" in
               (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])]
    assert [name for _, name in invokes] == ["scanner"]
    assert invokes[0][0]["Resource"] == _arn_of(default, "publisher")


def test_a_failed_chunk_is_retried_twice_while_its_leases_are_of_use(
        default: Synthesized) -> None:
    publisher_id, _ = default.function("publisher")
    (config,) = [c for c in default.resources("AWS::Lambda::EventInvokeConfig").values()
                 if c["Properties"]["FunctionName"] == {"Ref": publisher_id}]
    assert config["Properties"]["MaximumRetryAttempts"] == 2
    # leaseSeconds 600 - 10 s hand-over - publisher 30 s - consumer 60 s
    # (tests/infra/test_infra_publisher_retries.py checks every retry fits).
    assert config["Properties"]["MaximumEventAgeInSeconds"] == 500


def test_a_dropped_chunk_pages_the_alarm_topic(default: Synthesized) -> None:
    publisher_id, _ = default.function("publisher")
    (alarm,) = [a for a in default.resources("AWS::CloudWatch::Alarm").values()
                if a["Properties"].get("MetricName") == "AsyncEventsDropped"]
    props = alarm["Properties"]
    assert props["Namespace"] == "AWS/Lambda"
    assert props["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": publisher_id}}]
    assert (props["Statistic"], props["Period"], props["Threshold"]) == ("Sum", 300, 1)
    assert props["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert props["AlarmActions"] and "reclaim" in props["AlarmDescription"]
    errors = [a for a in default.resources("AWS::CloudWatch::Alarm").values()
              if a["Properties"].get("MetricName") == "Errors"
              and a["Properties"]["Dimensions"][0]["Value"] == {"Ref": publisher_id}]
    assert len(errors) == 1


def test_a_refused_publisher_invoke_pages_the_alarm_topic(default: Synthesized,
                                                          switched: Synthesized) -> None:
    """The scanner's count of the leases it handed back because Lambda refused the Invoke
    (reminders.scanner, PublisherNotInvoked): one alarm on it, with the fan-out only."""
    (alarm,) = [a for a in default.resources("AWS::CloudWatch::Alarm").values()
                if a["Properties"].get("MetricName") == "PublisherNotInvoked"]
    props = alarm["Properties"]
    assert props["Namespace"] == "Reminders"
    assert props["Dimensions"] == [{"Name": "service", "Value": "reminders"}]
    assert (props["Statistic"], props["Period"], props["Threshold"]) == ("Sum", 300, 1)
    assert (props["EvaluationPeriods"], props["TreatMissingData"]) == (1, "notBreaching")
    assert props["AlarmActions"] and "lambda:InvokeFunction" in props["AlarmDescription"]
    assert not [a for a in switched.resources("AWS::CloudWatch::Alarm").values()
                if a["Properties"].get("MetricName") == "PublisherNotInvoked"]


def test_the_publisher_writes_to_its_own_log_group(default: Synthesized) -> None:
    _, publisher = default.function("publisher")
    _, scanner = default.function("scanner")
    group = publisher["Properties"]["LoggingConfig"]["LogGroup"]
    assert group != scanner["Properties"]["LoggingConfig"]["LogGroup"]
    assert default.json["Resources"][group["Ref"]]["Type"] == "AWS::Logs::LogGroup"


def test_without_fan_out_the_scanner_publishes_itself(switched: Synthesized) -> None:
    with pytest.raises(AssertionError, match="no function"):
        switched.function("publisher")
    env = _env(switched, "scanner")
    assert "REMINDERS_PUBLISHER_FUNCTION" not in env
    actions = _actions(_statements_of(switched, "scanner"))
    assert "sqs:SendMessage" in actions and "lambda:InvokeFunction" not in actions
    services = {str(e["Properties"]["ServiceName"])
                for e in switched.resources("AWS::EC2::VPCEndpoint").values()}
    assert not any("lambda" in s for s in services)


def test_the_lease_outlasts_a_late_chunk_and_a_consumers_run() -> None:
    with pytest.raises(SettingsError, match="leaseSeconds must be at least 340"):
        Settings(lease_seconds=339).validate()
    Settings(lease_seconds=340).validate()
    Settings(lease_seconds=60, publisher_fan_out=False).validate()
    with pytest.raises(SettingsError, match="publishChunk must be between 1 and 2000"):
        Settings(publish_chunk=2001).validate()
    with pytest.raises(SettingsError, match="publisherReservedConcurrency must be at least 1"):
        Settings(publisher_reserved_concurrency=0).validate()
