"""The one-minute tick that drives the scanner."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct, IDependable

from infra.constructs.queues import MAX_RETENTION
from infra.nag import acknowledge
from infra.settings import Settings


class Schedule(Construct):
    """EventBridge rate(1 minute) → scanner, with its own retries and dead-letter queue.

    Created after the migrations so the first tick sees the current schema. With
    ``scannerEnabled=false`` the rule exists but is disabled.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        scanner: lambda_.IFunction,
        after: IDependable,
    ) -> None:
        super().__init__(scope, construct_id)
        self.dead_letter = sqs.Queue(
            self,
            "InvocationDeadLetter",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=MAX_RETENTION,
        )
        self.rule = events.Rule(
            self,
            "Tick",
            description="Every minute: lease due deliveries and publish them",
            schedule=events.Schedule.rate(Duration.minutes(1)),
            enabled=settings.scanner_enabled,
            targets=[
                targets.LambdaFunction(
                    scanner,
                    retry_attempts=settings.schedule_retry_attempts,
                    max_event_age=Duration.seconds(settings.schedule_max_event_age_seconds),
                    dead_letter_queue=self.dead_letter,
                )
            ],
        )
        self.rule.node.add_dependency(after)
        acknowledge(
            self.dead_letter,
            "AwsSolutions-SQS3",
            "This queue is itself a dead-letter queue: EventBridge puts scanner invocations "
            "it could not deliver here (an alarm fires on the first one). Ticks carry no data "
            "and the next tick redoes the work, so nothing downstream consumes it.",
        )
