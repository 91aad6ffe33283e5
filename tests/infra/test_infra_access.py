"""Who gets which credentials and grants, what waits for the migrations, and the new alarms."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.infra.synth import Synthesized

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVICE_FUNCTIONS = ("scanner", "consumer", "redrive")


def _statements_of(synth: Synthesized, function: str) -> list[dict[str, Any]]:
    _, resource = synth.function(function)
    role_id = resource["Properties"]["Role"]["Fn::GetAtt"][0]
    statements: list[dict[str, Any]] = []
    for policy in synth.resources("AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            statements += policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


def _all_statements(synth: Synthesized) -> list[dict[str, Any]]:
    statements: list[dict[str, Any]] = []
    for policy in synth.resources("AWS::IAM::Policy").values():
        statements += policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _actions(statements: list[dict[str, Any]]) -> set[str]:
    return {action for s in statements for action in _as_list(s["Action"])}


def _secret_ids(synth: Synthesized) -> tuple[str, str]:
    """(master attachment, app attachment) logical ids, from the stack outputs."""
    master = synth.json["Outputs"]["DatabaseSecretArn"]["Value"]["Ref"]
    app = synth.json["Outputs"]["AppDatabaseSecretArn"]["Value"]["Ref"]
    assert master != app
    for logical_id in (master, app):
        resource = synth.json["Resources"][logical_id]
        assert resource["Type"] == "AWS::SecretsManager::SecretTargetAttachment"
    return master, app


def _migration(synth: Synthesized) -> tuple[str, dict[str, Any]]:
    ((logical_id, resource),) = synth.resources("Custom::RemindersMigrations").items()
    return logical_id, resource


# --- item 3: the application role and its secret -----------------------------------------


def test_service_functions_log_in_as_the_app_role_and_migrate_as_master(
    default: Synthesized,
) -> None:
    master, app = _secret_ids(default)
    for name in SERVICE_FUNCTIONS:
        _, function = default.function(name)
        variables = function["Properties"]["Environment"]["Variables"]
        assert variables["REMINDERS_DB_SECRET_ARN"] == {"Ref": app}, name
        reads = [
            s for s in _statements_of(default, name) if "secretsmanager:GetSecretValue" in
            _as_list(s["Action"])
        ]
        assert [s["Resource"] for s in reads] == [{"Ref": app}], name
    _, migrate = default.function("migrate")
    assert migrate["Properties"]["Environment"]["Variables"]["REMINDERS_DB_SECRET_ARN"] == {
        "Ref": master
    }
    reads = [
        s for s in _statements_of(default, "migrate")
        if "secretsmanager:GetSecretValue" in _as_list(s["Action"])
    ]
    # Its own login, and the app role's (to set the role's password when it creates it).
    assert sorted(json.dumps(s["Resource"]) for s in reads) == sorted(
        json.dumps({"Ref": ref}) for ref in (master, app)
    )


def test_the_master_secret_serves_migrations_only(default: Synthesized) -> None:
    master, _ = _secret_ids(default)
    for name in SERVICE_FUNCTIONS:
        assert json.dumps({"Ref": master}) not in json.dumps(_statements_of(default, name))
        _, function = default.function(name)
        assert json.dumps({"Ref": master}) not in json.dumps(function["Properties"])


def test_the_app_secret_is_rotated_like_the_masters_once_the_role_exists(
    default: Synthesized,
) -> None:
    master, app = _secret_ids(default)
    migration_id, _ = _migration(default)
    schedules = default.resources("AWS::SecretsManager::RotationSchedule")
    by_secret = {s["Properties"]["SecretId"]["Ref"]: s for s in schedules.values()}
    assert set(by_secret) == {master, app}
    for secret in (master, app):
        assert by_secret[secret]["Properties"]["RotationRules"] == by_secret[master][
            "Properties"
        ]["RotationRules"]
    # The app secret's rotation logs in as the role, so it waits for migrate to create it.
    assert migration_id in by_secret[app]["DependsOn"]
    applications = default.resources("AWS::Serverless::Application")
    assert len(applications) == 2
    for application in applications.values():
        (mapping, *_) = application["Properties"]["Location"]["ApplicationId"]["Fn::FindInMap"]
        location = default.json["Mappings"][mapping]["aws"]["applicationId"]
        assert location.endswith("SecretsManagerRDSPostgreSQLRotationSingleUser")
    # The proxy accepts both logins.
    (proxy,) = default.resources("AWS::RDS::DBProxy").values()
    secrets = json.dumps(proxy["Properties"]["Auth"])
    assert json.dumps({"Ref": master}) in secrets and json.dumps({"Ref": app}) in secrets


def test_the_migrations_resource_names_the_app_secret(default: Synthesized) -> None:
    _, app = _secret_ids(default)
    _, migration = _migration(default)
    assert migration["Properties"]["AppSecretArn"] == {"Ref": app}
    # The stack created the database: the migrate function may revoke PUBLIC's database-wide
    # CREATE and TEMPORARY there (never in an existing database, where the property is absent).
    assert migration["Properties"]["OwnsDatabase"] == "true"
    # The service role's session limits, which it writes as role settings (RDS Proxy refuses
    # them as startup options): the same the functions are configured with.
    consumer_env = default.function("consumer")[1]["Properties"]["Environment"]["Variables"]
    assert (migration["Properties"]["LockTimeoutMs"],
            migration["Properties"]["StatementTimeoutMs"]) == (
        consumer_env["REMINDERS_DB_LOCK_TIMEOUT_MS"],
        consumer_env["REMINDERS_DB_STATEMENT_TIMEOUT_MS"])


def test_the_app_role_grants_rerun_when_the_migrate_handler_changes(tmp_path: Path) -> None:
    from infra.layer import migrations_fingerprint

    (tmp_path / "shared" / "reminders" / "db" / "migrations").mkdir(parents=True)
    (tmp_path / "shared" / "reminders" / "db" / "migrations" / "0001_x.sql").write_text("x")
    (tmp_path / "functions" / "migrate").mkdir(parents=True)
    handler = tmp_path / "functions" / "migrate" / "handler.py"
    handler.write_text("GRANTS = 1\n")
    before = migrations_fingerprint(tmp_path)
    handler.write_text("GRANTS = 2\n")
    assert migrations_fingerprint(tmp_path) != before


# --- item 4: nothing new runs against the old schema -------------------------------------


def test_functions_event_sources_and_schedule_wait_for_the_migrations(
    default: Synthesized,
) -> None:
    migration_id, _ = _migration(default)
    for name in SERVICE_FUNCTIONS:
        _, function = default.function(name)
        assert migration_id in function["DependsOn"], name
    mappings = default.resources("AWS::Lambda::EventSourceMapping")
    assert len(mappings) == 2
    for mapping in mappings.values():
        assert migration_id in mapping["DependsOn"]
    (rule,) = default.resources("AWS::Events::Rule").values()
    assert migration_id in rule["DependsOn"]


# --- item 7: rotation and send configuration alarms -------------------------------------


def _alarms(synth: Synthesized) -> dict[str, dict[str, Any]]:
    return {
        logical_id: alarm["Properties"]
        for logical_id, alarm in synth.resources("AWS::CloudWatch::Alarm").items()
    }


def test_a_failed_rotation_of_either_secret_pages(default: Synthesized) -> None:
    (topic_id,) = default.resources("AWS::SNS::Topic")
    names = {
        app["Properties"]["Parameters"]["functionName"]
        for app in default.resources("AWS::Serverless::Application").values()
    }
    rotation_alarms = {
        alarm["Dimensions"][0]["Value"]: alarm
        for alarm in _alarms(default).values()
        if alarm.get("Namespace") == "AWS/Lambda"
        and alarm["MetricName"] == "Errors"
        and alarm["Dimensions"][0]["Name"] == "FunctionName"
        and isinstance(alarm["Dimensions"][0]["Value"], str)
    }
    assert set(rotation_alarms) == names
    for alarm in rotation_alarms.values():
        assert alarm["Threshold"] == 1
        assert alarm["AlarmActions"] == [{"Ref": topic_id}]
        assert "First:" in alarm["AlarmDescription"]
        assert "AWSPENDING" in alarm["AlarmDescription"]


@pytest.mark.parametrize("channel", ["email", "sms", "webhook"])
def test_send_configuration_errors_page_per_channel(default: Synthesized, channel: str) -> None:
    (topic_id,) = default.resources("AWS::SNS::Topic")
    (alarm,) = [
        a
        for a in _alarms(default).values()
        if a.get("MetricName") == "SendConfigErrors"
        and {"Name": "channel", "Value": channel} in a["Dimensions"]
    ]
    assert alarm["Namespace"] == "Reminders"
    assert {"Name": "service", "Value": "reminders"} in alarm["Dimensions"]
    assert alarm["Statistic"] == "Sum"
    assert alarm["Threshold"] == 1
    assert alarm["TreatMissingData"] == "notBreaching"
    assert alarm["AlarmActions"] == [{"Ref": topic_id}]
    assert "First:" in alarm["AlarmDescription"]


def _dashboard_body(synth: Synthesized) -> str:
    (dashboard,) = synth.resources("AWS::CloudWatch::Dashboard").values()
    parts = dashboard["Properties"]["DashboardBody"]["Fn::Join"][1]
    return "".join(p if isinstance(p, str) else json.dumps(p) for p in parts)


def test_the_new_signals_are_on_the_dashboard(default: Synthesized) -> None:
    body = _dashboard_body(default)
    for channel in ("email", "sms", "webhook"):
        assert f'"SendConfigErrors","channel","{channel}"' in body or (
            '"SendConfigErrors"' in body and f'"{channel}"' in body
        )
    for application in default.resources("AWS::Serverless::Application").values():
        assert application["Properties"]["Parameters"]["functionName"] in body
    assert '"PausedOldestOverdueSeconds"' in body
    # Every alarm that pages shows in the alarm status widget.
    for logical_id, alarm in _alarms(default).items():
        if alarm.get("ActionsEnabled") is not False:
            assert logical_id in body, logical_id
    for logical_id in default.resources("AWS::CloudWatch::CompositeAlarm"):
        assert logical_id in body


# --- item 12: egress, grants, endpoints, the alarm key ------------------------------------


def test_the_proxy_group_sends_only_to_the_database(default: Synthesized) -> None:
    (proxy,) = default.resources("AWS::RDS::DBProxy").values()
    (group_ref,) = proxy["Properties"]["VpcSecurityGroupIds"]
    group_id = group_ref["Fn::GetAtt"][0]
    group = default.json["Resources"][group_id]["Properties"]
    # An empty inline list would mean EC2's default allow-all egress.
    assert group["SecurityGroupEgress"] == [
        {
            "CidrIp": "255.255.255.255/32",
            "Description": "Disallow all traffic",
            "FromPort": 252,
            "IpProtocol": "icmp",
            "ToPort": 86,
        }
    ]
    (instance,) = default.resources("AWS::RDS::DBInstance").values()
    (instance_group,) = instance["Properties"]["VPCSecurityGroups"]
    egress = [
        rule["Properties"]
        for rule in default.resources("AWS::EC2::SecurityGroupEgress").values()
        if rule["Properties"]["GroupId"] == {"Fn::GetAtt": [group_id, "GroupId"]}
    ]
    assert egress
    for rule in egress:
        assert rule["DestinationSecurityGroupId"] == instance_group
        assert rule["IpProtocol"] == "tcp"


def test_no_grant_of_an_action_nothing_calls(default: Synthesized) -> None:
    actions = _actions(_all_statements(default))
    for unused in ("ses:SendRawEmail", "sqs:GetQueueUrl"):
        assert unused not in actions
    for name in (*SERVICE_FUNCTIONS, "migrate"):
        assert "secretsmanager:DescribeSecret" not in _actions(_statements_of(default, name))
    # The scanner reads the deliveries queue's depth (the publisher sends, fan-out being on
    # by default); redrive only parks.
    scanner_sqs = {a for a in _actions(_statements_of(default, "scanner")) if a.startswith("sqs:")}
    assert scanner_sqs == {"sqs:GetQueueAttributes"}
    parking_id = default.json["Outputs"]["ParkingQueueArn"]["Value"]["Fn::GetAtt"][0]
    ops = _statements_of(default, "ops-read")
    on_parking = [
        s
        for s in _all_statements(default)
        if json.dumps(s["Resource"]).count(f'"{parking_id}"') and s not in ops
    ]
    assert _actions(on_parking) == {"sqs:SendMessage"}
    # The read operations function only reads the queues' depths (`status`); the write one
    # reads none.
    ops_on_parking = [s for s in ops if json.dumps(s["Resource"]).count(f'"{parking_id}"')]
    assert _actions(ops_on_parking) == {"sqs:GetQueueAttributes"}
    assert not [s for s in _statements_of(default, "ops-write")
                if json.dumps(s["Resource"]).count(f'"{parking_id}"')]


def test_only_this_accounts_alarms_may_use_the_alarm_key(default: Synthesized) -> None:
    (key,) = [k for k in default.resources("AWS::KMS::Key").values()
              if "alarm" in k["Properties"].get("Description", "")]
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    cloudwatch = [
        s for s in statements if s.get("Principal", {}).get("Service") == "cloudwatch.amazonaws.com"
    ]
    assert len(cloudwatch) == 1
    condition = cloudwatch[0]["Condition"]
    assert condition == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}


# --- item 11: synth with no credentials at all --------------------------------------------


@pytest.mark.parametrize(
    "cli_environment",
    [{}, {"CDK_DEFAULT_ACCOUNT": "210987654321", "CDK_DEFAULT_REGION": "ap-south-1"}],
    ids=["no-cli", "cli-defaults"],
)
def test_the_cdk_app_synthesizes_without_credentials_or_context(
    layer_dir: Path, tmp_path: Path, cli_environment: dict[str, str]
) -> None:
    keep = {"PATH", "HOME", "LANG", "PYTHONPATH", "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION"}
    env = {name: value for name, value in os.environ.items() if name in keep}
    env.update(
        CDK_OUTDIR=str(tmp_path / "out"),
        AWS_CONFIG_FILE=str(tmp_path / "no-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-credentials"),
        AWS_EC2_METADATA_DISABLED="true",
        **cli_environment,
    )
    result = subprocess.run(
        [sys.executable, "-m", "infra.app"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    template = json.loads((tmp_path / "out" / "Reminders.template.json").read_text())
    text = json.dumps(template)
    assert "123456789012" not in text
    assert "eu-west-1" not in text
    # Nothing was looked up (a lookup would need credentials at deploy time too).
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert "missing" not in manifest
    stack = manifest["artifacts"]["Reminders"]
    if cli_environment:
        assert stack["environment"] == "aws://210987654321/ap-south-1"
    else:
        assert stack["environment"] == "aws://unknown-account/unknown-region"
