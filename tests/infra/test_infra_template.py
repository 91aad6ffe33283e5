"""Rules the issue sets for the stack, each read back from the synthesized template."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App, Duration, Stack, Token
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Match

from infra.constructs.functions import check_visibility
from infra.settings import SettingsError
from reminders.config import KNOWN_VARIABLES, check_names, limits_from_env
from tests.infra.synth import Synthesized

FUNCTIONS = ("scanner", "consumer", "redrive", "migrate")
REQUIRED_ENVIRONMENT = {
    "REMINDERS_DB_HOST",
    "REMINDERS_DB_NAME",
    "REMINDERS_DB_SECRET_ARN",
    "REMINDERS_DB_SSLMODE",
    "REMINDERS_DB_PREPARE",
    "REMINDERS_QUEUE_URL",
    "REMINDERS_DLQ_URL",
    "REMINDERS_PARKING_QUEUE_URL",
    "REMINDERS_SCAN_BATCH",
    "REMINDERS_INFLIGHT_BUDGET",
    "REMINDERS_LEASE_SECONDS",
    "REMINDERS_REDRIVE_BUDGET",
    "REMINDERS_EMAIL_SENDER",
    "REMINDERS_WEBHOOK_ALLOW",
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
    "LOG_LEVEL",
}
SERVICE_TIMEOUTS = {"REMINDERS_DB_LOCK_TIMEOUT_MS", "REMINDERS_DB_STATEMENT_TIMEOUT_MS"}
SCANNER_ONLY = {"REMINDERS_SCAN_SECONDS", "REMINDERS_PUBLISH_CONCURRENCY"}
CONSUMER_ONLY = {
    "REMINDERS_SEND_TIMEOUT",
    "REMINDERS_SEND_CONCURRENCY",
    "REMINDERS_INVOCATION_MARGIN",
}
DAY = 24 * 3600


def _queue_by_ref(synth: Synthesized, ref: dict[str, Any]) -> dict[str, Any]:
    logical_id = ref["Fn::GetAtt"][0] if "Fn::GetAtt" in ref else ref["Ref"]
    resource = synth.json["Resources"][logical_id]
    assert resource["Type"] == "AWS::SQS::Queue"
    return resource["Properties"]  # type: ignore[no-any-return]


def _queue_from_output(synth: Synthesized, output: str) -> tuple[str, dict[str, Any]]:
    logical_id = synth.json["Outputs"][output]["Value"]["Fn::GetAtt"][0]
    return logical_id, _queue_by_ref(synth, {"Ref": logical_id})


def _deliveries_queue(synth: Synthesized) -> tuple[str, dict[str, Any]]:
    return _queue_from_output(synth, "DeliveriesQueueArn")


def _mapping_for(synth: Synthesized, function: str) -> dict[str, Any]:
    function_id, _ = synth.function(function)
    for mapping in synth.resources("AWS::Lambda::EventSourceMapping").values():
        if mapping["Properties"]["FunctionName"] == {"Ref": function_id}:
            return mapping["Properties"]  # type: ignore[no-any-return]
    raise AssertionError(f"no event source mapping for {function}")


# --- queues -----------------------------------------------------------------------------


def test_visibility_timeout_is_six_times_the_consumer_timeout(default: Synthesized) -> None:
    _, consumer = default.function("consumer")
    _, deliveries = _deliveries_queue(default)
    assert deliveries["VisibilityTimeout"] >= 6 * consumer["Properties"]["Timeout"]


def test_visibility_follows_a_changed_consumer_timeout(switched: Synthesized) -> None:
    _, consumer = switched.function("consumer")
    _, deliveries = _deliveries_queue(switched)
    assert consumer["Properties"]["Timeout"] == 45
    assert deliveries["VisibilityTimeout"] == 6 * 45


def test_dead_letter_queue_receives_after_at_least_five_receives(default: Synthesized) -> None:
    _, deliveries = _deliveries_queue(default)
    assert deliveries["RedrivePolicy"]["maxReceiveCount"] >= 5
    assert deliveries["RedrivePolicy"]["maxReceiveCount"] == 5


def test_max_receive_count_comes_from_context(switched: Synthesized) -> None:
    _, deliveries = _deliveries_queue(switched)
    assert deliveries["RedrivePolicy"]["maxReceiveCount"] == 8


def test_retention_dead_letter_outlives_its_source(default: Synthesized) -> None:
    _, deliveries = _deliveries_queue(default)
    dead_letter = _queue_by_ref(default, deliveries["RedrivePolicy"]["deadLetterTargetArn"])
    assert deliveries["MessageRetentionPeriod"] == 4 * DAY
    assert dead_letter["MessageRetentionPeriod"] == 14 * DAY
    assert dead_letter["MessageRetentionPeriod"] > deliveries["MessageRetentionPeriod"]


def test_dead_letter_queue_parks_what_redrive_keeps_failing_on(default: Synthesized) -> None:
    _, deliveries = _deliveries_queue(default)
    dead_letter_id, dead_letter = _queue_from_output(default, "DeadLetterQueueArn")
    parking_id, parking = _queue_from_output(default, "ParkingQueueArn")
    assert deliveries["RedrivePolicy"]["deadLetterTargetArn"] == {
        "Fn::GetAtt": [dead_letter_id, "Arn"]
    }
    # Parking is the DLQ's DLQ, which is what enables console "redrive to source" from it.
    assert dead_letter["RedrivePolicy"]["deadLetterTargetArn"] == {
        "Fn::GetAtt": [parking_id, "Arn"]
    }
    # Twice the source's: the redrive function gets its own tries even if the count carries over.
    assert dead_letter["RedrivePolicy"]["maxReceiveCount"] == 10
    assert "RedrivePolicy" not in parking


def test_every_queue_is_encrypted_and_retains_parked_messages_14_days(
    default: Synthesized,
) -> None:
    queues = default.resources("AWS::SQS::Queue")
    assert len(queues) == 4  # deliveries, dead-letter, parking, schedule dead-letter
    for queue in queues.values():
        properties = queue["Properties"]
        assert properties.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in properties
    parking = _queue_by_ref(default, _output_ref(default, "ParkingQueueArn"))
    assert parking["MessageRetentionPeriod"] == 14 * DAY


def test_every_queue_denies_requests_without_tls(default: Synthesized) -> None:
    queue_ids = set(default.resources("AWS::SQS::Queue"))
    protected: set[str] = set()
    for policy in default.resources("AWS::SQS::QueuePolicy").values():
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        denies_plain_http = any(
            statement["Effect"] == "Deny"
            and statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
            and statement["Principal"] == {"AWS": "*"}
            for statement in statements
        )
        if denies_plain_http:
            protected |= {ref["Ref"] for ref in policy["Properties"]["Queues"]}
    assert protected == queue_ids


def _output_ref(synth: Synthesized, name: str) -> dict[str, Any]:
    return synth.json["Outputs"][name]["Value"]  # type: ignore[no-any-return]


# --- event sources ----------------------------------------------------------------------


def test_both_mappings_report_batch_item_failures_with_bounded_concurrency(
    default: Synthesized,
) -> None:
    deliveries_id, _ = _deliveries_queue(default)
    consumer = _mapping_for(default, "consumer")
    redrive = _mapping_for(default, "redrive")
    assert consumer["EventSourceArn"] == {"Fn::GetAtt": [deliveries_id, "Arn"]}
    _, deliveries = _deliveries_queue(default)
    assert redrive["EventSourceArn"] == deliveries["RedrivePolicy"]["deadLetterTargetArn"]
    for mapping in (consumer, redrive):
        assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert mapping["ScalingConfig"]["MaximumConcurrency"] >= 2
    assert consumer["BatchSize"] == 300
    assert consumer["MaximumBatchingWindowInSeconds"] == 1  # above 10 a batch needs a window
    assert redrive["BatchSize"] == 10


def test_consumer_concurrency_is_derived_from_the_connection_budget(
    default: Synthesized, switched: Synthesized
) -> None:
    # budget - scanner reserved (1) - redrive max (2) - migrate (1)
    assert _mapping_for(default, "consumer")["ScalingConfig"]["MaximumConcurrency"] == 40 - 4
    assert _mapping_for(switched, "consumer")["ScalingConfig"]["MaximumConcurrency"] == 20 - 4
    _, scanner = default.function("scanner")
    assert scanner["Properties"]["ReservedConcurrentExecutions"] == 1


def test_batching_comes_from_context(default: Synthesized, switched: Synthesized) -> None:
    assert _mapping_for(default, "consumer")["MaximumBatchingWindowInSeconds"] == 1
    consumer = _mapping_for(switched, "consumer")
    assert consumer["BatchSize"] == 25
    assert consumer["MaximumBatchingWindowInSeconds"] == 5


# --- schedule and migrations ------------------------------------------------------------


def test_rule_ticks_every_minute_into_the_scanner_with_retries_and_a_dlq(
    default: Synthesized,
) -> None:
    scanner_id, _ = default.function("scanner")
    rules = default.resources("AWS::Events::Rule")
    assert len(rules) == 1
    (rule,) = rules.values()
    properties = rule["Properties"]
    assert properties["ScheduleExpression"] == "rate(1 minute)"
    assert properties["State"] == "ENABLED"
    (target,) = properties["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [scanner_id, "Arn"]}
    assert target["RetryPolicy"]["MaximumRetryAttempts"] >= 1
    assert target["RetryPolicy"]["MaximumEventAgeInSeconds"] <= 300
    dlq_id = target["DeadLetterConfig"]["Arn"]["Fn::GetAtt"][0]
    assert default.json["Resources"][dlq_id]["Type"] == "AWS::SQS::Queue"


def test_scanner_switch_creates_the_rule_disabled(switched: Synthesized) -> None:
    switched.template.has_resource_properties(
        "AWS::Events::Rule", {"ScheduleExpression": "rate(1 minute)", "State": "DISABLED"}
    )


def test_migrations_run_through_the_migrate_function_before_the_schedule(
    default: Synthesized,
) -> None:
    migrate_id, _ = default.function("migrate")
    (migration_id, migration), *_ = default.resources("Custom::RemindersMigrations").items()
    token = migration["Properties"]["ServiceToken"]["Fn::GetAtt"][0]
    framework = default.json["Resources"][token]
    variables = framework["Properties"]["Environment"]["Variables"]
    assert variables["USER_ON_EVENT_FUNCTION_ARN"] == {"Fn::GetAtt": [migrate_id, "Arn"]}
    (rule,) = default.resources("AWS::Events::Rule").values()
    assert migration_id in rule["DependsOn"]
    # and the migration waits for the proxy's target group
    proxy_groups = default.resources("AWS::RDS::DBProxyTargetGroup")
    assert set(proxy_groups) <= set(migration["DependsOn"])


# --- functions --------------------------------------------------------------------------


def test_every_function_runs_python_3_13_on_arm_with_json_logs_and_tracing(
    default: Synthesized,
) -> None:
    log_groups = default.resources("AWS::Logs::LogGroup")
    for name in FUNCTIONS:
        _, function = default.function(name)
        properties = function["Properties"]
        assert properties["Runtime"] == "python3.13"
        assert properties["Architectures"] == ["arm64"]
        assert properties["TracingConfig"] == {"Mode": "Active"}
        assert properties["LoggingConfig"]["LogFormat"] == "JSON"
        log_group_id = properties["LoggingConfig"]["LogGroup"]["Ref"]
        assert log_groups[log_group_id]["Properties"]["RetentionInDays"] == 30
        assert "SubnetIds" in properties["VpcConfig"]
        assert len(properties["Layers"]) == 1


def test_timeouts_are_sized_to_the_work(default: Synthesized) -> None:
    timeouts = {name: default.function(name)[1]["Properties"]["Timeout"] for name in FUNCTIONS}
    assert timeouts == {"scanner": 120, "consumer": 60, "redrive": 60, "migrate": 300}


def test_scanner_and_consumer_get_full_vcpus(default: Synthesized, switched: Synthesized) -> None:
    # 1769 MB is one vCPU: the scanner one, the consumer two (its batch's TLS handshakes)
    memory = {name: default.function(name)[1]["Properties"]["MemorySize"] for name in FUNCTIONS}
    assert memory == {"scanner": 1769, "consumer": 3538, "redrive": 256, "migrate": 256}
    assert switched.function("consumer")[1]["Properties"]["MemorySize"] == 1024


def test_every_function_gets_the_settings_it_reads(default: Synthesized) -> None:
    proxy_id = next(iter(default.resources("AWS::RDS::DBProxy")))
    for name in FUNCTIONS:
        _, function = default.function(name)
        variables = function["Properties"]["Environment"]["Variables"]
        assert set(variables) >= REQUIRED_ENVIRONMENT
        assert variables["REMINDERS_DB_HOST"] == {"Fn::GetAtt": [proxy_id, "Endpoint"]}
        assert variables["REMINDERS_DB_SSLMODE"] == "verify-full"
        assert variables["REMINDERS_DB_PREPARE"] == "off"
        assert variables["POWERTOOLS_SERVICE_NAME"] == "reminders"
        assert variables["POWERTOOLS_METRICS_NAMESPACE"] == "Reminders"
        assert variables["REMINDERS_WEBHOOK_ALLOW"] == ""


def test_every_functions_settings_are_names_the_code_knows(
        default: Synthesized, switched: Synthesized, bastion: Synthesized,
        existing_db: Synthesized) -> None:
    """A misspelt name in the stack would stop a function at its cold start (loading the
    settings refuses an unknown REMINDERS_ variable): none reaches a deploy."""
    seen: set[str] = set()
    for synth in (default, switched, bastion, existing_db):
        for logical_id, function in synth.resources("AWS::Lambda::Function").items():
            variables = function["Properties"].get("Environment", {}).get("Variables", {})
            names = {name for name in variables if name.startswith("REMINDERS_")}
            assert names <= set(KNOWN_VARIABLES), (logical_id, names - set(KNOWN_VARIABLES))
            check_names(variables)
            seen |= names
    assert {"REMINDERS_QUEUE_URL", "REMINDERS_STS_ENDPOINT", "REMINDERS_PUBLISHER_FUNCTION"} \
        <= seen


def _variables(synth: Synthesized, name: str) -> dict[str, Any]:
    _, function = synth.function(name)
    return function["Properties"]["Environment"]["Variables"]  # type: ignore[no-any-return]


def test_each_function_gets_only_the_throughput_settings_it_uses(default: Synthesized) -> None:
    names = {name: set(_variables(default, name)) for name in FUNCTIONS}
    assert names["scanner"] >= SERVICE_TIMEOUTS | SCANNER_ONLY
    assert not names["scanner"] & CONSUMER_ONLY
    assert names["consumer"] >= SERVICE_TIMEOUTS | CONSUMER_ONLY
    assert not names["consumer"] & SCANNER_ONLY
    assert names["redrive"] >= SERVICE_TIMEOUTS
    assert not names["redrive"] & (SCANNER_ONLY | CONSUMER_ONLY)
    # a migration may wait for a lock or run long: the server's defaults
    assert not names["migrate"] & (SERVICE_TIMEOUTS | SCANNER_ONLY | CONSUMER_ONLY)


def test_throughput_settings_have_their_defaults(default: Synthesized) -> None:
    scanner = _variables(default, "scanner")
    assert scanner["REMINDERS_SCAN_SECONDS"] == "55"  # min(120 s timeout / 2, 60 - 5)
    assert scanner["REMINDERS_PUBLISH_CONCURRENCY"] == "10"
    assert scanner["REMINDERS_SCAN_BATCH"] == "1000"
    consumer = _variables(default, "consumer")
    assert consumer["REMINDERS_SEND_TIMEOUT"] == "15"
    assert consumer["REMINDERS_SEND_CONCURRENCY"] == "300"  # the consumer batch size
    assert consumer["REMINDERS_INVOCATION_MARGIN"] == "5"
    for name in ("scanner", "consumer", "redrive"):
        variables = _variables(default, name)
        assert variables["REMINDERS_DB_LOCK_TIMEOUT_MS"] == "5000"
        assert variables["REMINDERS_DB_STATEMENT_TIMEOUT_MS"] == "30000"
    # consumer maximum concurrency (40 - 4) x batch size (300) x inflightFactor (4)
    for name in FUNCTIONS:
        assert _variables(default, name)["REMINDERS_INFLIGHT_BUDGET"] == str(36 * 300 * 4)


def test_throughput_settings_come_from_context(switched: Synthesized) -> None:
    scanner = _variables(switched, "scanner")
    assert scanner["REMINDERS_SCAN_SECONDS"] == "30"  # a 60 s scanner drains half of it
    assert scanner["REMINDERS_PUBLISH_CONCURRENCY"] == "16"
    consumer = _variables(switched, "consumer")
    assert consumer["REMINDERS_SEND_TIMEOUT"] == "20"
    assert consumer["REMINDERS_SEND_CONCURRENCY"] == "25"
    assert consumer["REMINDERS_INVOCATION_MARGIN"] == "8"
    assert consumer["REMINDERS_DB_LOCK_TIMEOUT_MS"] == "2000"
    assert consumer["REMINDERS_DB_STATEMENT_TIMEOUT_MS"] == "10000"
    # (20 - 4) consumers x batch 25 x inflightFactor 2
    assert consumer["REMINDERS_INFLIGHT_BUDGET"] == str(16 * 25 * 2)
    assert _mapping_for(switched, "consumer")["ScalingConfig"]["MaximumConcurrency"] == 16


@pytest.mark.parametrize("variant", ["default", "switched"])
@pytest.mark.parametrize("name", FUNCTIONS)
def test_the_runtime_accepts_every_setting_it_is_given(
    variant: str, name: str, request: pytest.FixtureRequest
) -> None:
    synth: Synthesized = request.getfixturevalue(variant)
    variables = _variables(synth, name)
    plain = {key: value for key, value in variables.items() if isinstance(value, str)}
    limits = limits_from_env(plain)  # raises ConfigError naming a variable it refuses
    assert limits.inflight_budget == int(plain["REMINDERS_INFLIGHT_BUDGET"])
    assert limits.scan_batch == int(plain["REMINDERS_SCAN_BATCH"])
    if name == "consumer":
        _, function = synth.function(name)
        timeout = function["Properties"]["Timeout"]
        send_timeout = float(plain["REMINDERS_SEND_TIMEOUT"])
        # a fresh invocation has time for a send, the margin and recording the outcomes
        assert timeout >= send_timeout + limits.invocation_margin + 10
        assert limits.send_concurrency == _mapping_for(synth, "consumer")["BatchSize"]
    if name == "scanner":
        _, function = synth.function(name)
        assert 2 * limits.scan_seconds <= function["Properties"]["Timeout"]
        assert limits.scan_seconds <= 55


def test_synth_fails_when_visibility_drifts_from_the_consumer_timeout() -> None:
    stack = Stack(App(), "Drift")
    consumer = lambda_.Function(
        stack,
        "Consumer",
        runtime=lambda_.Runtime.PYTHON_3_13,
        handler="index.handler",
        code=lambda_.Code.from_inline("def handler(event, context): pass"),
        timeout=Duration.seconds(60),
    )
    matching = sqs.Queue(stack, "Matching", visibility_timeout=Duration.seconds(360))
    check_visibility(matching, consumer)
    drifted = sqs.Queue(stack, "Drifted", visibility_timeout=Duration.seconds(300))
    with pytest.raises(
        SettingsError,
        match=r"visibility timeout \(300 s\) must be 6 x the consumer timeout "
        r"\(consumerTimeoutSeconds 60 s = 360 s\)",
    ):
        check_visibility(drifted, consumer)


def test_only_the_consumer_runs_in_subnets_with_internet_egress(default: Synthesized) -> None:
    def subnets(name: str) -> list[str]:
        _, function = default.function(name)
        return sorted(ref["Ref"] for ref in function["Properties"]["VpcConfig"]["SubnetIds"])

    assert all("egress" in subnet for subnet in subnets("consumer"))
    for name in ("scanner", "redrive", "migrate"):
        assert all("isolated" in subnet for subnet in subnets(name))
    assert len(default.resources("AWS::EC2::NatGateway")) == 1


def test_without_webhook_egress_there_is_no_nat(switched: Synthesized) -> None:
    assert switched.resources("AWS::EC2::NatGateway") == {}
    assert switched.resources("AWS::EC2::InternetGateway") == {}
    _, consumer = switched.function("consumer")
    assert all("isolated" in ref["Ref"] for ref in consumer["Properties"]["VpcConfig"]["SubnetIds"])


def test_interface_endpoints_for_every_aws_api_the_functions_call(default: Synthesized) -> None:
    names = {
        "".join(str(part) for part in endpoint["Properties"]["ServiceName"]["Fn::Join"][1])
        if isinstance(endpoint["Properties"]["ServiceName"], dict)
        else endpoint["Properties"]["ServiceName"]
        for endpoint in default.resources("AWS::EC2::VPCEndpoint").values()
    }
    suffixes = {name.rsplit(".", 1)[-1] for name in names}
    # Nothing in the VPC calls CloudWatch, Logs or X-Ray: EMF metrics and logs leave through
    # the Lambda service, trace segments through Lambda's own X-Ray daemon. KMS: webhook
    # secrets are sealed. STS: the operations function checks who invoked it. Lambda: the
    # scanner invokes the publisher (fan-out, on by default).
    assert suffixes == {"sqs", "secretsmanager", "email", "sns", "kms", "sts", "lambda"}


# --- database ---------------------------------------------------------------------------


def test_database_is_private_encrypted_backed_up_and_protected(default: Synthesized) -> None:
    default.template.has_resource_properties(
        "AWS::RDS::DBInstance",
        {
            "Engine": "postgres",
            "EngineVersion": Match.string_like_regexp(r"^17\.\d+$"),
            "StorageEncrypted": True,
            "PubliclyAccessible": False,
            "BackupRetentionPeriod": 7,
            # Created unprotected; the stack's last resource protects it (below).
            "DeletionProtection": False,
            "MultiAZ": True,
        },
    )


def _protection(synth: Synthesized) -> list[tuple[str, dict[str, Any]]]:
    return [
        (logical_id, resource)
        for logical_id, resource in synth.resources("Custom::AWS").items()
        if "modifyDBInstance" in json.dumps(resource["Properties"].get("Create", ""))
    ]


def test_deletion_protection_is_turned_on_after_everything_else(default: Synthesized) -> None:
    ((protect_id, protect),) = _protection(default)
    (instance_id,) = default.resources("AWS::RDS::DBInstance")
    create = "".join(
        part if isinstance(part, str) else json.dumps(part)
        for part in protect["Properties"]["Create"]["Fn::Join"][1]
    )
    assert '"action":"modifyDBInstance"' in create
    assert '"DeletionProtection":true' in create
    assert f'"DBInstanceIdentifier":"{{"Ref": "{instance_id}"}}"' in create
    assert protect["Properties"]["Update"] == protect["Properties"]["Create"]
    assert "Delete" not in protect["Properties"]  # deleting the stack keeps protection on
    depends = set(protect["DependsOn"])
    # Every other resource of the stack is created first, so nothing can fail after it and
    # roll back a protected instance.
    others = {
        logical_id
        for logical_id, resource in default.json["Resources"].items()
        if logical_id != protect_id
        and resource["Type"] not in {"AWS::CDK::Metadata"}
        and not logical_id.startswith("AWS679f53fac002430cb0da5b7982bd2287")
        and not logical_id.startswith("DeletionProtection")
    }
    assert others <= depends, others - depends
    assert instance_id in depends
    # The call may modify this instance only.
    statements = [
        s
        for s in _statements(default)
        if "rds:ModifyDBInstance" in _as_list(s["Action"])
    ]
    assert len(statements) == 1
    assert _as_list(statements[0]["Resource"]) != ["*"]


def test_a_failed_first_deploy_leaves_nothing_that_blocks_the_retry(
    default: Synthesized, switched: Synthesized
) -> None:
    # The RDS log group has the name RDS dictates; a create rolled back removes it, a stack
    # deleted later keeps the database's logs.
    groups = [
        (logical_id, resource)
        for logical_id, resource in default.resources("AWS::Logs::LogGroup").items()
        if "LogGroupName" in resource["Properties"]
    ]
    assert len(groups) == 1
    (_, rds_logs) = groups[0]
    assert "/aws/rds/instance/reminders-postgres/postgresql" in json.dumps(
        rds_logs["Properties"]["LogGroupName"]
    )
    assert rds_logs["DeletionPolicy"] == "RetainExceptOnCreate"
    # No named resource is kept by a rollback; the instance itself is not protected until the
    # very end (test above), and snapshots are named by CloudFormation.
    for logical_id, resource in default.json["Resources"].items():
        if resource.get("DeletionPolicy") == "Retain":
            assert not any(
                key.endswith("Name") and key not in {"FunctionName"}
                for key in resource.get("Properties", {})
            ), logical_id
    # With -c dbDeletionProtection=false there is nothing to turn on.
    assert _protection(switched) == []


def test_database_switches_come_from_context(switched: Synthesized) -> None:
    switched.template.has_resource_properties(
        "AWS::RDS::DBInstance",
        {"BackupRetentionPeriod": 14, "DeletionProtection": False, "MultiAZ": False},
    )


def test_proxy_requires_tls_and_the_secret_rotates(default: Synthesized) -> None:
    default.template.has_resource_properties(
        "AWS::RDS::DBProxy", {"EngineFamily": "POSTGRESQL", "RequireTLS": True}
    )
    default.template.has_resource_properties(
        "AWS::SecretsManager::RotationSchedule",
        {"RotationRules": {"ScheduleExpression": "rate(30 days)"}},
    )


# --- permissions ------------------------------------------------------------------------


def _statements(synth: Synthesized) -> list[dict[str, Any]]:
    statements: list[dict[str, Any]] = []
    for policy in synth.resources("AWS::IAM::Policy").values():
        statements += policy["Properties"]["PolicyDocument"]["Statement"]
    for role in synth.resources("AWS::IAM::Role").values():
        for inline in role["Properties"].get("Policies", []):
            statements += inline["PolicyDocument"]["Statement"]
    return statements


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_no_statement_allows_every_action_on_every_resource(default: Synthesized) -> None:
    for statement in _statements(default):
        actions = _as_list(statement.get("Action", []))
        resources = _as_list(statement.get("Resource", []))
        wildcard_action = any(a == "*" or str(a).endswith(":*") for a in actions)
        assert not (wildcard_action and "*" in resources), statement


def test_consumer_sends_email_only_from_the_configured_identity(default: Synthesized) -> None:
    ses = [s for s in _statements(default) if "ses:SendEmail" in _as_list(s["Action"])]
    assert len(ses) == 1
    (resource,) = _as_list(ses[0]["Resource"])
    assert "identity/example.com" in str(resource)
    sms = [s for s in _statements(default) if "sns:Publish" in _as_list(s["Action"])]
    assert [s["Resource"] for s in sms if s.get("Sid") == "PublishSms"] == ["*"]


# --- alarms, dashboard, outputs ---------------------------------------------------------


def _alarms(synth: Synthesized) -> list[dict[str, Any]]:
    return [alarm["Properties"] for alarm in synth.resources("AWS::CloudWatch::Alarm").values()]


def _dimension_ref(alarm: dict[str, Any]) -> Any:
    return alarm["Dimensions"][0]["Value"]


def test_queue_alarms_cover_age_and_depth(default: Synthesized) -> None:
    deliveries_id, deliveries = _deliveries_queue(default)
    dead_letter_id = deliveries["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
    parking_id = default.json["Outputs"]["ParkingQueueArn"]["Value"]["Fn::GetAtt"][0]
    alarms = _alarms(default)

    def queue_alarms(metric: str) -> dict[str, dict[str, Any]]:
        found = {}
        for alarm in alarms:
            if alarm.get("Namespace") == "AWS/SQS" and alarm["MetricName"] == metric:
                queue_name = _dimension_ref(alarm)["Fn::GetAtt"]
                assert queue_name[1] == "QueueName"
                found[queue_name[0]] = alarm
        return found

    ages = queue_alarms("ApproximateAgeOfOldestMessage")
    assert {deliveries_id, dead_letter_id, parking_id} <= set(ages)
    assert ages[deliveries_id]["Threshold"] == 600
    depth = queue_alarms("ApproximateNumberOfMessagesVisible")
    # The redrive function drains the DLQ at once, so its depth would almost never show.
    assert dead_letter_id not in depth
    assert depth[parking_id]["Threshold"] == 1
    assert depth[parking_id]["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"


def test_dead_letter_alarm_fires_on_messages_arriving(default: Synthesized) -> None:
    redrive_id, _ = default.function("redrive")
    (topic_id,) = default.resources("AWS::SNS::Topic")
    # Every arrival invokes the redrive function (SQS does not count redrive-policy moves in
    # the DLQ's NumberOfMessagesSent).
    (arrivals,) = [
        a
        for a in _alarms(default)
        if a.get("MetricName") == "Invocations" and _dimension_ref(a) == {"Ref": redrive_id}
    ]
    assert arrivals["Namespace"] == "AWS/Lambda"
    assert arrivals["Statistic"] == "Sum"
    assert arrivals["Threshold"] == 1
    assert arrivals["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert arrivals["TreatMissingData"] == "notBreaching"
    assert arrivals["AlarmActions"] == [{"Ref": topic_id}]


def _rule_ids(synth: Synthesized) -> set[str]:
    return set(synth.resources("AWS::Events::Rule"))


def test_oldest_overdue_alarm_is_quiet_until_the_scanner_reports(default: Synthesized) -> None:
    ((overdue_id, _),) = [
        (logical_id, a)
        for logical_id, a in default.resources("AWS::CloudWatch::Alarm").items()
        if a["Properties"].get("MetricName") == "OldestOverdueSeconds"
    ]
    overdue = default.json["Resources"][overdue_id]
    props = overdue["Properties"]
    assert props["Namespace"] == "Reminders"
    assert props["Dimensions"] == [{"Name": "service", "Value": "reminders"}]
    # A missing figure is no lateness (a silent scanner is ScannerSilent's alarm), so the
    # first deploy, before any tick, stays green; and it is created after the schedule.
    assert props["TreatMissingData"] == "notBreaching"
    assert props["Threshold"] == 300
    assert props["ActionsEnabled"] is True
    assert _rule_ids(default) <= set(overdue["DependsOn"])


def test_paused_tenants_are_graphed_not_alarmed(default: Synthesized) -> None:
    assert not [a for a in _alarms(default) if "Paused" in a.get("MetricName", "")]
    graphs = [
        w["properties"]
        for w in _dashboard_widgets(default)
        if "Oldest overdue" in w["properties"].get("title", "")
    ]
    (graph,) = graphs
    names = [m[1] for m in graph["metrics"]]
    assert names == ["OldestOverdueSeconds", "PausedOldestOverdueSeconds",
                     "PausedSchedulesOldestOverdueSeconds"]


def _composite(synth: Synthesized, name: str) -> tuple[str, dict[str, Any]]:
    (found,) = [
        (logical_id, resource)
        for logical_id, resource in synth.resources("AWS::CloudWatch::CompositeAlarm").items()
        if logical_id.startswith(f"Monitoring{name}")
    ]
    return found


def test_scanner_silence_alarm_counts_missing_data_only_after_the_first_tick(
    default: Synthesized, switched: Synthesized
) -> None:
    scanner_id, _ = default.function("scanner")
    (topic_id,) = default.resources("AWS::SNS::Topic")
    inputs = {
        logical_id: alarm
        for logical_id, alarm in default.resources("AWS::CloudWatch::Alarm").items()
        if alarm["Properties"].get("MetricName") == "Invocations"
        and _dimension_ref(alarm["Properties"]) == {"Ref": scanner_id}
    }
    assert len(inputs) == 2
    by_missing = {a["Properties"]["TreatMissingData"]: (i, a) for i, a in inputs.items()}
    silent_id, silent = by_missing["breaching"]
    latch_id, latch = by_missing["ignore"]
    assert silent["Properties"]["ComparisonOperator"] == "LessThanThreshold"
    assert silent["Properties"]["Threshold"] == 1
    assert silent["Properties"]["Period"] * silent["Properties"]["EvaluationPeriods"] >= 180
    assert latch["Properties"]["ComparisonOperator"] == "LessThanThreshold"
    # The inputs page nobody; the composite does.
    for _, alarm in inputs.items():
        assert alarm["Properties"]["ActionsEnabled"] is False
        assert "AlarmActions" not in alarm["Properties"]
        assert _rule_ids(default) <= set(alarm["DependsOn"])
    _, composite = _composite(default, "ScannerSilent")
    rule = json.dumps(composite["Properties"]["AlarmRule"])
    assert f'ALARM(\\"", {{"Fn::GetAtt": ["{silent_id}", "Arn"]}}' in rule
    assert f'OK(\\"", {{"Fn::GetAtt": ["{latch_id}", "Arn"]}}' in rule
    assert composite["Properties"]["AlarmActions"] == [{"Ref": topic_id}]
    assert composite["Properties"]["ActionsEnabled"] is True
    assert "First:" in composite["Properties"]["AlarmDescription"]
    assert _rule_ids(default) <= set(composite["DependsOn"])
    # A deliberately disabled scanner does not page anyone.
    _, disabled = _composite(switched, "ScannerSilent")
    assert disabled["Properties"]["ActionsEnabled"] is False


def _delivery_alarm(synth: Synthesized, metric: str) -> tuple[str, dict[str, Any]]:
    (found,) = [
        (logical_id, alarm["Properties"])
        for logical_id, alarm in synth.resources("AWS::CloudWatch::Alarm").items()
        if alarm["Properties"].get("Namespace") == "Reminders"
        and alarm["Properties"]["MetricName"] == metric
    ]
    return found


@pytest.mark.parametrize(
    ("metric", "default_threshold", "switched_threshold"),
    [("Unknown", 1, 2), ("Dead", 1, 3), ("Failed", 10, 25)],
)
def test_unknown_dead_and_failed_deliveries_page_the_alarm_topic(
    default: Synthesized,
    switched: Synthesized,
    metric: str,
    default_threshold: int,
    switched_threshold: int,
) -> None:
    (topic_id,) = default.resources("AWS::SNS::Topic")
    logical_id, alarm = _delivery_alarm(default, metric)
    assert logical_id.startswith(f"MonitoringDeliveries{metric}")
    assert alarm["Namespace"] == "Reminders"
    assert alarm["Dimensions"] == [{"Name": "service", "Value": "reminders"}]
    assert alarm["Statistic"] == "Sum"
    assert alarm["Period"] == 300
    assert alarm["EvaluationPeriods"] == 1
    assert alarm["Threshold"] == default_threshold
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    # The counts are published only when non-zero: silence is the healthy case.
    assert alarm["TreatMissingData"] == "notBreaching"
    assert alarm["AlarmActions"] == [{"Ref": topic_id}]
    assert alarm["OKActions"] == [{"Ref": topic_id}]
    assert alarm["ActionsEnabled"] is True
    # Thresholds come from context; a paused scanner does not mute them.
    _, changed = _delivery_alarm(switched, metric)
    assert changed["Threshold"] == switched_threshold
    assert changed["ActionsEnabled"] is True


def test_unknown_and_dead_alarms_name_the_commands_to_run(default: Synthesized) -> None:
    _, unknown = _delivery_alarm(default, "Unknown")
    _, dead = _delivery_alarm(default, "Dead")
    for text in (
        "send may have happened",
        "reminders list --state unknown",
        "reminders reconcile KEY --as sent|failed|retry --reason",
    ):
        assert text in unknown["AlarmDescription"]
    for text in ("budget", "reminders list --state dead", "reminders reconcile KEY --as retry"):
        assert text in dead["AlarmDescription"]


def test_errors_and_throttles_alarm_for_every_function(default: Synthesized) -> None:
    for name in FUNCTIONS:
        function_id, _ = default.function(name)
        for metric in ("Errors", "Throttles"):
            matching = [
                a
                for a in _alarms(default)
                if a.get("Namespace") == "AWS/Lambda"
                and a["MetricName"] == metric
                and _dimension_ref(a) == {"Ref": function_id}
            ]
            assert len(matching) == 1, (name, metric)
            assert matching[0]["Threshold"] == 1


def test_every_alarm_notifies_the_topic_and_says_what_to_do(default: Synthesized) -> None:
    (topic_id,) = default.resources("AWS::SNS::Topic")
    composites = [
        c["Properties"] for c in default.resources("AWS::CloudWatch::CompositeAlarm").values()
    ]
    for alarm in [*_alarms(default), *composites]:
        if alarm.get("ActionsEnabled") is False:  # the composite's inputs
            assert "composite" in alarm["AlarmDescription"]
            continue
        assert alarm["AlarmActions"] == [{"Ref": topic_id}]
        assert "First:" in alarm["AlarmDescription"]


def test_alarm_subscribers_come_from_context(default: Synthesized, switched: Synthesized) -> None:
    assert default.resources("AWS::SNS::Subscription") == {}
    endpoints = {
        s["Properties"]["Endpoint"] for s in switched.resources("AWS::SNS::Subscription").values()
    }
    assert endpoints == {"ops@example.com", "oncall@example.com"}


def test_topic_is_encrypted_and_tls_only(default: Synthesized) -> None:
    default.template.has_resource_properties(
        "AWS::SNS::Topic", {"KmsMasterKeyId": Match.any_value()}
    )
    default.template.has_resource_properties(
        "AWS::SNS::TopicPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Deny",
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            }
                        )
                    ]
                )
            }
        },
    )


def test_one_dashboard_and_the_outputs_operators_need(default: Synthesized) -> None:
    default.template.resource_count_is("AWS::CloudWatch::Dashboard", 1)
    assert {
        "DeliveriesQueueUrl",
        "DeliveriesQueueArn",
        "DeadLetterQueueUrl",
        "DeadLetterQueueArn",
        "ParkingQueueUrl",
        "ParkingQueueArn",
        "ProxyEndpoint",
        "DatabaseSecretArn",
        "DashboardUrl",
    } <= set(default.json["Outputs"])


def test_dashboard_graphs_every_outcome_the_consumer_counts(default: Synthesized) -> None:
    from reminders.consumer import OUTCOME_METRICS

    (dashboard,) = default.resources("AWS::CloudWatch::Dashboard").values()
    parts = dashboard["Properties"]["DashboardBody"]["Fn::Join"][1]
    body = "".join(p for p in parts if isinstance(p, str))
    wanted = {*OUTCOME_METRICS.values(), "MessagesFailed", "OldestOverdueSeconds"} - {"Released"}
    assert {name for name in wanted if f'"{name}"' in body} == wanted


def _dashboard_widgets(synth: Synthesized) -> list[dict[str, Any]]:
    (dashboard,) = synth.resources("AWS::CloudWatch::Dashboard").values()
    parts = dashboard["Properties"]["DashboardBody"]["Fn::Join"][1]
    body = "".join(p if isinstance(p, str) else "TOKEN" for p in parts)
    return json.loads(body)["widgets"]  # type: ignore[no-any-return]


def test_dashboard_graphs_unknown_and_dead_as_their_alarms_see_them(
    default: Synthesized,
) -> None:
    graphs = [
        w["properties"]
        for w in _dashboard_widgets(default)
        if "Unknown and dead" in w["properties"].get("title", "")
    ]
    assert len(graphs) == 1
    metrics = graphs[0]["metrics"]
    assert [m[:4] for m in metrics] == [
        ["Reminders", "Unknown", "service", "reminders"],
        ["Reminders", "Dead", "service", "reminders"],
    ]
    for *_, options in metrics:
        assert options["stat"] == "Sum"
        assert options.get("period", 300) == 300


def test_synth_is_pinned_to_context_account_region_and_zones(switched: Synthesized) -> None:
    assert switched.stack.account == "123456789012"
    assert switched.stack.region == "eu-west-1"
    zones = {
        subnet["Properties"]["AvailabilityZone"]
        for subnet in switched.resources("AWS::EC2::Subnet").values()
    }
    assert zones == {"eu-west-1a", "eu-west-1b", "eu-west-1c"}


def test_without_context_the_stack_takes_the_account_region_and_zones_at_deploy_time(
    default: Synthesized,
) -> None:
    # Neither context nor CDK_DEFAULT_ACCOUNT/REGION (tests/infra/conftest.py clears them):
    # environment-agnostic, CloudFormation fills in the caller's account and region.
    assert Token.is_unresolved(default.stack.account)
    assert Token.is_unresolved(default.stack.region)
    zones = [
        subnet["Properties"]["AvailabilityZone"]
        for subnet in default.resources("AWS::EC2::Subnet").values()
    ]
    assert zones
    for zone in zones:
        assert zone["Fn::Select"][1] == {"Fn::GetAZs": ""}
    assert {zone["Fn::Select"][0] for zone in zones} == {0, 1}
    assert "123456789012" not in json.dumps(default.json)
