"""``reminders local up --explain``: per resource type of the synthesized template, how this
machine runs it: ``real`` (the same thing AWS would do, as moto does it with IAM enforced),
``stand-in`` (a local part in its place, at least as strict), or ``not run`` (what only a
deploy exercises). A type missing from :data:`RUN_HERE` is shown as ``unknown``, and the test
of this table fails on it, so a new resource in the stack cannot go unexplained."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

REAL, STAND_IN, NOT_RUN, UNKNOWN = "real", "stand-in", "not run", "unknown"
_NETWORK = "one machine, one network: loopback, no VPC, routes or security groups"

RUN_HERE: Mapping[str, tuple[str, str]] = {
    "AWS::IAM::Role": (REAL, "each service function's role made in moto, IAM enforced on "
                             "every call; CDK's helper functions' roles are not made"),
    "AWS::IAM::Policy": (REAL, "the service functions' statements, references resolved to the "
                               "local resources, attached to their roles in moto"),
    "AWS::SQS::Queue": (STAND_IN, "moto's SQS, each queue with the template's attributes and "
                                  "redrive policy (twin.resources); the console's redrive "
                                  "through StartMessageMoveTask (local.message_moves)"),
    "AWS::Lambda::EventSourceMapping": (STAND_IN, "a poller per mapping: BatchSize, batching "
                                                  "window, MaximumConcurrency, partial batch "
                                                  "responses (twin.poller)"),
    "AWS::Lambda::Function": (STAND_IN, "scanner, consumer, redrive and migrate from their "
                                        "built assets, each instance a process of CPython 3.13 "
                                        "(awslambdaric, a local Runtime API), Timeout and "
                                        "MemorySize enforced, at most 2 instances a function, "
                                        "as their roles (twin.run); the publisher too when the "
                                        "template has the fan-out, invoked through a local "
                                        "Lambda Invoke endpoint that checks the signature and "
                                        "the caller's lambda:InvokeFunction grant "
                                        "(twin.async_invoke); `local up` runs the variant whose "
                                        "scanner publishes itself; CDK's helper functions are "
                                        "not run"),
    "AWS::Lambda::LayerVersion": (STAND_IN, "the layer's packages, installed for this machine"),
    "AWS::Lambda::EventInvokeConfig": (STAND_IN, "asynchronous invokes queued and run on the "
                                                 "injected clock: MaximumRetryAttempts (retries "
                                                 "after 1 and 2 minutes, no jitter), "
                                                 "MaximumEventAgeInSeconds, an SQS OnFailure "
                                                 "destination; AsyncEventsDropped "
                                                 "(twin.async_invoke)"),
    "AWS::Events::Rule": (STAND_IN, "its rate or cron ticks, on the injected clock"),
    "Custom::RemindersMigrations": (STAND_IN, "the migrate function invoked with "
                                              "CloudFormation's Create, then Update when its "
                                              "properties change, the twin playing the "
                                              "Provider framework (a local ResponseURL)"),
    "AWS::RDS::DBInstance": (STAND_IN, "embedded Postgres (from PyPI)"),
    "AWS::RDS::DBProxy": (STAND_IN, "PgBouncer in transaction mode, refusing session state as "
                                    "RDS Proxy does"),
    "AWS::RDS::DBProxyTargetGroup": (STAND_IN, "PgBouncer's one database"),
    "AWS::KMS::Key": (STAND_IN, "moto's KMS: the webhook secrets key (the alarm topic's key is "
                                "not made)"),
    "AWS::SecretsManager::Secret": (STAND_IN, "moto's Secrets Manager where a test stores one; "
                                              "the local stack gives DATABASE_URL whole"),
    "AWS::CloudWatch::Alarm": (STAND_IN, "evaluated from the run's metrics (EMF lines, Lambda "
                                         "and SQS metrics), as CloudWatch would (twin.alarms)"),
    "AWS::CloudWatch::CompositeAlarm": (STAND_IN, "its rule over the evaluated alarms "
                                                  "(twin.alarms)"),
    "AWS::SQS::QueuePolicy": (NOT_RUN, "the deny without TLS: moto listens on plain HTTP on "
                                       "loopback"),
    "AWS::Lambda::Permission": (NOT_RUN, "resource-based policies are not read: the local "
                                         "Invoke endpoint checks only the caller's role"),
    "AWS::RDS::DBParameterGroup": (NOT_RUN, "the embedded server runs with its own settings"),
    "AWS::RDS::DBSubnetGroup": (NOT_RUN, _NETWORK),
    "AWS::SecretsManager::SecretTargetAttachment": (NOT_RUN, "no RDS instance to attach to"),
    "AWS::SecretsManager::RotationSchedule": (NOT_RUN, "secret rotation"),
    "AWS::SecretsManager::ResourcePolicy": (NOT_RUN, "the secrets' deletion guard"),
    "AWS::Serverless::Application": (NOT_RUN, "the rotation functions from the Serverless "
                                              "Application Repository"),
    "AWS::SNS::Topic": (NOT_RUN, "alarm notifications: the twin lists alarm transitions "
                                 "instead"),
    "AWS::SNS::TopicPolicy": (NOT_RUN, "alarm notifications"),
    "AWS::CloudWatch::Dashboard": (NOT_RUN, "the dashboard"),
    "AWS::Logs::LogGroup": (NOT_RUN, "log groups and retention: each process logs to stderr"),
    "AWS::EC2::VPC": (NOT_RUN, _NETWORK),
    "AWS::EC2::Subnet": (NOT_RUN, _NETWORK),
    "AWS::EC2::RouteTable": (NOT_RUN, _NETWORK),
    "AWS::EC2::SubnetRouteTableAssociation": (NOT_RUN, _NETWORK),
    "AWS::EC2::Route": (NOT_RUN, _NETWORK),
    "AWS::EC2::VPCEndpoint": (NOT_RUN, "every AWS endpoint is moto's, on loopback"),
    "AWS::EC2::SecurityGroup": (NOT_RUN, _NETWORK),
    "AWS::EC2::SecurityGroupIngress": (NOT_RUN, _NETWORK),
    "AWS::EC2::SecurityGroupEgress": (NOT_RUN, _NETWORK + " (the webhook egress guard runs "
                                                          "in the code)"),
    "AWS::EC2::EIP": (NOT_RUN, _NETWORK),
    "AWS::EC2::NatGateway": (NOT_RUN, _NETWORK),
    "AWS::EC2::InternetGateway": (NOT_RUN, _NETWORK),
    "AWS::EC2::VPCGatewayAttachment": (NOT_RUN, _NETWORK),
    "AWS::EC2::FlowLog": (NOT_RUN, "VPC flow logs"),
    "Custom::VpcRestrictDefaultSG": (NOT_RUN, "the default security group's lockdown"),
    "Custom::AWS": (NOT_RUN, "the SDK call that turns on the database's deletion protection"),
}
# Services the functions call that the template names no resource for.
ALSO = (("AWS STS", STAND_IN, "a SigV4-verifying STS for identity proofs; moto's for "
                              "AssumeRole"),
        ("Amazon SES, Amazon SNS", STAND_IN, "moto's, with the sender identity verified"))
ORDER = (REAL, STAND_IN, NOT_RUN, UNKNOWN)


@dataclass(frozen=True)
class Line:
    resource_type: str
    count: int
    how: str
    what: str


def explain(template: Mapping[str, Any]) -> list[Line]:
    """One line per resource type of ``template``: real first, then stand-ins, then what is
    not run; by type name within each."""
    counts = Counter(str(r.get("Type")) for r in template.get("Resources", {}).values())
    lines = [Line(t, n, *RUN_HERE.get(t, (UNKNOWN, "not in the table of "
                                                    "reminders.local.twin.explain")))
             for t, n in counts.items()]
    return sorted(lines, key=lambda line: (ORDER.index(line.how), line.resource_type))


def uncovered(template: Mapping[str, Any]) -> list[str]:
    return [line.resource_type for line in explain(template) if line.how == UNKNOWN]


def as_text(lines: list[Line]) -> str:
    width = max((len(line.resource_type) for line in lines), default=0)
    out = [f"{line.how:<8} {line.count:>3} x {line.resource_type:<{width}}  {line.what}"
           for line in lines]
    out += [f"{how:<8}       {name:<{width}}  {what}" for name, how, what in ALSO]
    return "\n".join(out)


def as_json(lines: list[Line]) -> list[dict[str, Any]]:
    return [{"type": line.resource_type, "count": line.count, "how": line.how,
             "what": line.what} for line in lines]
