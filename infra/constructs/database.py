"""PostgreSQL on RDS behind RDS Proxy, credentials in Secrets Manager with rotation."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from aws_cdk import aws_rds as rds
from constructs import Construct

from infra.constructs.network import Network
from infra.nag import acknowledge
from infra.settings import Settings, retention_days

POSTGRES_VERSION = rds.PostgresEngineVersion.VER_17_9
PORT = 5432
MASTER_USERNAME = "reminders_admin"


class Database(Construct):
    """The authority: one PostgreSQL instance, reached by functions only through the proxy."""

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
        self.instance_security_group.add_ingress_rule(
            self.proxy_security_group, ec2.Port.tcp(PORT), "proxy to database"
        )

        # Created here (not by RDS) so its retention is set without a log-retention function.
        instance_identifier = f"{settings.stack_name.lower()}-postgres"
        log_group = logs.LogGroup(
            self,
            "PostgresLogs",
            log_group_name=f"/aws/rds/instance/{instance_identifier}/postgresql",
            retention=retention_days(settings.log_retention_days),
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
            deletion_protection=settings.db_deletion_protection,
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

        self.proxy = self.instance.add_proxy(
            "Proxy",
            db_proxy_name=f"{settings.stack_name.lower()}-proxy",
            vpc=vpc,
            vpc_subnets=network.private_subnets,
            secrets=[self.secret],
            security_groups=[self.proxy_security_group],
            require_tls=True,
            iam_auth=False,
            debug_logging=False,
            max_connections_percent=90,
            idle_client_timeout=Duration.minutes(30),
            borrow_timeout=Duration.seconds(30),
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
        if not settings.db_deletion_protection:
            acknowledge(
                self.instance,
                "AwsSolutions-RDS10",
                "Deletion protection was switched off for this deployment with "
                "-c dbDeletionProtection=false (a disposable environment).",
            )
