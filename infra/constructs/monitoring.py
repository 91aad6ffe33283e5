"""Alarms to an SNS topic, and one dashboard with the same signals."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct, IDependable

from infra.constructs.functions import METRICS_NAMESPACE, SERVICE_NAME, construct_label
from infra.constructs.queues import Queues
from infra.settings import Settings

ONE_MINUTE = Duration.minutes(1)
FIVE_MINUTES = Duration.minutes(5)
# The channels the consumer sends through; it counts SES/SNS/webhook configuration errors
# (a wrong sender identity, the SES sandbox, a refused authorization) per channel.
CHANNELS = ("email", "sms", "webhook")
SEND_CONFIG_ERRORS = "SendConfigErrors"


@dataclass(frozen=True)
class AlarmSpec:
    """One alarm: its metric, when it fires, and what the operator does first."""

    name: str
    metric: cw.Metric
    threshold: float
    comparison: cw.ComparisonOperator
    evaluation_periods: int
    description: str
    missing: cw.TreatMissingData = cw.TreatMissingData.NOT_BREACHING
    datapoints_to_alarm: int | None = None
    enabled: bool = True
    # Created only once the scanner's schedule exists (see ``_scanner_alarms``).
    after_schedule: bool = False


class Monitoring(Construct):
    """Every alarm notifies one topic; subscribers come from ``alarmEmails``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        queues: Queues,
        schedule_dead_letter: sqs.IQueue,
        functions: dict[str, lambda_.IFunction],
        schedule: IDependable,
        rotation_functions: Mapping[str, str],
    ) -> None:
        super().__init__(scope, construct_id)
        key = kms.Key(
            self,
            "TopicKey",
            description="Encrypts the reminders alarm topic",
            enable_key_rotation=True,
        )
        # CloudWatch alarms publish to an encrypted topic only with a key they may use, and only
        # this account's alarms may use it (a confused-deputy guard).
        stack = Stack.of(self)
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowThisAccountsAlarmsToPublish",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],
                # The confused-deputy guard the issue asks for; not tried against a real
                # account here (an alarm that cannot publish shows "Failed to execute action"
                # in its history).
                conditions={"StringEquals": {"aws:SourceAccount": stack.account}},
            )
        )
        self.topic = sns.Topic(
            self, "AlarmTopic", display_name="Reminders alarms", master_key=key, enforce_ssl=True
        )
        for address in settings.alarm_emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(address))

        scanner = functions["scanner"]
        specs = [
            *_queue_alarms(settings, queues, schedule_dead_letter, functions["redrive"]),
            *_scanner_alarms(settings),
            *_outcome_alarms(settings),
            *_send_config_alarms(),
            *_rotation_alarms(rotation_functions),
        ]
        for name, function in functions.items():
            specs += _function_alarms(construct_label(name), function)
        if "publisher" in functions:
            specs += _publisher_alarms(functions["publisher"])

        self.alarms: dict[str, cw.IAlarm] = {}
        action = cw_actions.SnsAction(self.topic)
        for spec in specs:
            alarm = cw.Alarm(
                self,
                spec.name,
                metric=spec.metric,
                threshold=spec.threshold,
                comparison_operator=spec.comparison,
                evaluation_periods=spec.evaluation_periods,
                datapoints_to_alarm=spec.datapoints_to_alarm,
                treat_missing_data=spec.missing,
                alarm_description=spec.description,
                actions_enabled=spec.enabled,
            )
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)
            if spec.after_schedule:
                alarm.node.add_dependency(schedule)
            self.alarms[spec.name] = alarm
        self.scanner_silence_inputs = _scanner_silence_inputs(self, scanner, schedule)
        self.scanner_silent = cw.CompositeAlarm(
            self,
            "ScannerSilent",
            alarm_rule=cw.AlarmRule.all_of(
                cw.AlarmRule.from_alarm(
                    self.scanner_silence_inputs["silent"], cw.AlarmState.ALARM
                ),
                cw.AlarmRule.from_alarm(
                    self.scanner_silence_inputs["never_ran"], cw.AlarmState.OK
                ),
            ),
            actions_enabled=settings.scanner_enabled,
            alarm_description=SCANNER_SILENT_DESCRIPTION,
        )
        self.scanner_silent.add_alarm_action(action)
        self.scanner_silent.add_ok_action(action)
        self.scanner_silent.node.add_dependency(schedule)
        self.alarms["ScannerSilent"] = self.scanner_silent

        self.dashboard = _dashboard(
            self,
            queues,
            schedule_dead_letter,
            specs,
            self.alarms,
            scanner.metric_invocations(statistic=cw.Stats.SUM, period=ONE_MINUTE),
        )


def _scanner_alarms(settings: Settings) -> list[AlarmSpec]:
    """Late deliveries (``ScannerSilent`` is a composite of ``_scanner_silence_inputs``).

    Created only after the schedule rule, which itself waits for the database, the proxy and
    the migrations (the twenty minutes of a first deploy in which nothing can run). Missing
    data counts as fine: the scanner publishes the figure on every tick, so its absence means
    the scanner is not running, which is ``ScannerSilent``'s to report, and a missing figure
    before the first tick is no lateness. ``OldestOverdueSeconds`` leaves deliberately paused
    tenants out; their lateness is ``PausedOldestOverdueSeconds``, graphed on the dashboard
    and never alarmed on.
    """
    return [
        AlarmSpec(
            name="OldestOverdueDelivery",
            metric=_scanner_metric("OldestOverdueSeconds"),
            threshold=settings.overdue_alarm_seconds,
            comparison=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=3,
            missing=cw.TreatMissingData.NOT_BREACHING,
            enabled=settings.scanner_enabled,
            after_schedule=True,
            description=(
                "A due delivery of a tenant that is not paused has waited longer than "
                f"{settings.overdue_alarm_seconds}s past its time. First: check the scanner's "
                "errors and logs, then the deliveries queue age and consumer errors; in "
                "Postgres, list the oldest due rows and their state. (A scanner that stopped "
                "reporting is ScannerSilent's alarm; paused tenants are graphed, not alarmed.)"
            ),
        ),
    ]


SCANNER_SILENT_DESCRIPTION = (
    "The scanner was not invoked for 5 minutes after having run, so nothing new is being "
    "delivered. First: check the schedule rule is enabled, the scanner's throttles and the "
    "schedule's invocation dead-letter queue."
)


def _scanner_silence_inputs(
    scope: Construct, scanner: lambda_.IFunction, schedule: IDependable
) -> dict[str, cw.Alarm]:
    """The two inputs of the ``ScannerSilent`` composite alarm, which pages on neither.

    Lambda publishes no zero invocation count, so silence is missing data and the ``silent``
    input must count missing data as breaching; on its own it would go red from the moment it
    is created until the first tick's figure arrives. ``never_ran`` latches the first tick:
    it treats missing data as "keep the current state", so it stays INSUFFICIENT_DATA until
    the scanner's first invocation, then OK for good. The composite fires only when the
    scanner is silent *and* has run before: missing data counts as fine until the first
    datapoint, then as breaching. Both are created after the schedule rule.
    """
    invocations = scanner.metric_invocations(statistic=cw.Stats.SUM, period=ONE_MINUTE)
    silent = cw.Alarm(
        scope,
        "ScannerSilentInput",
        metric=invocations,
        threshold=1,
        comparison_operator=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
        evaluation_periods=5,
        datapoints_to_alarm=5,
        treat_missing_data=cw.TreatMissingData.BREACHING,
        actions_enabled=False,
        alarm_description=(
            "Input of the ScannerSilent composite alarm (no actions): no scanner invocation "
            "in 5 one-minute periods, missing data counting as breaching."
        ),
    )
    never_ran = cw.Alarm(
        scope,
        "ScannerNeverRanInput",
        metric=invocations,
        threshold=1,
        comparison_operator=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
        evaluation_periods=1,
        treat_missing_data=cw.TreatMissingData.IGNORE,
        actions_enabled=False,
        alarm_description=(
            "Input of the ScannerSilent composite alarm (no actions): INSUFFICIENT_DATA until "
            "the scanner's first invocation, OK from then on (missing data keeps the state)."
        ),
    )
    for alarm in (silent, never_ran):
        alarm.node.add_dependency(schedule)
    return {"silent": silent, "never_ran": never_ran}


def _scanner_metric(name: str) -> cw.Metric:
    return cw.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={"service": SERVICE_NAME},
        statistic=cw.Stats.MAXIMUM,
        period=ONE_MINUTE,
    )


def _send_config_metric(channel: str, period: Duration = FIVE_MINUTES) -> cw.Metric:
    """Configuration errors the consumer met sending on ``channel`` (it retries them)."""
    return cw.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=SEND_CONFIG_ERRORS,
        dimensions_map={"service": SERVICE_NAME, "channel": channel},
        statistic=cw.Stats.SUM,
        period=period,
    )


_SEND_CONFIG_FIRST_STEPS = {
    "email": (
        "SES refused the sender: the identity is not verified, does not match emailSender "
        "or emailIdentity, the account is still in the SES sandbox, or the function may not "
        "send from it. First: compare the consumer's error log with the SES console (verified "
        "identities, sending status) and the emailSender/emailIdentity context values"
    ),
    "sms": (
        "SNS refused SMS: the spend limit, the sandbox or the origination identity. First: "
        "check the SNS text messaging preferences and the consumer's error log"
    ),
    "webhook": (
        "Webhook sends failed for configuration reasons (no endpoint registered, an address "
        "the egress guard refuses, no route out). First: read the consumer's error log for "
        "the endpoint, then the endpoints table and the webhookAllow/webhookEgress settings"
    ),
}


def _send_config_alarms() -> list[AlarmSpec]:
    """Sends the consumer keeps retrying because the channel is misconfigured: nothing goes
    out on that channel until someone fixes it. Counted only when non-zero, so missing data is
    quiet."""
    return [
        AlarmSpec(
            name=f"SendConfigErrors{channel.capitalize()}",
            metric=_send_config_metric(channel),
            threshold=1,
            comparison=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=1,
            description=(
                f"The consumer met configuration errors sending {channel} and is retrying "
                f"those deliveries (they stay due, nothing is lost until their staleness "
                f"window). {_SEND_CONFIG_FIRST_STEPS[channel]}."
            ),
        )
        for channel in CHANNELS
    ]


def _rotation_alarms(rotation_functions: Mapping[str, str]) -> list[AlarmSpec]:
    """A rotation function that raised: the secret's rotation failed (Secrets Manager keeps the
    old AWSCURRENT, and retries on the next schedule)."""
    return [
        AlarmSpec(
            name=f"{label}SecretRotationFailed",
            metric=cw.Metric(
                namespace="AWS/Lambda",
                metric_name="Errors",
                dimensions_map={"FunctionName": function_name},
                statistic=cw.Stats.SUM,
                period=FIVE_MINUTES,
            ),
            threshold=1,
            comparison=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=1,
            description=(
                f"Rotating the {label.lower()} database secret failed. First: read the log "
                f"group /aws/lambda/{function_name} for the step that failed (createSecret, "
                "setSecret, testSecret, finishSecret); then in Secrets Manager check the "
                "secret's versions (an AWSPENDING left behind blocks the next rotation: "
                "remove that label) and run 'Rotate secret immediately' once fixed."
            ),
        )
        for label, function_name in rotation_functions.items()
    ]


def _queue_alarms(
    settings: Settings,
    queues: Queues,
    schedule_dead_letter: sqs.IQueue,
    redrive: lambda_.IFunction,
) -> list[AlarmSpec]:
    def age(queue: sqs.IQueue) -> cw.Metric:
        return queue.metric_approximate_age_of_oldest_message(
            statistic=cw.Stats.MAXIMUM, period=ONE_MINUTE
        )

    def visible(queue: sqs.IQueue) -> cw.Metric:
        return queue.metric_approximate_number_of_messages_visible(
            statistic=cw.Stats.MAXIMUM, period=ONE_MINUTE
        )

    at_least = cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
    return [
        AlarmSpec(
            name="DeliveriesQueueAge",
            metric=age(queues.deliveries),
            threshold=settings.queue_age_alarm_seconds,
            comparison=at_least,
            evaluation_periods=5,
            datapoints_to_alarm=3,
            description=(
                f"A message has waited over {settings.queue_age_alarm_seconds}s on the "
                "deliveries queue: the consumer is failing, throttled or capped by its maximum "
                "concurrency. First: check consumer Errors/Throttles and logs, then RDS Proxy "
                "connections and channel (webhook/SES/SNS) errors."
            ),
        ),
        AlarmSpec(
            name="DeadLetterQueueAge",
            metric=age(queues.dead_letter),
            threshold=settings.dlq_age_alarm_seconds,
            comparison=at_least,
            evaluation_periods=5,
            datapoints_to_alarm=3,
            description=(
                f"A dead-lettered message has waited over {settings.dlq_age_alarm_seconds}s: "
                "the redrive function is not draining the DLQ. First: check redrive "
                "Errors/Throttles and logs; do not purge the queue (see the DLQ runbook)."
            ),
        ),
        AlarmSpec(
            name="ParkingQueueAge",
            metric=age(queues.parking),
            threshold=settings.parking_age_alarm_seconds,
            comparison=at_least,
            evaluation_periods=1,
            description=(
                "A parked message is getting old; the parking queue keeps messages 14 days "
                "(counted from the first enqueue for ones that moved there by receive count). "
                "First: read it and the redrive logs for its reason, fix the cause, then "
                "redrive it from the SQS console to a custom destination, the DLQ's ARN (not "
                "'to source': what redrive parked itself has none; see the DLQ runbook)."
            ),
        ),
        AlarmSpec(
            # The redrive function drains the DLQ within seconds, so visible messages almost
            # never show; SQS does not count redrive-policy moves in NumberOfMessagesSent
            # either. Every arrival invokes the redrive function, so its invocations are the
            # arrivals.
            name="DeadLetterArrivals",
            metric=redrive.metric_invocations(statistic=cw.Stats.SUM, period=FIVE_MINUTES),
            threshold=1,
            comparison=at_least,
            evaluation_periods=1,
            description=(
                "Deliveries failed maxReceiveCount times and reached the dead-letter queue "
                "(the redrive function was invoked for them). The redrive function handles "
                "them on its own. First: read the consumer logs for those delivery ids to "
                "learn why they failed, and the redrive logs for what it decided."
            ),
        ),
        AlarmSpec(
            name="ParkingQueueNotEmpty",
            metric=visible(queues.parking),
            threshold=1,
            comparison=at_least,
            evaluation_periods=1,
            description=(
                "The redrive function could not settle a delivery and parked it for an "
                "operator. First: read the message and the redrive logs for its reason, then "
                "follow the DLQ runbook (console redrive is safe: every send re-checks the row)."
            ),
        ),
        AlarmSpec(
            name="ScheduleDeadLetterNotEmpty",
            metric=visible(schedule_dead_letter),
            threshold=1,
            comparison=at_least,
            evaluation_periods=1,
            description=(
                "EventBridge could not invoke the scanner (throttled or denied) and dropped a "
                "tick into its dead-letter queue. First: check scanner Throttles and its "
                "reserved concurrency; the messages can be purged, the next tick redoes the work."
            ),
        ),
    ]


def _outcome_metric(name: str, period: Duration = FIVE_MINUTES) -> cw.Metric:
    """A delivery count the consumer (and the scanner, for what it parks) publishes per batch."""
    return cw.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={"service": SERVICE_NAME},
        statistic=cw.Stats.SUM,
        period=period,
    )


def _outcome_alarms(settings: Settings) -> list[AlarmSpec]:
    """Deliveries settled in a state nothing will send again without an operator.

    The counts are only published when non-zero, so missing data is quiet, not breaching.
    """
    at_least = cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
    return [
        AlarmSpec(
            name="DeliveriesUnknown",
            metric=_outcome_metric("Unknown"),
            threshold=settings.unknown_alarm_threshold,
            comparison=at_least,
            evaluation_periods=1,
            description=(
                f"{settings.unknown_alarm_threshold} or more deliveries became unknown in 5 "
                "minutes: a send may have happened without a recorded outcome (a crash or "
                "timeout mid-send on a channel that cannot deduplicate), so nothing resends "
                "them. First: for each delivery key check the receiver or provider (webhook "
                "logs, SES/SNS) for what arrived; list them with `reminders list --state "
                "unknown`, then settle each with `reminders reconcile KEY --as "
                "sent|failed|retry --reason ...`."
            ),
        ),
        AlarmSpec(
            name="DeliveriesDead",
            metric=_outcome_metric("Dead"),
            threshold=settings.dead_alarm_threshold,
            comparison=at_least,
            evaluation_periods=1,
            description=(
                f"{settings.dead_alarm_threshold} or more deliveries became dead in 5 minutes: "
                "their retry budget was spent, or their redrive budget was (a poison message "
                "the consumer kept failing on went through the dead-letter queue too often); "
                "they will not be sent. A deployment that breaks sending shows up here. "
                "First: `reminders list --state dead`, read the reasons, fix the cause, then "
                "`reminders reconcile KEY --as retry --reason ...` to send each again with "
                "the same key."
            ),
        ),
        AlarmSpec(
            name="DeliveriesFailed",
            metric=_outcome_metric("Failed"),
            threshold=settings.failed_alarm_threshold,
            comparison=at_least,
            evaluation_periods=1,
            description=(
                f"{settings.failed_alarm_threshold} or more deliveries failed permanently in 5 "
                "minutes: the channel refused them (webhook 4xx, no endpoint registered, a "
                "rejected address or payload). A burst after a deployment usually means a bad "
                "payload or configuration. First: `reminders list --state failed`, read the "
                "reasons, fix the cause, then `reminders reconcile KEY --as retry --reason "
                "...` for the ones that should go out."
            ),
        ),
    ]


def _function_alarms(label: str, function: lambda_.IFunction) -> list[AlarmSpec]:
    at_least = cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
    return [
        AlarmSpec(
            name=f"{label}Errors",
            metric=function.metric_errors(statistic=cw.Stats.SUM, period=FIVE_MINUTES),
            threshold=1,
            comparison=at_least,
            evaluation_periods=1,
            description=(
                f"The {label.lower()} function raised or timed out. First: open its log group, "
                "filter on level ERROR, and read the structured error; check database and "
                "proxy health if errors mention connections."
            ),
        ),
        AlarmSpec(
            name=f"{label}Throttles",
            metric=function.metric_throttles(statistic=cw.Stats.SUM, period=FIVE_MINUTES),
            threshold=1,
            comparison=at_least,
            evaluation_periods=1,
            description=(
                f"The {label.lower()} function was throttled. First: check the account's "
                "concurrent executions and this function's reserved or maximum concurrency "
                "(derived from dbConnectionBudget)."
            ),
        ),
    ]


def _publisher_alarms(publisher: lambda_.IFunction) -> list[AlarmSpec]:
    """A chunk Lambda gave up on (retries spent, or older than the maximum event age): its
    leases expire and the scanner reclaims them, late. A chunk Lambda never took (the
    scanner's Invoke refused): its leases are handed back at once, due again."""
    return [
        AlarmSpec(
            name="PublisherEventsDropped",
            metric=publisher.metric(
                "AsyncEventsDropped", statistic=cw.Stats.SUM, period=FIVE_MINUTES
            ),
            threshold=1,
            comparison=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=1,
            description=(
                "Lambda dropped a chunk of leased ids the publisher could not send (its retries "
                "spent or its event too old). Those deliveries go out after their leases expire "
                "(leaseSeconds) and the scanner reclaims them. First: read the PublisherErrors "
                "alarm and the publisher's log group (level ERROR) for why SendMessageBatch "
                "failed; check the SQS endpoint and the deliveries queue."
            ),
        ),
        AlarmSpec(
            # The scanner counts, per tick, the leased deliveries whose chunk's Invoke was
            # refused (reminders.scanner, PublisherNotInvoked; only when non-zero). Lambda
            # counts no metric for an Invoke it refuses for want of a grant.
            name="PublisherNotInvoked",
            metric=_outcome_metric("PublisherNotInvoked"),
            threshold=1,
            comparison=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=1,
            description=(
                "Lambda refused the scanner's asynchronous Invoke of the publisher (access "
                "denied, throttled, or unreachable), so the scanner handed those leases back: "
                "nothing is lost, but nothing due goes out while it lasts. First: read the "
                "scanner's log group for 'publish rejected' and its first_reason; for "
                "AccessDeniedException check the scanner role's lambda:InvokeFunction grant "
                "on the publisher's ARN, for throttling the publisher's reserved concurrency "
                "(publisherReservedConcurrency) and the account's concurrency."
            ),
        ),
    ]


# The consumer's per-batch counts (reminders.consumer.OUTCOME_METRICS), by metric name.
DELIVERY_OUTCOMES = ("Sent", "Retrying", "Failed", "Suppressed", "Stale", "Unknown", "Dead",
                     "Fenced", "MessagesIgnored", "MessagesFailed", "Paced")


def _dashboard(
    scope: Construct,
    queues: Queues,
    schedule_dead_letter: sqs.IQueue,
    specs: list[AlarmSpec],
    alarms: Mapping[str, cw.IAlarm],
    scanner_invocations: cw.IMetric,
) -> cw.Dashboard:
    dashboard = cw.Dashboard(scope, "Dashboard")
    named_queues = {
        "deliveries": queues.deliveries,
        "dead-letter": queues.dead_letter,
        "parking": queues.parking,
        "schedule DLQ": schedule_dead_letter,
    }
    dashboard.add_widgets(
        cw.AlarmStatusWidget(title="Alarms", alarms=list(alarms.values()), width=24, height=4)
    )
    dashboard.add_widgets(
        cw.GraphWidget(
            title="Oldest message age (s)",
            left=[
                q.metric_approximate_age_of_oldest_message(
                    statistic=cw.Stats.MAXIMUM, period=ONE_MINUTE, label=label
                )
                for label, q in named_queues.items()
            ],
            width=12,
        ),
        cw.GraphWidget(
            title="Messages visible",
            left=[
                q.metric_approximate_number_of_messages_visible(
                    statistic=cw.Stats.MAXIMUM, period=ONE_MINUTE, label=label
                )
                for label, q in named_queues.items()
            ],
            width=12,
        ),
    )
    by_name = {spec.name: spec for spec in specs}
    dashboard.add_widgets(
        cw.GraphWidget(
            title="Oldest overdue delivery (s)",
            left=[by_name["OldestOverdueDelivery"].metric.with_(label="tenants not paused")],
            # Paused tenants' lateness: expected while they are paused, so graphed only.
            right=[_scanner_metric("PausedOldestOverdueSeconds").with_(label="paused tenants"),
                   _scanner_metric("PausedSchedulesOldestOverdueSeconds").with_(
                       label="paused schedules")],
            width=8,
        ),
        cw.GraphWidget(
            title="Scanner invocations per minute",
            left=[scanner_invocations],
            width=8,
        ),
        cw.GraphWidget(
            title="Function errors and throttles",
            left=[
                spec.metric.with_(label=name)
                for name, spec in by_name.items()
                if name.endswith("Errors")
            ],
            right=[
                spec.metric.with_(label=name)
                for name, spec in by_name.items()
                if name.endswith("Throttles")
            ],
            width=8,
        ),
    )
    dashboard.add_widgets(
        cw.GraphWidget(
            title="Delivery outcomes per minute (consumer)",
            left=[_outcome_metric(name, ONE_MINUTE) for name in DELIVERY_OUTCOMES],
            width=16,
        ),
        cw.GraphWidget(
            title="Unknown and dead deliveries per 5 minutes",
            left=[
                by_name[name].metric.with_(label=label)
                for name, label in (("DeliveriesUnknown", "Unknown"), ("DeliveriesDead", "Dead"))
            ],
            width=8,
        ),
    )
    dashboard.add_widgets(
        cw.GraphWidget(
            title="Send configuration errors by channel (consumer, retried)",
            left=[
                _send_config_metric(channel, ONE_MINUTE).with_(label=channel)
                for channel in CHANNELS
            ],
            width=8,
        ),
        cw.GraphWidget(
            title="Dead-letter arrivals (redrive invocations)",
            left=[by_name["DeadLetterArrivals"].metric],
            width=8,
        ),
        cw.GraphWidget(
            title="Secret rotation errors",
            left=[
                spec.metric.with_(label=name)
                for name, spec in by_name.items()
                if name.endswith("SecretRotationFailed")
            ],
            width=8,
        ),
    )
    return dashboard
