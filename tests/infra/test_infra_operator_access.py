"""Reaching the deployed database: the operations function, the SSM port-forward host
(``operatorAccess=bastion``), and deploying against an existing Postgres (``existingDbHost``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra.settings import SettingsError
from tests.infra.conftest import EXISTING_DB_CONTEXT
from tests.infra.synth import Synthesized
from tests.infra.test_infra_access import _actions, _as_list, _migration, _statements_of

ALL_FUNCTIONS = ("scanner", "consumer", "redrive", "migrate", "ops-read", "ops-write")
OPS = ("ops-read", "ops-write")


def _variables(synth: Synthesized, name: str) -> dict[str, Any]:
    _, function = synth.function(name)
    return function["Properties"]["Environment"]["Variables"]  # type: ignore[no-any-return]


def _endpoint_services(synth: Synthesized) -> set[str]:
    services = set()
    for endpoint in synth.resources("AWS::EC2::VPCEndpoint").values():
        name = json.dumps(endpoint["Properties"]["ServiceName"])
        services.add(name.rsplit(".", 1)[-1].strip('"]}'))
    return services


# --- the operations function ---------------------------------------------------------------


@pytest.mark.parametrize("name", OPS)
def test_each_ops_function_is_bounded_in_the_isolated_subnets_and_waits_for_migrations(
    default: Synthesized, name: str
) -> None:
    logical_id, ops = default.function(name)
    props = ops["Properties"]
    assert props["FunctionName"] == f"Reminders-{name}"
    assert props["Handler"] == "functions.ops.handler.handler"  # one code, deployed twice
    assert props["Environment"]["Variables"]["REMINDERS_OPS_SERVES"] == name.split("-")[1]
    assert props["Timeout"] == 120
    # Its own limit: a reader looping on `status` is throttled alone, never a writer.
    assert props["ReservedConcurrentExecutions"] == 1
    _, scanner = default.function("scanner")
    assert props["VpcConfig"] == scanner["Properties"]["VpcConfig"]
    migration_id, _ = _migration(default)
    assert migration_id in ops["DependsOn"]
    # Its own log group and role, like the others.
    groups = {
        n: default.function(n)[1]["Properties"]["LoggingConfig"]["LogGroup"]
        for n in ALL_FUNCTIONS
    }
    assert len({json.dumps(g) for g in groups.values()}) == len(ALL_FUNCTIONS)
    roles = {json.dumps(default.function(n)[1]["Properties"]["Role"]) for n in ALL_FUNCTIONS}
    assert len(roles) == len(ALL_FUNCTIONS)
    output = "OpsReadFunctionName" if name == "ops-read" else "OpsWriteFunctionName"
    assert default.json["Outputs"][output]["Value"] == {"Ref": logical_id}
    assert "OpsFunctionName" not in default.json["Outputs"]


def test_the_ops_functions_are_invoked_by_identity_policies_only(default: Synthesized) -> None:
    """No resource policy widens who may invoke an operations function: the documented
    operator-read and operator-write policies decide."""
    ids = {default.function(n)[0] for n in OPS}
    permissions = [p["Properties"] for p in default.resources("AWS::Lambda::Permission").values()
                   if any(i in json.dumps(p["Properties"]["FunctionName"]) for i in ids)]
    assert permissions == []


@pytest.mark.parametrize("name", OPS)
def test_the_ops_functions_log_in_as_the_app_role_and_only_reads_read_queue_depths(
    default: Synthesized, name: str
) -> None:
    app = default.json["Outputs"]["AppDatabaseSecretArn"]["Value"]
    master = default.json["Outputs"]["DatabaseSecretArn"]["Value"]
    variables = _variables(default, name)
    assert variables["REMINDERS_DB_SECRET_ARN"] == app
    assert variables["REMINDERS_STS_ENDPOINT"] == {
        "Fn::Join": ["", ["https://sts.", {"Ref": "AWS::Region"}, ".",
                          {"Ref": "AWS::URLSuffix"}]]
    }
    statements = _statements_of(default, name)
    assert json.dumps(master) not in json.dumps(statements)
    sqs = [s for s in statements if any(a.startswith("sqs:") for a in _as_list(s["Action"]))]
    if name == "ops-write":
        assert sqs == []  # no write command reads a queue
    else:
        assert _actions(sqs) == {"sqs:GetQueueAttributes"}
        (grant,) = sqs
        queue_arns = [default.json["Outputs"][f"{q}QueueArn"]["Value"]
                      for q in ("Deliveries", "DeadLetter", "Parking")]
        assert sorted(map(json.dumps, grant["Resource"])) == sorted(map(json.dumps, queue_arns))
    assert _actions(statements) - {"sqs:GetQueueAttributes"} == {
        "secretsmanager:GetSecretValue", "logs:CreateLogStream", "logs:PutLogEvents",
        "ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets",
        "ec2:DeleteNetworkInterface", "ec2:AssignPrivateIpAddresses",
        "ec2:UnassignPrivateIpAddresses", "xray:PutTraceSegments", "xray:PutTelemetryRecords",
    }


def test_sts_is_reachable_from_the_isolated_subnets(default: Synthesized) -> None:
    assert "sts" in _endpoint_services(default)


# --- the SSM port-forward host -------------------------------------------------------------


def test_no_port_forward_host_by_default(default: Synthesized) -> None:
    assert default.resources("AWS::EC2::Instance") == {}
    assert "PortForwardInstanceId" not in default.json["Outputs"]
    assert not {"ssm", "ssmmessages", "ec2messages"} & _endpoint_services(default)


def _group_of_instance(synth: Synthesized) -> tuple[str, dict[str, Any]]:
    (instance,) = synth.resources("AWS::EC2::Instance").values()
    ((group,),) = [n["GroupSet"] for n in instance["Properties"]["NetworkInterfaces"]]
    group_id = group["Fn::GetAtt"][0]
    return group_id, synth.json["Resources"][group_id]["Properties"]


def test_the_port_forward_host_has_no_way_in_but_session_manager(bastion: Synthesized) -> None:
    (logical_id, instance), = bastion.resources("AWS::EC2::Instance").items()
    props = instance["Properties"]
    assert "KeyName" not in props
    (interface,) = props["NetworkInterfaces"]
    assert interface["AssociatePublicIpAddress"] is False
    subnet_id = interface["SubnetId"]["Ref"]
    assert bastion.json["Resources"][subnet_id]["Properties"]["MapPublicIpOnLaunch"] is False
    tags = bastion.json["Resources"][subnet_id]["Properties"]["Tags"]
    assert {"Key": "aws-cdk:subnet-type", "Value": "Isolated"} in tags
    assert all(d["Ebs"]["Encrypted"] for d in props["BlockDeviceMappings"])
    (template,) = bastion.resources("AWS::EC2::LaunchTemplate").values()
    assert template["Properties"]["LaunchTemplateData"]["MetadataOptions"] == {
        "HttpTokens": "required"
    }
    assert template["Properties"]["LaunchTemplateName"] == "Reminders-port-forward"
    assert bastion.json["Outputs"]["PortForwardInstanceId"]["Value"] == {"Ref": logical_id}
    assert "ProxyEndpoint" in bastion.json["Outputs"]
    assert {"ssm", "ssmmessages", "ec2messages"} <= _endpoint_services(bastion)
    # Session Manager only.
    (role,) = [r for r in bastion.resources("AWS::IAM::Role").values()
               if r["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]
               == {"Service": "ec2.amazonaws.com"}]
    assert json.dumps(role["Properties"]["ManagedPolicyArns"]).count("arn:") == 1
    assert "AmazonSSMManagedInstanceCore" in json.dumps(role["Properties"]["ManagedPolicyArns"])


def test_the_port_forward_host_reaches_only_the_proxy_and_the_endpoints(
    bastion: Synthesized,
) -> None:
    group_id, group = _group_of_instance(bastion)
    assert "SecurityGroupIngress" not in group
    ingress = [r for r in bastion.resources("AWS::EC2::SecurityGroupIngress").values()
               if r["Properties"]["GroupId"] == {"Fn::GetAtt": [group_id, "GroupId"]}]
    assert ingress == []
    egress = [r["Properties"] for r in bastion.resources("AWS::EC2::SecurityGroupEgress").values()
              if r["Properties"]["GroupId"] == {"Fn::GetAtt": [group_id, "GroupId"]}]
    (proxy,) = bastion.resources("AWS::RDS::DBProxy").values()
    (proxy_group,) = proxy["Properties"]["VpcSecurityGroupIds"]
    (endpoint,) = [e for e in bastion.resources("AWS::EC2::VPCEndpoint").values()
                   if "ssmmessages" in json.dumps(e["Properties"]["ServiceName"])]
    (endpoint_group,) = endpoint["Properties"]["SecurityGroupIds"]
    assert sorted((r["DestinationSecurityGroupId"]["Fn::GetAtt"][0], r["FromPort"])
                  for r in egress) == sorted([(proxy_group["Fn::GetAtt"][0], 5432),
                                              (endpoint_group["Fn::GetAtt"][0], 443)])
    # The proxy admits it on Postgres' port.
    admitted = [r["Properties"] for r in bastion.resources("AWS::EC2::SecurityGroupIngress")
                .values() if r["Properties"].get("SourceSecurityGroupId")
                == {"Fn::GetAtt": [group_id, "GroupId"]}]
    assert [(r["GroupId"], r["FromPort"], r["ToPort"]) for r in admitted] == [
        (proxy_group, 5432, 5432)]


# --- bring your own database ---------------------------------------------------------------


@pytest.mark.parametrize("variant", ["existing_db", "existing_db_group"])
def test_an_existing_database_gets_no_instance_proxy_or_network(
    variant: str, request: pytest.FixtureRequest
) -> None:
    synth: Synthesized = request.getfixturevalue(variant)
    for kind in ("AWS::RDS::DBInstance", "AWS::RDS::DBProxy", "AWS::EC2::VPC",
                 "AWS::EC2::Subnet", "AWS::EC2::NatGateway", "AWS::EC2::VPCEndpoint",
                 "AWS::RDS::DBProxyTargetGroup", "AWS::EC2::Instance"):
        assert synth.resources(kind) == {}, kind
    assert "ProxyEndpoint" not in synth.json["Outputs"]
    assert synth.json["Outputs"]["DatabaseEndpoint"]["Value"] == "pg.internal.example.com"
    assert not synth.resources("AWS::CloudFormation::CustomResource")  # no deletion protection
    subnets = EXISTING_DB_CONTEXT["existingSubnetIds"]
    assert isinstance(subnets, str)
    for name in ALL_FUNCTIONS:
        variables = _variables(synth, name)
        assert variables["REMINDERS_DB_HOST"] == "pg.internal.example.com", name
        assert variables["REMINDERS_DB_PORT"] == "6432", name
        assert variables["REMINDERS_DB_SCHEMA"] == "reminders_svc", name
        _, function = synth.function(name)
        assert function["Properties"]["VpcConfig"]["SubnetIds"] == subnets.split(","), name
    _, migration = _migration(synth)
    assert migration["Properties"]["Schema"] == "reminders_svc"
    # An application database keeps its database-wide privileges: PUBLIC's are not revoked.
    assert migration["Properties"]["OwnsDatabase"] == "false"
    # The given secret serves the migrations only.
    given = str(EXISTING_DB_CONTEXT["existingDbSecretArn"])
    assert _variables(synth, "migrate")["REMINDERS_DB_SECRET_ARN"] == given
    for name in ("scanner", "consumer", "redrive", *OPS):
        assert given not in json.dumps(_statements_of(synth, name)), name
    reads = [s["Resource"] for s in _statements_of(synth, "migrate")
             if "secretsmanager:GetSecretValue" in _as_list(s["Action"])]
    assert given in reads
    # The application role's secret is rotated once migrate has created the role.
    (schedule,) = synth.resources("AWS::SecretsManager::RotationSchedule").values()
    migration_id, _ = _migration(synth)
    assert migration_id in schedule["DependsOn"]


def test_an_existing_database_admits_a_group_the_stack_creates(
    existing_db: Synthesized,
) -> None:
    groups = existing_db.resources("AWS::EC2::SecurityGroup")
    (group_id, group), = groups.items()
    assert group["Properties"]["VpcId"] == "vpc-0123456789abcdef0"
    assert "SecurityGroupIngress" not in group["Properties"]
    assert existing_db.resources("AWS::EC2::SecurityGroupIngress") == {}
    output = existing_db.json["Outputs"]["DatabaseClientSecurityGroupId"]["Value"]
    assert output == {"Fn::GetAtt": [group_id, "GroupId"]}
    for name in ALL_FUNCTIONS:
        _, function = existing_db.function(name)
        assert function["Properties"]["VpcConfig"]["SecurityGroupIds"] == [output], name


def test_an_existing_database_with_the_users_group_changes_no_group(
    existing_db_group: Synthesized,
) -> None:
    assert existing_db_group.resources("AWS::EC2::SecurityGroup") == {}
    assert existing_db_group.resources("AWS::EC2::SecurityGroupIngress") == {}
    assert existing_db_group.resources("AWS::EC2::SecurityGroupEgress") == {}
    assert existing_db_group.json["Outputs"]["DatabaseClientSecurityGroupId"]["Value"] == \
        "sg-0123456789abcdef0"
    for name in ALL_FUNCTIONS:
        _, function = existing_db_group.function(name)
        assert function["Properties"]["VpcConfig"]["SecurityGroupIds"] == [
            "sg-0123456789abcdef0"], name


def test_the_schema_defaults_to_reminders_everywhere(default: Synthesized) -> None:
    for name in ALL_FUNCTIONS:
        assert _variables(default, name)["REMINDERS_DB_SCHEMA"] == "reminders", name
    _, migration = _migration(default)
    assert migration["Properties"]["Schema"] == "reminders"


# --- settings ------------------------------------------------------------------------------


@pytest.mark.parametrize(("context", "message"), [
    ({"operatorAccess": "ssh"}, "operatorAccess must be one of"),
    ({"dbSchema": "Reminders"}, "dbSchema must be a lower-case Postgres name"),
    ({"dbSchema": "x;drop"}, "dbSchema must be"),
    ({"opsTimeoutSeconds": "600"}, "opsTimeoutSeconds must be between 10 and 300"),
    ({"existingVpcId": "vpc-0123456789abcdef0"}, "existingVpcId applies only with "
                                                  "existingDbHost"),
    ({"existingDbHost": "db"}, "existingDbHost needs existingVpcId, existingSubnetIds, "
                               "existingDbSecretArn as well"),
    ({**EXISTING_DB_CONTEXT, "existingVpcId": "my-vpc"}, "existingVpcId must look like"),
    ({**EXISTING_DB_CONTEXT, "existingSubnetIds": "subnet-0123456789abcdef0,x"},
     "existingSubnetIds: 'x' is not a subnet id"),
    ({**EXISTING_DB_CONTEXT, "existingDbSecretArn": "pg-admin"},
     "existingDbSecretArn must be a Secrets Manager secret ARN"),
    ({**EXISTING_DB_CONTEXT, "existingDbSslmode": "disable"}, "existingDbSslmode must be"),
    ({**EXISTING_DB_CONTEXT, "operatorAccess": "bastion"}, "operatorAccess=bastion creates an "
                                                           "instance in the stack's own VPC"),
])
def test_bad_access_settings_fail_synth_with_the_key_named(
    context: dict[str, object], message: str
) -> None:
    from aws_cdk import App

    from infra.settings import Settings

    with pytest.raises(SettingsError, match=message.replace("(", r"\(")):
        Settings.from_node(App(context=context).node, environ={})
