"""The reminders stack: composes one construct per concern and exports what operators need."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Environment, Fn, Stack
from constructs import Construct

from infra.constructs.access import PortForwardHost
from infra.constructs.database import Database, ExistingDatabase
from infra.constructs.functions import Functions
from infra.constructs.migrations import Migrations
from infra.constructs.monitoring import Monitoring
from infra.constructs.network import Network
from infra.constructs.protection import DeletionProtection
from infra.constructs.queues import Queues
from infra.constructs.schedule import Schedule
from infra.constructs.secrets_key import SecretsKey
from infra.settings import Settings


class RemindersStack(Stack):
    def __init__(
        self, scope: Construct, construct_id: str, *, settings: Settings, **kwargs: Any
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            # None leaves the stack environment-agnostic: CloudFormation supplies them.
            env=Environment(account=settings.account or None, region=settings.region or None),
            description="Reminders: scheduled deliveries over Postgres, SQS and Lambda",
            **kwargs,
        )
        self.settings = settings
        self.network = Network(self, "Network", settings=settings)
        self.database: Database | ExistingDatabase = (
            ExistingDatabase(self, "Database", settings=settings, network=self.network)
            if settings.existing_database
            else Database(self, "Database", settings=settings, network=self.network)
        )
        self.queues = Queues(self, "Queues", settings=settings)
        self.functions = Functions(
            self,
            "Functions",
            settings=settings,
            network=self.network,
            database=self.database,
            queues=self.queues,
        )
        # Webhook signing secrets are sealed under this key; only the consumer opens them.
        consumer_role = self.functions.consumer.role
        assert consumer_role is not None
        self.secrets_key = SecretsKey(self, "SecretsKey", decrypters=[consumer_role],
                                      administrators=settings.key_administrators)
        self.migrations = Migrations(
            self,
            "Migrations",
            settings=settings,
            migrate=self.functions.migrate,
            app_secret_arn=self.database.app_secret.secret_arn,
            schema=settings.db_schema,
            # Only a database this stack created has database-wide defaults that are the
            # service's to revoke; an existing application database keeps its own.
            owns_database=not settings.existing_database,
            after=self.database.proxy,
        )
        # New code never runs against the old schema: the functions that serve traffic (and
        # with them their event source mappings, which are their children) are created or
        # updated only after the migrations, and so is the schedule below.
        for function in self.functions.service_functions.values():
            function.node.add_dependency(self.migrations.resource)
        # The application role exists only once migrate has run; its rotation (which rotates
        # at once when created) logs in as that role.
        self.database.app_rotation_schedule.node.add_dependency(self.migrations.resource)
        self.schedule = Schedule(
            self,
            "Schedule",
            settings=settings,
            scanner=self.functions.scanner,
            after=self.migrations.resource,
        )
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            settings=settings,
            queues=self.queues,
            schedule_dead_letter=self.schedule.dead_letter,
            functions=dict(self.functions.all),
            schedule=self.schedule.rule,
            rotation_functions=self.database.rotation_functions,
        )
        self.port_forward: PortForwardHost | None = None
        if settings.operator_access == "bastion":
            assert isinstance(self.database, Database)
            self.port_forward = PortForwardHost(
                self, "PortForward", network=self.network, database=self.database
            )
        if settings.db_deletion_protection and self.database.instance is not None:
            # After every construct of the stack, CDK's own providers included.
            everything_else = list(self.node.children)
            self.protection: DeletionProtection | None = DeletionProtection(
                self,
                "DeletionProtection",
                instance=self.database.instance,
                after=everything_else,
            )
        else:
            self.protection = None
        self._outputs()

    @property
    def availability_zones(self) -> list[str]:
        """From context, or the region's first zones resolved by CloudFormation at deploy time
        (``Fn::GetAZs``), so synth never looks them up and needs no credentials."""
        if self.settings.azs:
            return self.settings.azs
        return [Fn.select(i, Fn.get_azs()) for i in range(self.settings.zone_count)]

    def _outputs(self) -> None:
        queues = {
            "Deliveries": self.queues.deliveries,
            "DeadLetter": self.queues.dead_letter,
            "Parking": self.queues.parking,
        }
        for name, queue in queues.items():
            CfnOutput(self, f"{name}QueueUrl", value=queue.queue_url)
            CfnOutput(self, f"{name}QueueArn", value=queue.queue_arn)
        if self.database.proxy is not None:
            CfnOutput(self, "ProxyEndpoint", value=self.database.endpoint)
        else:
            CfnOutput(self, "DatabaseEndpoint", value=self.database.endpoint)
            CfnOutput(
                self,
                "DatabaseClientSecurityGroupId",
                value=self.network.function_security_group.security_group_id,
                description="Allow this group on your database's Postgres port",
            )
        CfnOutput(self, "DatabaseSecretArn", value=self.database.secret.secret_arn)
        for kind, output in (("read", "OpsReadFunctionName"), ("write", "OpsWriteFunctionName")):
            CfnOutput(
                self,
                output,
                value=self.functions.ops[kind].function_name,
                description=f"reminders --stack NAME invokes it for the {kind} commands "
                "(lambda:InvokeFunction)",
            )
        if self.port_forward is not None:
            CfnOutput(
                self,
                "PortForwardInstanceId",
                value=self.port_forward.instance.instance_id,
                description="aws ssm start-session --target this --document-name "
                "AWS-StartPortForwardingSessionToRemoteHost",
            )
        CfnOutput(self, "AppDatabaseSecretArn", value=self.database.app_secret.secret_arn)
        CfnOutput(
            self,
            "SecretsKeyArn",
            value=self.secrets_key.key.key_arn,
            description="REMINDERS_SECRETS_KEY_ID for `reminders endpoints add/rotate-secret/"
            "encrypt-secrets` (the caller needs kms:GenerateDataKey on it)",
        )
        CfnOutput(self, "AlarmTopicArn", value=self.monitoring.topic.topic_arn)
        CfnOutput(
            self,
            "DashboardUrl",
            value=Fn.join(
                "",
                [
                    f"https://{self.region}.console.aws.amazon.com/cloudwatch/home?region=",
                    self.region,
                    "#dashboards:name=",
                    self.monitoring.dashboard.dashboard_name,
                ],
            ),
        )
