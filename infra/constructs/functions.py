"""The Lambda functions (scanner, publisher, consumer, redrive, migrate, ops-read, ops-write),
built from one code asset and one dependency layer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aws_cdk import Aws, Duration, Fn, Names, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.constructs.database import Database, ExistingDatabase
from infra.constructs.network import Network
from infra.constructs.queues import Queues
from infra.layer import BYTECODE_STAMP, STAMP_NAME, build_layer, stage_code
from infra.nag import acknowledge
from infra.settings import (
    PUBLISHER_RETRY_ATTEMPTS,
    Settings,
    SettingsError,
    retention_days,
)

# The operations function, twice from the same code (functions/ops): one serves the read
# commands, one the write commands (REMINDERS_OPS_SERVES), each with its own reserved
# concurrency and its own lambda:InvokeFunction permission, so a reader looping on `status`
# never throttles a writer, and a reader's permission is not a writer's.
OPS_CONCURRENCY = {"read": 1, "write": 1}
RUNTIME = lambda_.Runtime.PYTHON_3_13
ARCHITECTURE = lambda_.Architecture.ARM_64
SERVICE_NAME = "reminders"
METRICS_NAMESPACE = "Reminders"

# What Lambda needs to attach a function to the VPC. These EC2 actions do not support
# resource-level permissions, so they are granted on "*" (as in the AWS managed policy).
ENI_ACTIONS = [
    "ec2:CreateNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
]


@dataclass(frozen=True)
class FunctionDefaults:
    """What every reminders function shares; ``create`` adds only what differs."""

    scope: Construct
    settings: Settings
    code: lambda_.Code
    layer: lambda_.ILayerVersion
    vpc: ec2.IVpc
    security_group: ec2.ISecurityGroup
    environment: dict[str, str] = field(default_factory=dict)

    def create(
        self,
        name: str,
        *,
        description: str,
        timeout_seconds: int,
        subnets: ec2.SubnetSelection,
        memory_mib: int = 256,
        environment: Mapping[str, str] | None = None,
        reserved_concurrency: int | None = None,
        async_retry_attempts: int | None = None,
        async_max_event_age: Duration | None = None,
        function_name: str | None = None,
        shared_environment: bool = True,
        handler_module: str | None = None,
    ) -> lambda_.Function:
        construct_id = construct_label(name)
        log_group = logs.LogGroup(
            self.scope,
            f"{construct_id}Logs",
            retention=retention_days(self.settings.log_retention_days),
            # Kept when the stack is deleted; removed when a first deploy rolls back.
            removal_policy=RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE,
        )
        role = iam.Role(
            self.scope,
            f"{construct_id}Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Execution role of the reminders {name} function",
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="WriteOwnLogs",
                actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[log_group.log_group_arn],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(sid="AttachToVpc", actions=ENI_ACTIONS, resources=["*"])
        )
        function = lambda_.Function(
            self.scope,
            construct_id,
            description=description,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            code=self.code,
            handler=f"functions.{handler_module or name}.handler.handler",
            layers=[self.layer],
            role=role,
            memory_size=memory_mib,
            timeout=Duration.seconds(timeout_seconds),
            environment={**(self.environment if shared_environment else {}),
                         **(environment or {})},
            vpc=self.vpc,
            vpc_subnets=subnets,
            security_groups=[self.security_group],
            tracing=lambda_.Tracing.ACTIVE,
            logging_format=lambda_.LoggingFormat.JSON,
            log_group=log_group,
            reserved_concurrent_executions=reserved_concurrency,
            retry_attempts=async_retry_attempts,
            max_event_age=async_max_event_age,
            function_name=function_name,
        )
        return function


class Functions(Construct):
    """scanner, consumer, redrive and migrate, each with only the grants it uses."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        network: Network,
        database: Database | ExistingDatabase,
        queues: Queues,
    ) -> None:
        super().__init__(scope, construct_id)
        self.layer = lambda_.LayerVersion(
            self,
            "Dependencies",
            code=lambda_.Code.from_asset(str(build_layer()), exclude=[STAMP_NAME, BYTECODE_STAMP]),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description="psycopg (binary), cryptography, tzdata, python-dateutil, Powertools "
            "for Python 3.13",
        )
        defaults = FunctionDefaults(
            scope=self,
            settings=settings,
            code=lambda_.Code.from_asset(str(stage_code())),
            layer=self.layer,
            vpc=network.vpc,
            security_group=network.function_security_group,
            environment=environment(settings, database, queues),
        )

        # Scanner, consumer and redrive log in as the application role; only migrate (which
        # creates that role and owns the schema) gets the master credentials.
        app_login = {"REMINDERS_DB_SECRET_ARN": database.app_secret.secret_arn}
        # Fan-out: chunks of the scanner's leases, sent to the deliveries queue. No database:
        # only the queue's URL and how many SendMessageBatch calls to keep in flight.
        self.publisher: lambda_.Function | None = None
        fan_out: dict[str, str] = {}
        if settings.publisher_fan_out:
            self.publisher = defaults.create(
                "publisher",
                description="Sends a chunk of the scanner's leased ids to the deliveries queue",
                timeout_seconds=settings.publisher_timeout_seconds,
                subnets=network.private_subnets,
                memory_mib=settings.publisher_memory_mib,
                environment=publisher_environment(settings, queues),
                shared_environment=False,
                reserved_concurrency=settings.publisher_reserved_concurrency,
                # A failed chunk is retried while its leases are of use (the age is derived
                # from leaseSeconds, and synth checks every retry fits in it); one never sent
                # leaves its leases to expire, and the scanner reclaims them
                # (AsyncEventsDropped alarms).
                async_retry_attempts=PUBLISHER_RETRY_ATTEMPTS,
                async_max_event_age=Duration.seconds(settings.publisher_max_event_age_seconds),
            )
            fan_out = {
                "REMINDERS_PUBLISHER_FUNCTION": self.publisher.function_name,
                "REMINDERS_PUBLISH_CHUNK": str(settings.publish_chunk),
            }
        self.scanner = defaults.create(
            "scanner",
            description="Leases due deliveries and publishes their ids to the deliveries queue",
            timeout_seconds=settings.scanner_timeout_seconds,
            subnets=network.private_subnets,
            memory_mib=settings.scanner_memory_mib,
            environment={**scanner_environment(settings), **app_login, **fan_out},
            reserved_concurrency=settings.scanner_reserved_concurrency,
            # A failed tick is not retried: the next tick a minute later picks up the work.
            async_retry_attempts=0,
            async_max_event_age=Duration.seconds(60),
        )
        self.consumer = defaults.create(
            "consumer",
            description="Re-checks each leased delivery and sends it through its channel",
            timeout_seconds=settings.consumer_timeout_seconds,
            subnets=network.consumer_subnets,
            memory_mib=settings.consumer_memory_mib,
            environment={**consumer_environment(settings), **app_login},
            # Provisioned mode cannot carry a maximum concurrency: the connection budget is
            # then kept by reserved concurrency.
            reserved_concurrency=settings.consumer_max_concurrency
            if settings.consumer_pollers else None,
        )
        self.redrive = defaults.create(
            "redrive",
            description="Settles dead-lettered deliveries through Postgres or parks them",
            timeout_seconds=settings.redrive_timeout_seconds,
            subnets=network.private_subnets,
            environment={**service_environment(settings), **app_login},
        )
        self.migrate = defaults.create(
            "migrate",
            description="Applies database migrations during deployment",
            timeout_seconds=settings.migrate_timeout_seconds,
            subnets=network.private_subnets,
        )
        # Operator commands from `reminders --stack` (functions/ops): the application role,
        # the read commands and the write commands each in a function of their own, one
        # instance of each at a time. A connection lives for one invocation; operator commands
        # are rare, and they share migrate's place in the connection budget (migrate runs only
        # during a deploy).
        described = {"read": "status, show, list, tenants list",
                     "write": "reconcile, cancel, tenants pause and resume"}
        self.ops = {
            kind: defaults.create(
                f"ops-{kind}",
                handler_module="ops",
                description=f"Runs the reminders operator {kind} commands ({described[kind]}) "
                "for IAM callers",
                timeout_seconds=settings.ops_timeout_seconds,
                subnets=network.private_subnets,
                environment={
                    **service_environment(settings),
                    **app_login,
                    "REMINDERS_STS_ENDPOINT": Fn.join(
                        "", ["https://sts.", Aws.REGION, ".", Aws.URL_SUFFIX]
                    ),
                    "REMINDERS_OPS_SERVES": kind,
                },
                reserved_concurrency=OPS_CONCURRENCY[kind],
                async_retry_attempts=0,
                function_name=f"{settings.stack_name}-ops-{kind}",
            )
            for kind in ("read", "write")
        }
        self.all = {
            "scanner": self.scanner,
            "consumer": self.consumer,
            "redrive": self.redrive,
            "migrate": self.migrate,
            "ops-read": self.ops["read"],
            "ops-write": self.ops["write"],
        }
        if self.publisher is not None:
            self.all["publisher"] = self.publisher

        check_visibility(queues.deliveries, self.consumer)

        # Only what the code calls: secretsmanager:GetSecretValue (reminders.aws.read_db_secret),
        # the scanner's SendMessageBatch and GetQueueAttributes (queue depth) on the deliveries
        # queue, redrive's SendMessage to parking. The event sources add their own reads.
        self.service_functions = {
            "scanner": self.scanner,
            "consumer": self.consumer,
            "redrive": self.redrive,
            "ops-read": self.ops["read"],
            "ops-write": self.ops["write"],
        }
        for function in self.service_functions.values():
            _grant_secret_value(function, database.app_secret)
        _grant_secret_value(self.migrate, database.secret)
        # migrate sets the application role's password from its secret.
        _grant_secret_value(self.migrate, database.app_secret, sid="ReadAppDatabaseSecret")
        # With fan-out the scanner only reads the queue's depth and invokes the publisher,
        # which alone sends.
        self.scanner.add_to_role_policy(
            iam.PolicyStatement(
                sid="PublishDeliveries",
                actions=["sqs:GetQueueAttributes"]
                if self.publisher is not None
                else ["sqs:SendMessage", "sqs:GetQueueAttributes"],
                resources=[queues.deliveries.queue_arn],
            )
        )
        if self.publisher is not None:
            self.scanner.add_to_role_policy(
                iam.PolicyStatement(
                    sid="InvokePublisher",
                    actions=["lambda:InvokeFunction"],
                    resources=[self.publisher.function_arn],
                )
            )
            self.publisher.add_to_role_policy(
                iam.PolicyStatement(
                    sid="SendDeliveries",
                    actions=["sqs:SendMessage"],
                    resources=[queues.deliveries.queue_arn],
                )
            )
        # `status` (a read) shows the queues' counts beside Postgres'
        # (reminders.queue.Queue.counts); the write commands read no queue.
        self.ops["read"].add_to_role_policy(
            iam.PolicyStatement(
                sid="ReadQueueDepths",
                actions=["sqs:GetQueueAttributes"],
                resources=[
                    queues.deliveries.queue_arn,
                    queues.dead_letter.queue_arn,
                    queues.parking.queue_arn,
                ],
            )
        )
        self.redrive.add_to_role_policy(
            iam.PolicyStatement(
                sid="ParkMessages",
                actions=["sqs:SendMessage"],
                resources=[queues.parking.queue_arn],
            )
        )

        # Event source mappings without CDK's consume grant, which adds sqs:GetQueueUrl: the
        # poller needs only what _grant_consume lists.
        _grant_consume(self.consumer, queues.deliveries)
        self.consumer.add_event_source_mapping(
            _mapping_id(queues.deliveries),
            event_source_arn=queues.deliveries.queue_arn,
            batch_size=settings.consumer_batch_size,
            max_batching_window=_window(settings.consumer_batching_window_seconds),
            report_batch_item_failures=True,
            **_consumer_scaling(settings),
        )
        _grant_consume(self.redrive, queues.dead_letter)
        self.redrive.add_event_source_mapping(
            _mapping_id(queues.dead_letter),
            event_source_arn=queues.dead_letter.queue_arn,
            batch_size=settings.redrive_batch_size,
            max_batching_window=_window(settings.redrive_batching_window_seconds),
            report_batch_item_failures=True,
            max_concurrency=settings.redrive_max_concurrency,
        )

        self.consumer.add_to_role_policy(
            iam.PolicyStatement(
                sid="SendEmailFromIdentity",
                # SES v2 SendEmail (reminders.channels.email) is authorized as ses:SendEmail.
                actions=["ses:SendEmail"],
                resources=[
                    Stack.of(self).format_arn(
                        service="ses",
                        resource="identity",
                        resource_name=settings.ses_identity,
                    )
                ],
            )
        )
        self.consumer.add_to_role_policy(
            iam.PolicyStatement(
                sid="ReadSendingQuota",
                # The e-mail rate's default: the account's MaxSendRate, read at cold start
                # (reminders.pacing.account_default). GetSendQuota names no resource.
                actions=["ses:GetSendQuota"],
                resources=["*"],
            )
        )
        self.consumer.add_to_role_policy(
            iam.PolicyStatement(sid="PublishSms", actions=["sns:Publish"], resources=["*"])
        )

        for name, function in self.all.items():
            _acknowledge_role_wildcards(name, function)


def construct_label(name: str) -> str:
    """A function's construct id and alarm label: ``ops-read`` -> ``OpsRead``."""
    return "".join(part.capitalize() for part in name.split("-"))


def _consumer_scaling(settings: Settings) -> dict[str, Any]:
    """Standard mode with maximum concurrency, or provisioned mode (``sqsPollers``)."""
    pollers = settings.consumer_pollers
    if pollers is None:
        return {"max_concurrency": settings.consumer_max_concurrency}
    return {"provisioned_poller_config": lambda_.ProvisionedPollerConfig(
        minimum_pollers=pollers[0], maximum_pollers=pollers[1])}


def _mapping_id(queue: sqs.IQueue) -> str:
    """The id CDK's SqsEventSource gives its mapping, so deployed mappings keep their logical
    ids (a new id would replace the mapping, running two at once for a moment)."""
    return f"SqsEventSource:{Names.node_unique_id(queue.node)}"


def _grant_consume(function: lambda_.Function, queue: sqs.IQueue) -> None:
    """What Lambda's SQS poller calls with the function's role (the actions of the AWS
    managed AWSLambdaSQSQueueExecutionRole, plus ChangeMessageVisibility for the messages a
    partial batch response returns)."""
    function.add_to_role_policy(
        iam.PolicyStatement(
            sid="ConsumeEventSource",
            actions=[
                "sqs:ReceiveMessage",
                "sqs:DeleteMessage",
                "sqs:GetQueueAttributes",
                "sqs:ChangeMessageVisibility",
            ],
            resources=[queue.queue_arn],
        )
    )


def _grant_secret_value(
    function: lambda_.Function, secret: secretsmanager.ISecret, *, sid: str = "ReadDatabaseSecret"
) -> None:
    function.add_to_role_policy(
        iam.PolicyStatement(
            sid=sid, actions=["secretsmanager:GetSecretValue"], resources=[secret.secret_arn]
        )
    )


def environment(
    settings: Settings, database: Database | ExistingDatabase, queues: Queues
) -> dict[str, str]:
    """The settings every function reads at cold start; each adds its own below."""
    return {
        "REMINDERS_DB_HOST": database.endpoint,
        "REMINDERS_DB_PORT": str(database.port),
        "REMINDERS_DB_NAME": database.name,
        # The schema the service's tables live in: the migrations create it, every session
        # sets its search_path to it.
        "REMINDERS_DB_SCHEMA": settings.db_schema,
        # The master credentials; scanner, consumer and redrive replace it with the app role's.
        "REMINDERS_DB_SECRET_ARN": database.secret.secret_arn,
        "REMINDERS_DB_SSLMODE": settings.existing_db_sslmode
        if settings.existing_database
        else "verify-full",
        # RDS Proxy pins sessions that use prepared statements; psycopg must not prepare.
        "REMINDERS_DB_PREPARE": "off",
        "REMINDERS_QUEUE_URL": queues.deliveries.queue_url,
        "REMINDERS_DLQ_URL": queues.dead_letter.queue_url,
        "REMINDERS_PARKING_QUEUE_URL": queues.parking.queue_url,
        "REMINDERS_SCAN_BATCH": str(settings.scan_batch),
        "REMINDERS_INFLIGHT_BUDGET": str(settings.effective_inflight_budget),
        "REMINDERS_LEASE_SECONDS": str(settings.lease_seconds),
        "REMINDERS_REDRIVE_BUDGET": str(settings.redrive_budget),
        "REMINDERS_EMAIL_SENDER": settings.email_sender,
        "REMINDERS_WEBHOOK_ALLOW": settings.webhook_allow,
        "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
        "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
        "LOG_LEVEL": settings.log_level,
    }


def service_environment(settings: Settings) -> dict[str, str]:
    """Scanner, consumer and redrive: their sessions' lock and statement timeouts. (Migrate
    keeps the server's defaults: a migration may wait for a lock or run long.)"""
    return {
        "REMINDERS_DB_LOCK_TIMEOUT_MS": str(settings.db_lock_timeout_ms),
        "REMINDERS_DB_STATEMENT_TIMEOUT_MS": str(settings.db_statement_timeout_ms),
    }


def scanner_environment(settings: Settings) -> dict[str, str]:
    """How long a tick drains and how many SendMessageBatch calls it keeps in flight."""
    return {
        **service_environment(settings),
        "REMINDERS_SCAN_SECONDS": str(settings.effective_scan_seconds),
        "REMINDERS_PUBLISH_CONCURRENCY": str(settings.publish_concurrency),
    }


def publisher_environment(settings: Settings, queues: Queues) -> dict[str, str]:
    """The publisher reads no database: the queue, its send concurrency, logging."""
    return {
        "REMINDERS_QUEUE_URL": queues.deliveries.queue_url,
        "REMINDERS_PUBLISH_CONCURRENCY": str(settings.publish_concurrency),
        "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
        "LOG_LEVEL": settings.log_level,
    }


def consumer_environment(settings: Settings) -> dict[str, str]:
    """One deadline per send, a whole batch sent at once, and the time kept back."""
    return {
        **service_environment(settings),
        "REMINDERS_SEND_TIMEOUT": str(settings.send_timeout_seconds),
        "REMINDERS_SEND_CONCURRENCY": str(settings.consumer_send_concurrency),
        "REMINDERS_INVOCATION_MARGIN": str(settings.invocation_margin_seconds),
        "REMINDERS_EMAIL_RATE_FROM_ACCOUNT": "on" if settings.email_rate_from_account else "off",
    }


def check_visibility(queue: sqs.Queue, consumer: lambda_.Function) -> None:
    """The deliveries queue hides a received message for six consumer timeouts, so a batch
    still running is never handed to a second consumer. Fails synth if the two drifted."""
    cfn = queue.node.default_child
    assert isinstance(cfn, sqs.CfnQueue)
    assert consumer.timeout is not None
    visibility = cfn.visibility_timeout
    timeout = int(consumer.timeout.to_seconds())
    if visibility != 6 * timeout:
        raise SettingsError(
            f"the deliveries queue's visibility timeout ({visibility} s) must be 6 x the "
            f"consumer timeout (consumerTimeoutSeconds {timeout} s = {6 * timeout} s)"
        )


def _window(seconds: int) -> Duration | None:
    return Duration.seconds(seconds) if seconds > 0 else None


def _acknowledge_role_wildcards(name: str, function: lambda_.Function) -> None:
    role = function.role
    assert role is not None
    reasons = [
        "EC2 network-interface actions (attaching the function to the VPC) and X-Ray "
        "PutTraceSegments/PutTelemetryRecords (active tracing) do not support resource-level "
        "permissions, so AWS requires Resource '*' for them"
    ]
    if name == "consumer":
        reasons.append(
            "sns:Publish to a phone number (SMS) has no resource ARN to name, so the SMS "
            "channel needs Resource '*'; the action is still limited to sns:Publish; "
            "ses:GetSendQuota (the e-mail rate's default) names no resource either"
        )
    acknowledge(role, "AwsSolutions-IAM5", "; ".join(reasons) + ".", "Resource::*")
    acknowledge(
        function,
        "AwsSolutions-L1",
        "Pinned to python3.13 on purpose: the dependency layer's compiled wheels "
        "(psycopg_binary, cp313 aarch64) are built for exactly this runtime. Moving to a newer "
        "runtime changes RUNTIME and the layer's PYTHON_VERSION together, with a rebuild.",
    )
