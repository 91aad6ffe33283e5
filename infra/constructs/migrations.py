"""Runs the migrate function on every deploy whose SQL changed, before the schedule starts."""

from __future__ import annotations

from aws_cdk import CfnElement, CustomResource, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr
from constructs import Construct, IDependable

from infra.layer import migrations_fingerprint
from infra.nag import acknowledge
from infra.settings import Settings, retention_days


def _logical_id(function: lambda_.IFunction) -> str:
    default_child = function.node.default_child
    assert isinstance(default_child, CfnElement)
    return str(Stack.of(function).resolve(default_child.logical_id))


class Migrations(Construct):
    """A custom resource backed by the Provider framework.

    The migrate function receives the CloudFormation request type in ``event["RequestType"]``
    and returns ``{"PhysicalResourceId": ...}``; raising fails the deploy and rolls it back.
    The framework function (outside the VPC) answers CloudFormation, so the migrate function
    needs no route to S3.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        migrate: lambda_.IFunction,
        app_secret_arn: str,
        schema: str,
        owns_database: bool,
        after: IDependable | None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=migrate,
            log_group=logs.LogGroup(
                self, "ProviderLogs", retention=retention_days(settings.log_retention_days)
            ),
        )
        self.resource = CustomResource(
            self,
            "Apply",
            service_token=self.provider.service_token,
            resource_type="Custom::RemindersMigrations",
            # AppSecretArn: the application role's login, which the migrate function creates
            # (or re-grants) after the migrations; a new secret re-runs it.
            # Schema: REMINDERS_DB_SCHEMA, where the migrations put the tables; a new one
            # re-runs them. OwnsDatabase: the database was created by this stack, so its
            # database-wide defaults (PUBLIC's CREATE and TEMPORARY) are the service's to
            # revoke; never in an existing one. LockTimeoutMs, StatementTimeoutMs: the service
            # role's session defaults, written as its role settings (RDS Proxy refuses them
            # as startup options); a change re-runs the function, which writes them again.
            properties={
                "Fingerprint": migrations_fingerprint(),
                "AppSecretArn": app_secret_arn,
                "Schema": schema,
                "OwnsDatabase": "true" if owns_database else "false",
                "LockTimeoutMs": str(settings.db_lock_timeout_ms),
                "StatementTimeoutMs": str(settings.db_statement_timeout_ms),
            },
        )
        # Wait until the proxy and its target group exist: migrate connects through them.
        if after is not None:
            self.resource.node.add_dependency(after)
        acknowledge(
            self.provider,
            "AwsSolutions-IAM4",
            "The Provider framework's own function uses the AWS managed basic execution policy "
            "(CloudWatch Logs only); CDK creates it and it holds no application permissions.",
            "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        )
        acknowledge(
            self.provider,
            "AwsSolutions-IAM5",
            "The framework may invoke only the migrate function; the ':*' suffix covers that "
            "function's versions and aliases, nothing else.",
            f"Resource::<{_logical_id(migrate)}.Arn>:*",
        )
