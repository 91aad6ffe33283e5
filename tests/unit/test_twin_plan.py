"""The twin's plan read from the synthesized template: each part as the template states it,
and a wrong value in a copy of the template refused with its resource and property named."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from reminders.local.twin import alarms, emitted, explain
from reminders.local.twin.resources import read_plan
from reminders.local.twin.template import PlanError
from tests.twin_templates import logical_id, props, template_copy

T = datetime(2026, 3, 2, 9, 0, 30, tzinfo=UTC)


def test_the_queues_are_read_as_the_template_states_them() -> None:
    template = template_copy()
    plan = read_plan(template)
    queues = {k: r["Properties"] for k, r in template["Resources"].items()
              if r["Type"] == "AWS::SQS::Queue"}
    assert set(plan.queues) == set(queues) and len(queues) == 4
    for queue_id, given in queues.items():
        spec = plan.queues[queue_id]
        assert spec.visibility_timeout == given.get("VisibilityTimeout")
        assert spec.message_retention_period == given["MessageRetentionPeriod"]
        assert spec.sqs_managed_sse is given["SqsManagedSseEnabled"]
        if "RedrivePolicy" in given:
            assert spec.redrive is not None
            assert spec.redrive.max_receive_count == given["RedrivePolicy"]["maxReceiveCount"]
            assert spec.redrive.target == given["RedrivePolicy"]["deadLetterTargetArn"][
                "Fn::GetAtt"][0]
        else:
            assert spec.redrive is None


def test_the_mappings_rule_invoke_configs_and_migrations_are_read() -> None:
    template = template_copy()
    plan = read_plan(template)
    consumer = next(p for p in plan.pollers if p.function.startswith("FunctionsConsumer"))
    given = props(template, "FunctionsConsumerSqsEventSource")
    assert (consumer.batch_size, consumer.maximum_batching_window,
            consumer.maximum_concurrency, consumer.report_batch_item_failures) == (
        given["BatchSize"], given["MaximumBatchingWindowInSeconds"],
        given["ScalingConfig"]["MaximumConcurrency"], True)
    assert consumer.queue == logical_id(template, "QueuesDeliveries")
    rule = plan.schedule()
    assert rule.expression == "rate(1 minute)" and rule.every == timedelta(minutes=1)
    (target,) = rule.targets
    retry = props(template, "ScheduleTick")["Targets"][0]["RetryPolicy"]
    assert (target.maximum_retry_attempts, target.maximum_event_age) == (
        retry["MaximumRetryAttempts"], retry["MaximumEventAgeInSeconds"])
    assert target.dead_letter_queue == logical_id(template, "ScheduleInvocationDeadLetter")
    publisher = plan.invoke_configs[logical_id(template, "FunctionsPublisher")]
    config = props(template, "FunctionsPublisherEventInvokeConfig")
    assert (publisher.maximum_retry_attempts, publisher.maximum_event_age) == (
        config["MaximumRetryAttempts"], config["MaximumEventAgeInSeconds"])
    assert plan.migrations is not None
    assert plan.migrations.on_event == logical_id(template, "FunctionsMigrate")
    assert plan.migrations.properties["Schema"] == "reminders"
    assert "ServiceToken" not in plan.migrations.properties


def _refused(template: Any) -> str:
    with pytest.raises(PlanError) as caught:
        read_plan(template)
        alarms.read_alarms(template)
    return str(caught.value)


@pytest.mark.parametrize("count", ["x", 0, 1001, None])
def test_a_wrong_max_receive_count_names_the_queue_and_the_property(count: Any) -> None:
    template = template_copy()
    dlq = logical_id(template, "QueuesDeadLetter")
    template["Resources"][dlq]["Properties"]["RedrivePolicy"]["maxReceiveCount"] = count
    assert _refused(template) == (f"{dlq}: RedrivePolicy.maxReceiveCount must be an integer "
                                  f"1-1000, got {count!r}")


def test_a_dead_letter_target_that_is_no_queue_is_refused() -> None:
    template = template_copy()
    main = logical_id(template, "QueuesDeliveries")
    template["Resources"][main]["Properties"]["RedrivePolicy"]["deadLetterTargetArn"] = {
        "Fn::GetAtt": ["QueuesNowhere12345678", "Arn"]}
    assert _refused(template) == (f"{main}: RedrivePolicy.deadLetterTargetArn names "
                                  "QueuesNowhere12345678, which is nothing, not a "
                                  "AWS::SQS::Queue of the template")


@pytest.mark.parametrize(("change", "expected"), [
    ({"BatchSize": 10_001}, "BatchSize must be an integer 1-10000, got 10001"),
    ({"BatchSize": 0}, "BatchSize must be an integer 1-10000, got 0"),
    ({"MaximumBatchingWindowInSeconds": 0},
     "BatchSize is 300: more than 10 needs a MaximumBatchingWindowInSeconds of at least 1, "
     "got 0"),
    ({"ScalingConfig": {"MaximumConcurrency": 1}},
     "ScalingConfig.MaximumConcurrency must be an integer 2-1000, got 1"),
    ({"FunctionResponseTypes": ["ReportBatchItemFailure"]},
     "FunctionResponseTypes may hold only ReportBatchItemFailures, got "
     "['ReportBatchItemFailure']"),
])
def test_a_mapping_lambda_would_refuse_names_the_mapping_and_the_property(
        change: dict[str, Any], expected: str) -> None:
    template = template_copy()
    mapping = logical_id(template, "FunctionsConsumerSqsEventSource")
    template["Resources"][mapping]["Properties"].update(change)
    assert _refused(template) == f"{mapping}: {expected}"


@pytest.mark.parametrize("expression", ["rate(1 minutes)", "rate(5 minute)", "rate(0 minutes)",
                                        "every minute", "cron(0 9 * * *)",
                                        "cron(0 9 * * MON *)", "cron(0 9 L * ? *)"])
def test_an_unknown_schedule_expression_names_the_rule(expression: str) -> None:
    template = template_copy()
    rule = logical_id(template, "ScheduleTick")
    template["Resources"][rule]["Properties"]["ScheduleExpression"] = expression
    assert _refused(template).startswith(f"{rule}: ScheduleExpression ")


def test_rate_and_cron_ticks() -> None:
    template = template_copy()
    rule_id = logical_id(template, "ScheduleTick")
    rule = read_plan(template).schedule()
    assert rule.ticks(T, T, T + timedelta(minutes=3)) == [T + timedelta(minutes=m)
                                                          for m in (1, 2, 3)]
    assert rule.ticks(T, T + timedelta(seconds=90), T + timedelta(minutes=3)) == [
        T + timedelta(minutes=2), T + timedelta(minutes=3)]
    template["Resources"][rule_id]["Properties"]["ScheduleExpression"] = \
        "cron(0/15 9-10 ? * MON-FRI *)"
    cron = read_plan(template).schedule()
    at = datetime(2026, 3, 2, 8, 50, tzinfo=UTC)  # a Monday
    assert cron.ticks(at, at, at + timedelta(hours=3)) == [
        datetime(2026, 3, 2, h, m, tzinfo=UTC) for h in (9, 10) for m in (0, 15, 30, 45)]
    saturday = datetime(2026, 3, 7, 8, 50, tzinfo=UTC)
    assert cron.ticks(saturday, saturday, saturday + timedelta(hours=3)) == []
    template["Resources"][rule_id]["Properties"]["State"] = "DISABLED"
    assert read_plan(template).schedule().ticks(at, at, at + timedelta(hours=3)) == []


def test_an_alarm_dimension_naming_nothing_is_refused() -> None:
    template = template_copy()
    alarm = logical_id(template, "MonitoringDeliveriesQueueAge")
    template["Resources"][alarm]["Properties"]["Dimensions"][0]["Value"] = {
        "Fn::GetAtt": ["QueuesDeliverie9DF934B3", "QueueName"]}
    with pytest.raises(PlanError) as caught:
        alarms.read_alarms(template)
    assert str(caught.value) == (f"{alarm}: Dimensions[0].Value names QueuesDeliverie9DF934B3, "
                                 "which is nothing, not a AWS::SQS::Queue of the template")


def test_an_alarm_statistic_period_or_missing_treatment_cloudwatch_refuses_is_named() -> None:
    for change, expected in [({"Statistic": "Max"}, "Statistic must be one of"),
                             ({"Period": 45}, "Period must be 10, 20, 30 or a multiple of 60"),
                             ({"TreatMissingData": "breach"}, "TreatMissingData must be one of"),
                             ({"DatapointsToAlarm": 6}, "DatapointsToAlarm must be an integer "
                                                        "1-5, got 6")]:
        template = template_copy()
        alarm = logical_id(template, "MonitoringDeliveriesQueueAge")
        template["Resources"][alarm]["Properties"].update(change)
        with pytest.raises(PlanError) as caught:
            alarms.read_alarms(template)
        assert str(caught.value).startswith(f"{alarm}: {expected}"), caught.value


# ---------------------------------------------------------------- what emits what

def _service_functions(template: Any) -> list[str]:
    return [k for k, r in template["Resources"].items()
            if r["Type"] == "AWS::Lambda::Function"
            and str(r["Properties"].get("Handler", "")).startswith("functions.")]


ROTATION = ("MonitoringMasterSecretRotationFailed", "MonitoringAppSecretRotationFailed")


@pytest.mark.parametrize("variant", ["default", "self-publishing"])
def test_every_alarm_watches_a_metric_a_code_path_or_a_feeder_emits(variant: str) -> None:
    """The two rotation alarms watch the Secrets Manager rotation functions, which the twin
    does not run (explain lists them); every other alarm's metric is emitted here."""
    template = template_copy(variant)
    found = emitted.unwatched(alarms.read_alarms(template), emitted.service_metrics(),
                              _service_functions(template))
    assert sorted(u.alarm for u in found) == sorted(logical_id(template, r) for r in ROTATION)
    assert all("the twin does not run" in u.why for u in found)


@pytest.mark.parametrize(("metric", "why"), [
    ({"MetricName": "OldestOverdueSecond"}, "Reminders/OldestOverdueSecond with dimensions "
                                            "['service'] is emitted by no code path"),
    ({"Dimensions": [{"Name": "service", "Value": "reminders"},
                     {"Name": "tenant", "Value": "t1"}]},
     "Reminders/OldestOverdueSeconds with dimensions ['service', 'tenant'] is emitted by no "
     "code path (it is, with [['service']])"),
    ({"Namespace": "AWS/SQS", "MetricName": "NumberOfMessagesSent",
      "Dimensions": [{"Name": "QueueName", "Value": "x"}]},
     "AWS/SQS/NumberOfMessagesSent with dimensions ['QueueName'] is not what the twin feeds"),
    ({"Namespace": "AWS/RDS", "MetricName": "CPUUtilization", "Dimensions": []},
     "the twin feeds no AWS/RDS metrics"),
])
def test_a_bogus_alarm_in_a_template_copy_fails_the_coverage_check(
        metric: dict[str, Any], why: str) -> None:
    template = template_copy()
    original = template["Resources"][logical_id(template, "MonitoringOldestOverdueDelivery")]
    bogus = {"Type": "AWS::CloudWatch::Alarm", "Properties": {**original["Properties"], **metric}}
    template["Resources"]["MonitoringBogus00000000"] = bogus
    found = emitted.unwatched(alarms.read_alarms(template), emitted.service_metrics(),
                              _service_functions(template))
    bogus_found = [u.why for u in found if u.alarm == "MonitoringBogus00000000"]
    assert len(bogus_found) == 1 and bogus_found[0].startswith(why), bogus_found


def test_the_scan_reads_the_service_metrics_and_refuses_a_call_it_cannot_read(
        tmp_path: Path) -> None:
    names = {(e.name, e.dimension_names) for e in emitted.service_metrics()}
    assert ("OldestOverdueSeconds", frozenset({"service"})) in names
    assert ("Unknown", frozenset({"service"})) in names          # via PARKED_METRICS
    assert ("Sent", frozenset({"service"})) in names             # via OUTCOME_METRICS[...]
    assert ("SendConfigErrors", frozenset({"service", "channel"})) in names
    package = tmp_path / "reminders"
    package.mkdir()
    (package / "odd.py").write_text("def f(rt, name):\n    rt.metrics.put(name.title(), 1)\n")
    with pytest.raises(emitted.ScanError, match=r"reminders/odd.py:2: cannot tell which metric"):
        emitted.service_metrics(package)


# ---------------------------------------------------------------- explain

@pytest.mark.parametrize("variant", ["default", "self-publishing"])
def test_every_resource_type_of_the_template_is_explained(variant: str) -> None:
    template = template_copy(variant)
    assert explain.uncovered(template) == []
    lines = explain.explain(template)
    assert sum(line.count for line in lines) == len(template["Resources"])
    text = explain.as_text(lines)
    assert "stand-in   4 x AWS::SQS::Queue" in text
    assert "not run    1 x AWS::EC2::VPC" in text


def test_a_new_resource_type_is_unexplained() -> None:
    template = template_copy()
    template["Resources"]["NewThing"] = {"Type": "AWS::Pipes::Pipe", "Properties": {}}
    assert explain.uncovered(template) == ["AWS::Pipes::Pipe"]


def test_local_up_explain_prints_the_table_and_starts_nothing(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from reminders import cli

    monkeypatch.setenv("REMINDERS_HOME", str(tmp_path))
    assert cli.main(["local", "up", "--explain", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    by_type = {line["type"]: line for line in answer["resources"]}
    assert by_type["AWS::RDS::DBProxy"]["how"] == "stand-in"
    assert by_type["AWS::EC2::VPC"] == {"type": "AWS::EC2::VPC", "count": 1, "how": "not run",
                                        "what": explain.RUN_HERE["AWS::EC2::VPC"][1]}
    assert not (tmp_path / "local.json").exists()
