"""PostgreSQL on RDS behind RDS Proxy, credentials in Secrets Manager with rotation."""

from __future__ import annotations

import json

import jsii
from aws_cdk import Duration, Names, RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from aws_cdk import aws_rds as rds
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from infra.constructs.network import Network
from infra.nag import acknowledge
from infra.settings import PROXY_BORROW_TIMEOUT_SECONDS, Settings, retention_days

POSTGRES_VERSION = rds.PostgresEngineVersion.VER_17_9
PORT = 5432
MASTER_USERNAME = "reminders_admin"
# The least-privilege role scanner, consumer and redrive log in as (DML on the service's
# tables, nothing else); the migrate custom resource creates it (functions/migrate/handler.py).
APP_USERNAME = "reminders_app"
# CDK's own exclusions for RDS passwords (rds.DatabaseSecret and single-user rotation).
PASSWORD_EXCLUDE_CHARACTERS = " %+~`#$&*()|[]{}:;<>?!'/@\"\\"
# What EC2 puts in a security group with no egress rule: CDK's "disallow all" placeholder.
NO_EGRESS = {
    "CidrIp": "255.255.255.255/32",
    "Description": "Disallow all traffic",
    "FromPort": 252,
    "IpProtocol": "icmp",
    "ToPort": 86,
}


def rotation_function_name(rotation: secretsmanager.SecretRotation) -> str:
    """The name CDK gives a SecretRotation's function: the last 64 characters of the
    construct's unique id (aws-secretsmanager's secret-rotation)."""
    unique = Names.unique_id(rotation)
    return unique[-64:]


class Database(Construct):
    """The authority: one PostgreSQL instance, reached by functions only through the proxy."""

    instance: rds.DatabaseInstance | None
    proxy: rds.DatabaseProxy | None
    proxy_security_group: ec2.SecurityGroup | None
    secret: secretsmanager.ISecret
    app_secret: secretsmanager.ISecret
    port: int = PORT

    def __init__(
        self, scope: Construct, construct_id: str, *, settings: Settings, network: Network
    ) -> None:
        super().__init__(scope, construct_id)
        vpc = network.vpc
        self.name = settings.db_name

        self.instance_security_group = ec2.SecurityGroup(
            self,
            "InstanceSecurityGroup",
            vpc=vpc,
            description="PostgreSQL: reached from RDS Proxy and the rotation function only",
            allow_all_outbound=False,
        )
        self.proxy_security_group = ec2.SecurityGroup(
            self,
            "ProxySecurityGroup",
            vpc=vpc,
            description="RDS Proxy: reached from the reminders functions",
            allow_all_outbound=False,
        )
        self.proxy_security_group.add_ingress_rule(
            network.function_security_group, ec2.Port.tcp(PORT), "functions to proxy"
        )
        self.proxy_security_group.add_egress_rule(
            self.instance_security_group, ec2.Port.tcp(PORT), "proxy to database"
        )
        # A rule to another group becomes its own SecurityGroupEgress resource, and CDK drops
        # the group's inline "no traffic" placeholder when it is added: a group with no inline
        # egress gets EC2's default allow-all. Keep the placeholder so that rule is the only one.
        proxy_group = self.proxy_security_group.node.default_child
        assert isinstance(proxy_group, ec2.CfnSecurityGroup)
        proxy_group.add_property_override("SecurityGroupEgress", [NO_EGRESS])
        self.instance_security_group.add_ingress_rule(
            self.proxy_security_group, ec2.Port.tcp(PORT), "proxy to database"
        )

        # Created here (not by RDS) so its retention is set without a log-retention function.
        # Its name is fixed by RDS, so a failed first deploy must not leave it behind (the
        # retry would fail on "already exists"): RetainExceptOnCreate deletes it when a create
        # rolls back and keeps the database's logs when the stack is deleted later.
        instance_identifier = f"{settings.stack_name.lower()}-postgres"
        log_group = logs.LogGroup(
            self,
            "PostgresLogs",
            log_group_name=f"/aws/rds/instance/{instance_identifier}/postgresql",
            retention=retention_days(settings.log_retention_days),
            removal_policy=RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE,
        )
        self.instance = rds.DatabaseInstance(
            self,
            "Instance",
            instance_identifier=instance_identifier,
            engine=rds.DatabaseInstanceEngine.postgres(version=POSTGRES_VERSION),
            instance_type=ec2.InstanceType(settings.db_instance_class),
            vpc=vpc,
            vpc_subnets=network.private_subnets,
            security_groups=[self.instance_security_group],
            port=PORT,
            database_name=settings.db_name,
            credentials=rds.Credentials.from_generated_secret(MASTER_USERNAME),
            allocated_storage=settings.db_allocated_storage_gib,
            max_allocated_storage=settings.db_max_allocated_storage_gib,
            storage_type=rds.StorageType.GP3,
            storage_encrypted=True,
            publicly_accessible=False,
            multi_az=settings.db_multi_az,
            # Off in the template even when dbDeletionProtection is on: a protected instance
            # cannot be deleted when a first deploy rolls back, so the retry would fail. The
            # stack turns protection on as its very last step (infra/constructs/protection.py).
            deletion_protection=False,
            backup_retention=Duration.days(settings.db_backup_retention_days),
            delete_automated_backups=False,
            removal_policy=RemovalPolicy.SNAPSHOT,
            auto_minor_version_upgrade=True,
            cloudwatch_logs_exports=["postgresql"],
            enable_performance_insights=False,
            parameter_group=rds.ParameterGroup(
                self,
                "Parameters",
                engine=rds.DatabaseInstanceEngine.postgres(version=POSTGRES_VERSION),
                parameters={"rds.force_ssl": "1"},
            ),
        )
        self.instance.node.add_dependency(log_group)
        secret = self.instance.secret
        assert secret is not None  # from_generated_secret always creates one
        self.secret = secret

        self.rotation = self.instance.add_rotation_single_user(
            automatically_after=Duration.days(settings.db_rotation_days),
            endpoint=network.endpoints["SecretsManager"],
            vpc_subnets=network.private_subnets,
        )

        # The application's own login: created by the migrate custom resource with the master
        # credentials, rotated like the master's (single user: the role changes its own
        # password). Its rotation waits for the role to exist (infra/stack.py).
        app_secret = rds.DatabaseSecret(
            self,
            "AppSecret",
            username=APP_USERNAME,
            dbname=settings.db_name,
            exclude_characters=PASSWORD_EXCLUDE_CHARACTERS,
        )
        self.app_secret = app_secret.attach(self.instance)
        self.app_rotation = secretsmanager.SecretRotation(
            self,
            "AppSecretRotation",
            application=secretsmanager.SecretRotationApplication.POSTGRES_ROTATION_SINGLE_USER,
            secret=self.app_secret,
            target=self.instance,
            vpc=vpc,
            vpc_subnets=network.private_subnets,
            endpoint=network.endpoints["SecretsManager"],
            automatically_after=Duration.days(settings.db_rotation_days),
            exclude_characters=PASSWORD_EXCLUDE_CHARACTERS,
        )
        schedules = [
            child
            for child in self.app_secret.node.children
            if isinstance(child, secretsmanager.RotationSchedule)
        ]
        assert len(schedules) == 1, schedules
        self.app_rotation_schedule = schedules[0]
        self.rotation_functions = {
            "Master": rotation_function_name(self.rotation),
            "App": rotation_function_name(self.app_rotation),
        }

        self.proxy = self.instance.add_proxy(
            "Proxy",
            db_proxy_name=f"{settings.stack_name.lower()}-proxy",
            vpc=vpc,
            vpc_subnets=network.private_subnets,
            secrets=[self.secret, self.app_secret],
            security_groups=[self.proxy_security_group],
            require_tls=True,
            iam_auth=False,
            debug_logging=False,
            max_connections_percent=90,
            idle_client_timeout=Duration.minutes(30),
            borrow_timeout=Duration.seconds(PROXY_BORROW_TIMEOUT_SECONDS),
        )
        self.endpoint = self.proxy.endpoint

        acknowledge(
            self.instance,
            "AwsSolutions-RDS11",
            "Functions reach PostgreSQL only through RDS Proxy, whose PostgreSQL endpoint "
            "always listens on 5432; the instance accepts connections only from the proxy "
            "and rotation security groups, so a non-default port hides nothing.",
        )
        if not settings.db_multi_az:
            acknowledge(
                self.instance,
                "AwsSolutions-RDS3",
                "Multi-AZ was switched off for this deployment with -c dbMultiAz=false "
                "(development or test); production keeps the default, on.",
            )
        acknowledge(
            self.instance,
            "AwsSolutions-RDS10",
            "Deletion protection is turned on by the stack's last resource "
            "(DeletionProtection custom resource, ModifyDBInstance) once everything else is "
            "created, so a failed first deploy can still roll the instance back and be retried."
            if settings.db_deletion_protection
            else "Deletion protection was switched off for this deployment with "
            "-c dbDeletionProtection=false (a disposable environment).",
        )


class ExistingDatabase(Construct):
    """Bring your own database: Postgres at ``existingDbHost``, no instance and no proxy.

    The given secret (``existingDbSecretArn``: a role that may create the schema and roles)
    serves the migrations only, as the master's does; the application role's login is a new
    secret, created and rotated here, with the host, port and name the rotation function needs.
    """

    instance = None
    proxy = None
    proxy_security_group = None

    def __init__(
        self, scope: Construct, construct_id: str, *, settings: Settings, network: Network
    ) -> None:
        super().__init__(scope, construct_id)
        self.name = settings.db_name
        self.port = settings.existing_db_port
        self.endpoint = settings.existing_db_host
        self.secret = secretsmanager.Secret.from_secret_complete_arn(
            self, "Secret", settings.existing_db_secret_arn
        )
        app_secret = secretsmanager.Secret(
            self,
            "AppSecret",
            description="Reminders application role (scanner, consumer, redrive, ops)",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                secret_string_template=json.dumps(
                    {
                        "engine": "postgres",
                        "host": settings.existing_db_host,
                        "port": settings.existing_db_port,
                        "dbname": settings.db_name,
                        "username": APP_USERNAME,
                    }
                ),
                generate_string_key="password",
                exclude_characters=PASSWORD_EXCLUDE_CHARACTERS,
            ),
        )
        self.app_secret = app_secret
        # The rotation function runs with the functions' security group, which the database
        # already admits; so the target's own connections add no rule.
        self.app_rotation = secretsmanager.SecretRotation(
            self,
            "AppSecretRotation",
            application=secretsmanager.SecretRotationApplication.POSTGRES_ROTATION_SINGLE_USER,
            secret=app_secret,
            target=_NoConnections(settings.existing_db_port),
            vpc=network.vpc,
            vpc_subnets=network.private_subnets,
            security_group=network.function_security_group,
            automatically_after=Duration.days(settings.db_rotation_days),
            exclude_characters=PASSWORD_EXCLUDE_CHARACTERS,
        )
        schedules = [
            child
            for child in app_secret.node.children
            if isinstance(child, secretsmanager.RotationSchedule)
        ]
        assert len(schedules) == 1, schedules
        self.app_rotation_schedule = schedules[0]
        self.rotation_functions = {"App": rotation_function_name(self.app_rotation)}


@jsii.implements(ec2.IConnectable)
class _NoConnections:
    """A rotation target whose connections hold no security group: the database is not the
    stack's, so no rule is added to it (its owner admits the functions' group)."""

    def __init__(self, port: int) -> None:
        self._connections = ec2.Connections(default_port=ec2.Port.tcp(port))

    @property
    def connections(self) -> ec2.Connections:
        return self._connections
