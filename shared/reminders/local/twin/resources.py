"""What the synthesized template declares that the twin runs: its queues (created in moto with
exactly the template's attributes), its event source mappings (as poller specs), its schedule
rule, its asynchronous invoke configurations and the migrations custom resource.

Everything is read once into a :class:`TwinPlan` of frozen values; a property that is missing
or that the service would refuse raises :class:`~reminders.local.twin.template.PlanError`
naming the resource's logical id and the property, so a wrong value in the template fails
here, not after ``cdk deploy``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from reminders.local.synth import LOCAL_RESOURCES
from reminders.local.twin.template import (
    PlanError,
    boolean,
    integer,
    of_type,
    optional_integer,
    properties,
    referenced,
    required,
    shown,
    text,
)

QUEUE = "AWS::SQS::Queue"
FUNCTION = "AWS::Lambda::Function"
DAY = 86_400

# SQS's limits on the attributes CloudFormation sets (CreateQueue refuses values outside them).
QUEUE_LIMITS = {
    "DelaySeconds": (0, 900),
    "MaximumMessageSize": (1024, 1_048_576),
    "MessageRetentionPeriod": (60, 14 * DAY),
    "ReceiveMessageWaitTimeSeconds": (0, 20),
    "VisibilityTimeout": (0, 43_200),
    "KmsDataKeyReusePeriodSeconds": (60, DAY),
}


@dataclass(frozen=True)
class Redrive:
    target: str            # the dead-letter queue's logical id
    max_receive_count: int


@dataclass(frozen=True)
class QueueSpec:
    """One ``AWS::SQS::Queue``: the attributes the template states (None: SQS's default)."""

    logical_id: str
    visibility_timeout: int | None = None
    message_retention_period: int | None = None
    maximum_message_size: int | None = None
    receive_wait_time_seconds: int | None = None
    delay_seconds: int | None = None
    redrive: Redrive | None = None
    redrive_allow_policy: Mapping[str, Any] | None = None
    sqs_managed_sse: bool | None = None
    kms_master_key_id: str | None = None
    kms_data_key_reuse_period: int | None = None
    fifo: bool = False

    def attributes(self, dead_letter_arns: Mapping[str, str], *,
                   visibility_timeout: int | None = None,
                   max_receive_count: int | None = None) -> dict[str, str]:
        """The CreateQueue attributes, the dead-letter target's ARN resolved; the overrides,
        when given, replace the template's VisibilityTimeout (where it states one) and
        maxReceiveCount."""
        attrs: dict[str, str] = {}
        for name, value in (("VisibilityTimeout", self.visibility_timeout),
                            ("MessageRetentionPeriod", self.message_retention_period),
                            ("MaximumMessageSize", self.maximum_message_size),
                            ("ReceiveMessageWaitTimeSeconds", self.receive_wait_time_seconds),
                            ("DelaySeconds", self.delay_seconds),
                            ("KmsDataKeyReusePeriodSeconds", self.kms_data_key_reuse_period)):
            if value is not None:
                attrs[name] = str(value)
        if visibility_timeout is not None and self.visibility_timeout is not None:
            attrs["VisibilityTimeout"] = str(visibility_timeout)
        if self.redrive is not None:
            count = max_receive_count or self.redrive.max_receive_count
            attrs["RedrivePolicy"] = json.dumps({
                "deadLetterTargetArn": dead_letter_arns[self.redrive.target],
                "maxReceiveCount": count})
        if self.redrive_allow_policy is not None:
            attrs["RedriveAllowPolicy"] = json.dumps(self.redrive_allow_policy)
        if self.sqs_managed_sse is not None:
            attrs["SqsManagedSseEnabled"] = "true" if self.sqs_managed_sse else "false"
        if self.kms_master_key_id is not None:
            attrs["KmsMasterKeyId"] = self.kms_master_key_id
        if self.fifo:
            attrs["FifoQueue"] = "true"
        return attrs


@dataclass(frozen=True)
class PollerSpec:
    """One ``AWS::Lambda::EventSourceMapping`` from an SQS queue."""

    logical_id: str
    function: str            # the function's logical id
    queue: str               # the queue's logical id
    batch_size: int = 10
    maximum_batching_window: int = 0  # seconds
    maximum_concurrency: int | None = None
    report_batch_item_failures: bool = False
    enabled: bool = True


@dataclass(frozen=True)
class Cron:
    """An EventBridge ``cron(minutes hours day-of-month month day-of-week year)``, each field
    the set of values it matches (None: any, ``*`` or ``?``); day of week 1-7 is SUN-SAT."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int] | None
    months: frozenset[int] | None
    weekdays: frozenset[int] | None
    years: frozenset[int] | None

    def matches(self, at: datetime) -> bool:
        return (at.minute in self.minutes and at.hour in self.hours
                and (self.days is None or at.day in self.days)
                and (self.months is None or at.month in self.months)
                and (self.weekdays is None or at.isoweekday() % 7 + 1 in self.weekdays)
                and (self.years is None or at.year in self.years))


@dataclass(frozen=True)
class TargetSpec:
    target_id: str
    function: str                      # the function's logical id
    maximum_retry_attempts: int = 185  # EventBridge's defaults
    maximum_event_age: int = DAY
    dead_letter_queue: str | None = None  # the queue's logical id


@dataclass(frozen=True)
class ScheduleSpec:
    """One scheduled ``AWS::Events::Rule``: ``rate(...)`` (``every``) or ``cron(...)``."""

    logical_id: str
    expression: str
    enabled: bool
    targets: tuple[TargetSpec, ...]
    every: timedelta | None = None
    cron: Cron | None = None

    def ticks(self, since: datetime, after: datetime, until: datetime,
              limit: int = 10_000) -> list[datetime]:
        """The instants in (after, until] the rule fires at, for a rule created at ``since``
        (a rate counts from its creation, a cron matches whole minutes, in UTC); none while
        disabled; at most ``limit``."""
        if not self.enabled:
            return []
        found: list[datetime] = []
        if self.every is not None:
            passed = max(0, (after - since) // self.every)
            at = since + self.every * (passed + 1)
            while at <= until and len(found) < limit:
                if at > after:
                    found.append(at)
                at += self.every
            return found
        assert self.cron is not None
        at = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
        while at <= until and len(found) < limit:
            if self.cron.matches(at):
                found.append(at)
            at += timedelta(minutes=1)
        return found


@dataclass(frozen=True)
class InvokeConfigSpec:
    """One ``AWS::Lambda::EventInvokeConfig``: how Lambda retries an asynchronous invoke."""

    logical_id: str
    function: str
    maximum_retry_attempts: int = 2        # Lambda's defaults
    maximum_event_age: int = 6 * 3600
    qualifier: str = "$LATEST"
    on_failure: str | None = None  # DestinationConfig.OnFailure: a queue's logical id


@dataclass(frozen=True)
class CustomResourceSpec:
    """The migrations custom resource: the function behind its ServiceToken (the Provider
    framework's, which calls ``on_event``) and the properties CloudFormation sends."""

    logical_id: str
    resource_type: str
    service_token: str               # the framework function's logical id
    on_event: str | None             # the function the framework calls (its logical id)
    properties: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TwinPlan:
    queues: Mapping[str, QueueSpec]
    pollers: tuple[PollerSpec, ...]
    schedules: tuple[ScheduleSpec, ...]
    invoke_configs: Mapping[str, InvokeConfigSpec]   # by function logical id
    migrations: CustomResourceSpec | None

    def schedule(self) -> ScheduleSpec:
        if len(self.schedules) != 1:
            raise PlanError("AWS::Events::Rule", "ScheduleExpression",
                            f"expected one scheduled rule, the template has "
                            f"{len(self.schedules)}")
        return self.schedules[0]


def read_plan(template: Mapping[str, Any]) -> TwinPlan:
    queues = {logical_id: read_queue(template, logical_id, resource)
              for logical_id, resource in of_type(template, QUEUE).items()}
    pollers = tuple(read_poller(template, logical_id, resource) for logical_id, resource
                    in of_type(template, "AWS::Lambda::EventSourceMapping").items())
    schedules = tuple(
        read_schedule(template, logical_id, resource)
        for logical_id, resource in of_type(template, "AWS::Events::Rule").items()
        if "ScheduleExpression" in properties(logical_id, resource))
    configs = [read_invoke_config(template, logical_id, resource) for logical_id, resource
               in of_type(template, "AWS::Lambda::EventInvokeConfig").items()]
    customs = [(logical_id, resource) for logical_id, resource in
               template["Resources"].items()
               if resource.get("Type") == "Custom::RemindersMigrations"]
    migrations = read_custom_resource(template, *customs[0]) if customs else None
    return TwinPlan(queues=queues, pollers=pollers, schedules=schedules,
                    invoke_configs={c.function: c for c in configs}, migrations=migrations)


def read_queue(template: Mapping[str, Any], logical_id: str,
               resource: Mapping[str, Any]) -> QueueSpec:
    props = properties(logical_id, resource)
    known = {*QUEUE_LIMITS, "RedrivePolicy", "RedriveAllowPolicy", "SqsManagedSseEnabled",
             "KmsMasterKeyId", "FifoQueue", "QueueName", "Tags", "ContentBasedDeduplication",
             "DeduplicationScope", "FifoThroughputLimit"}
    unknown = sorted(set(props) - known)
    if unknown:
        raise PlanError(logical_id, unknown[0], "is not a property of AWS::SQS::Queue")
    limits = {name: optional_integer(logical_id, props, name, *bounds)
              for name, bounds in QUEUE_LIMITS.items()}
    redrive = None
    if "RedrivePolicy" in props:
        policy = props["RedrivePolicy"]
        if isinstance(policy, str):
            try:
                policy = json.loads(policy)
            except ValueError:
                raise PlanError(logical_id, "RedrivePolicy",
                                f"is not JSON: {shown(policy)}") from None
        if not isinstance(policy, Mapping):
            raise PlanError(logical_id, "RedrivePolicy", f"must be an object, got "
                                                         f"{shown(policy)}")
        for key in ("deadLetterTargetArn", "maxReceiveCount"):
            if key not in policy:
                raise PlanError(logical_id, f"RedrivePolicy.{key}", "is missing")
        target = referenced(logical_id, "RedrivePolicy.deadLetterTargetArn",
                            policy["deadLetterTargetArn"], template, QUEUE, "Arn")
        count = integer(logical_id, "RedrivePolicy.maxReceiveCount",
                        policy["maxReceiveCount"], 1, 1000)
        redrive = Redrive(target, count)
    allow = props.get("RedriveAllowPolicy")
    if allow is not None:
        if isinstance(allow, str):
            try:
                allow = json.loads(allow)
            except ValueError:
                raise PlanError(logical_id, "RedriveAllowPolicy",
                                f"is not JSON: {shown(allow)}") from None
        if not isinstance(allow, Mapping) or allow.get("redrivePermission") not in (
                "allowAll", "denyAll", "byQueue"):
            raise PlanError(logical_id, "RedriveAllowPolicy.redrivePermission",
                            "must be allowAll, denyAll or byQueue, got "
                            f"{shown(allow)}")
    sse = props.get("SqsManagedSseEnabled")
    kms = props.get("KmsMasterKeyId")
    if kms is not None and not isinstance(kms, str):
        raise PlanError(logical_id, "KmsMasterKeyId", "is a reference to a key the twin "
                        f"does not create: {shown(kms, 120)}")
    if kms is not None and sse:
        raise PlanError(logical_id, "SqsManagedSseEnabled",
                        "cannot be true together with KmsMasterKeyId")
    return QueueSpec(
        logical_id=logical_id,
        visibility_timeout=limits["VisibilityTimeout"],
        message_retention_period=limits["MessageRetentionPeriod"],
        maximum_message_size=limits["MaximumMessageSize"],
        receive_wait_time_seconds=limits["ReceiveMessageWaitTimeSeconds"],
        delay_seconds=limits["DelaySeconds"],
        kms_data_key_reuse_period=limits["KmsDataKeyReusePeriodSeconds"],
        redrive=redrive,
        redrive_allow_policy=allow,
        sqs_managed_sse=None if sse is None else boolean(logical_id, "SqsManagedSseEnabled",
                                                          sse),
        kms_master_key_id=kms,
        fifo=boolean(logical_id, "FifoQueue", props.get("FifoQueue", False)))


def read_poller(template: Mapping[str, Any], logical_id: str,
                resource: Mapping[str, Any]) -> PollerSpec:
    """Lambda's rules for an SQS event source: a batch of 1-10000 records, more than ten only
    with a batching window of at least one second; a window of 0-300 s; a maximum concurrency
    of 2-1000; ReportBatchItemFailures the only response type."""
    props = properties(logical_id, resource)
    queue = referenced(logical_id, "EventSourceArn",
                       required(logical_id, props, "EventSourceArn"), template, QUEUE, "Arn")
    function = referenced(logical_id, "FunctionName",
                          required(logical_id, props, "FunctionName"), template, FUNCTION)
    batch = optional_integer(logical_id, props, "BatchSize", 1, 10_000) or 10
    window = optional_integer(logical_id, props, "MaximumBatchingWindowInSeconds", 0, 300) or 0
    if batch > 10 and window < 1:
        raise PlanError(logical_id, "BatchSize", f"is {batch}: more than 10 needs a "
                        "MaximumBatchingWindowInSeconds of at least 1, got "
                        f"{props.get('MaximumBatchingWindowInSeconds', 'none')}")
    scaling = props.get("ScalingConfig", {})
    if not isinstance(scaling, Mapping):
        raise PlanError(logical_id, "ScalingConfig", f"must be an object, got {shown(scaling)}")
    concurrency = optional_integer(logical_id, scaling, "MaximumConcurrency", 2, 1000,
                                   path="ScalingConfig.MaximumConcurrency")
    types = props.get("FunctionResponseTypes", [])
    if not isinstance(types, list) or any(t != "ReportBatchItemFailures" for t in types):
        raise PlanError(logical_id, "FunctionResponseTypes",
                        f"may hold only ReportBatchItemFailures, got {shown(types)}")
    return PollerSpec(logical_id=logical_id, function=function, queue=queue, batch_size=batch,
                      maximum_batching_window=window, maximum_concurrency=concurrency,
                      report_batch_item_failures=bool(types),
                      enabled=boolean(logical_id, "Enabled", props.get("Enabled", True)))


_RATE = re.compile(r"^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$")
_CRON = re.compile(r"^cron\(([^()]*)\)$")
_UNIT = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1), "day": timedelta(days=1)}
_MONTHS = {m: i + 1 for i, m in enumerate(
    ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"))}
_WEEKDAYS = {d: i + 1 for i, d in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))}


def parse_expression(logical_id: str, expression: Any) -> tuple[timedelta | None, Cron | None]:
    """EventBridge's ``rate(value unit)`` (singular unit for 1, plural otherwise) or
    ``cron(...)`` with six fields. The cron forms L, W and # are refused: the twin does not
    evaluate them."""
    prop = "ScheduleExpression"
    if not isinstance(expression, str):
        raise PlanError(logical_id, prop, f"must be a string, got {shown(expression)}")
    rate = _RATE.match(expression)
    if rate:
        value, unit = int(rate.group(1)), rate.group(2)
        if value < 1 or (value == 1) != (not unit.endswith("s")):
            raise PlanError(logical_id, prop, f"{expression!r}: a rate takes a positive value, "
                            "with a singular unit for 1 and a plural one otherwise")
        return _UNIT[unit.removesuffix("s")] * value, None
    cron = _CRON.match(expression)
    if not cron:
        raise PlanError(logical_id, prop, f"must be rate(value unit) or cron(six fields), "
                                          f"got {shown(expression)}")
    fields = cron.group(1).split()
    if len(fields) != 6:
        raise PlanError(logical_id, prop, f"{expression!r}: cron takes six fields (minutes "
                        f"hours day-of-month month day-of-week year), got {len(fields)}")
    minutes, hours, days, months, weekdays, years = fields
    if (days == "?") == (weekdays == "?"):
        raise PlanError(logical_id, prop, f"{expression!r}: exactly one of day-of-month and "
                                          "day-of-week must be ?")

    def part(name: str, value: str, low: int, high: int,
             names: Mapping[str, int] | None = None) -> frozenset[int] | None:
        if value in ("*", "?"):
            return None
        found: set[int] = set()
        for item in value.split(","):
            step = 1
            if "/" in item:
                item, step_text = item.split("/", 1)
                step = _cron_number(logical_id, expression, name, step_text, 1, high)
            if item in ("*", ""):
                start, end = low, high
            elif "-" in item:
                first, last = item.split("-", 1)
                start = _cron_number(logical_id, expression, name, first, low, high, names)
                end = _cron_number(logical_id, expression, name, last, low, high, names)
            else:
                start = _cron_number(logical_id, expression, name, item, low, high, names)
                end = start if step == 1 else high
            found.update(range(start, end + 1, step))
        return frozenset(found)

    minute_set = part("minutes", minutes, 0, 59)
    hour_set = part("hours", hours, 0, 23)
    return None, Cron(
        minutes=minute_set if minute_set is not None else frozenset(range(60)),
        hours=hour_set if hour_set is not None else frozenset(range(24)),
        days=part("day-of-month", days, 1, 31), months=part("month", months, 1, 12, _MONTHS),
        weekdays=part("day-of-week", weekdays, 1, 7, _WEEKDAYS),
        years=part("year", years, 1970, 2199))


def _cron_number(logical_id: str, expression: str, name: str, value: str, low: int, high: int,
                 names: Mapping[str, int] | None = None) -> int:
    if names and value.upper() in names:
        return names[value.upper()]
    if not value.isdigit() or not low <= int(value) <= high:
        raise PlanError(logical_id, "ScheduleExpression",
                        f"{expression!r}: the {name} field takes {low}-{high}"
                        f"{' or names' if names else ''} (L, W and # are not evaluated "
                        f"here), got {value!r}")
    return int(value)


def read_schedule(template: Mapping[str, Any], logical_id: str,
                  resource: Mapping[str, Any]) -> ScheduleSpec:
    props = properties(logical_id, resource)
    expression = props["ScheduleExpression"]
    every, cron = parse_expression(logical_id, expression)
    state = text(logical_id, "State", props.get("State", "ENABLED"),
                 ("ENABLED", "DISABLED", "ENABLED_WITH_ALL_CLOUDTRAIL_MANAGEMENT_EVENTS"))
    targets_given = props.get("Targets", [])
    if not isinstance(targets_given, list) or not 1 <= len(targets_given) <= 5:
        raise PlanError(logical_id, "Targets", f"must list 1-5 targets, got "
                                               f"{shown(targets_given)}")
    targets = []
    for i, target in enumerate(targets_given):
        where = f"Targets[{i}]"
        if not isinstance(target, Mapping):
            raise PlanError(logical_id, where, f"must be an object, got {shown(target)}")
        function = referenced(logical_id, f"{where}.Arn", required(logical_id, target, "Arn"),
                              template, FUNCTION, "Arn")
        retry = target.get("RetryPolicy", {})
        attempts = optional_integer(logical_id, retry, "MaximumRetryAttempts", 0, 185,
                                    path=f"{where}.RetryPolicy.MaximumRetryAttempts")
        age = optional_integer(logical_id, retry, "MaximumEventAgeInSeconds", 60, DAY,
                               path=f"{where}.RetryPolicy.MaximumEventAgeInSeconds")
        dead_letter = None
        if "DeadLetterConfig" in target:
            dead_letter = referenced(logical_id, f"{where}.DeadLetterConfig.Arn",
                                     target["DeadLetterConfig"].get("Arn"), template, QUEUE,
                                     "Arn")
        targets.append(TargetSpec(
            target_id=text(logical_id, f"{where}.Id", target.get("Id")), function=function,
            maximum_retry_attempts=185 if attempts is None else attempts,
            maximum_event_age=DAY if age is None else age, dead_letter_queue=dead_letter))
    return ScheduleSpec(logical_id=logical_id, expression=expression,
                        enabled=state != "DISABLED", targets=tuple(targets), every=every,
                        cron=cron)


def read_invoke_config(template: Mapping[str, Any], logical_id: str,
                       resource: Mapping[str, Any]) -> InvokeConfigSpec:
    props = properties(logical_id, resource)
    function = referenced(logical_id, "FunctionName", required(logical_id, props, "FunctionName"),
                          template, FUNCTION)
    attempts = optional_integer(logical_id, props, "MaximumRetryAttempts", 0, 2)
    age = optional_integer(logical_id, props, "MaximumEventAgeInSeconds", 60, 21_600)
    return InvokeConfigSpec(logical_id=logical_id, function=function,
                            maximum_retry_attempts=2 if attempts is None else attempts,
                            maximum_event_age=6 * 3600 if age is None else age,
                            qualifier=text(logical_id, "Qualifier",
                                           props.get("Qualifier", "$LATEST")),
                            on_failure=_on_failure(template, logical_id, props))


def _on_failure(template: Mapping[str, Any], logical_id: str,
                props: Mapping[str, Any]) -> str | None:
    """The queue an EventInvokeConfig's DestinationConfig.OnFailure names (the twin runs SQS
    destinations; an SNS topic, a function or an event bus is refused here, by name)."""
    config = props.get("DestinationConfig")
    if config is None:
        return None
    prop = "DestinationConfig"
    if not isinstance(config, Mapping) or set(config) - {"OnFailure", "OnSuccess"}:
        raise PlanError(logical_id, prop, f"must hold OnFailure and/or OnSuccess, got "
                                          f"{shown(config, 120)}")
    if "OnSuccess" in config:
        raise PlanError(logical_id, f"{prop}.OnSuccess", "is not run by the twin (only an "
                                                         "SQS OnFailure destination is)")
    failure = config.get("OnFailure")
    if not isinstance(failure, Mapping) or "Destination" not in failure:
        raise PlanError(logical_id, f"{prop}.OnFailure", "must hold a Destination")
    return referenced(logical_id, f"{prop}.OnFailure.Destination", failure["Destination"],
                      template, QUEUE, "Arn")


def read_custom_resource(template: Mapping[str, Any], logical_id: str,
                         resource: Mapping[str, Any]) -> CustomResourceSpec:
    props = properties(logical_id, resource)
    token = referenced(logical_id, "ServiceToken", required(logical_id, props, "ServiceToken"),
                       template, FUNCTION, "Arn")
    framework = properties(token, template["Resources"][token])
    env = framework.get("Environment", {}).get("Variables", {})
    on_event = None
    if "USER_ON_EVENT_FUNCTION_ARN" in env:  # CDK's Provider framework calls this function
        on_event = referenced(token, "Environment.Variables.USER_ON_EVENT_FUNCTION_ARN",
                              env["USER_ON_EVENT_FUNCTION_ARN"], template, FUNCTION, "Arn")
    return CustomResourceSpec(
        logical_id=logical_id, resource_type=str(resource["Type"]), service_token=token,
        on_event=on_event,
        properties={k: v for k, v in props.items() if k != "ServiceToken"})


# ---------------------------------------------------------------- the queues, in moto

@dataclass(frozen=True)
class LocalQueue:
    logical_id: str
    name: str
    url: str
    arn: str


def local_queue_name(prefix: str, logical_id: str) -> str:
    """``{prefix}-deliveries``, ``-dlq``, ``-parking`` for the queues the local stack has always
    had (roles.LOCAL_RESOURCES), else the logical id without CDK's hash, in kebab case."""
    for name, pattern in LOCAL_RESOURCES.items():
        if pattern.match(logical_id):
            return f"{prefix}-{name}"
    bare = re.sub(r"[0-9A-F]{8}$", "", logical_id)
    return f"{prefix}-{re.sub(r'(?<!^)(?=[A-Z])', '-', bare).lower()}"[:80]


def create_queues(plan: TwinPlan, sqs: Any, prefix: str, *,
                  visibility_timeout_override: int | None = None,
                  max_receive_count_override: int | None = None) -> dict[str, LocalQueue]:
    """Every queue of the plan in moto (``sqs``: the administrator's client), dead-letter
    targets first, with exactly the template's attributes; by logical id.

    ``visibility_timeout_override`` replaces the VisibilityTimeout of every queue that states
    one; ``max_receive_count_override`` sets the smallest maxReceiveCount of the template to
    that value and scales the others by the same factor (so the dead-letter queue keeps twice
    the deliveries queue's count). Both are for tests and the demo, which cannot wait six
    minutes for a message to come back; None keeps the template's values."""
    smallest = min((q.redrive.max_receive_count for q in plan.queues.values() if q.redrive),
                   default=1)
    made: dict[str, LocalQueue] = {}
    pending = dict(plan.queues)
    while pending:
        ready = [q for q in pending.values()
                 if q.redrive is None or q.redrive.target in made]
        if not ready:
            raise PlanError(next(iter(pending)), "RedrivePolicy.deadLetterTargetArn",
                            "forms a cycle of dead-letter queues")
        for spec in ready:
            count = None
            if max_receive_count_override is not None and spec.redrive is not None:
                count = max(1, round(spec.redrive.max_receive_count
                                     * max_receive_count_override / smallest))
            name = local_queue_name(prefix, spec.logical_id)
            url = sqs.create_queue(QueueName=name, Attributes=spec.attributes(
                {k: q.arn for k, q in made.items()}, visibility_timeout=visibility_timeout_override,
                max_receive_count=count))["QueueUrl"]
            arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
                "Attributes"]["QueueArn"]
            made[spec.logical_id] = LocalQueue(spec.logical_id, name, url, arn)
            del pending[spec.logical_id]
    return {logical_id: made[logical_id] for logical_id in plan.queues}


def local_name(queues: Mapping[str, LocalQueue], name: str) -> LocalQueue:
    """The queue the local stack calls ``name`` (a LOCAL_RESOURCES name: deliveries, dlq,
    parking)."""
    pattern = LOCAL_RESOURCES[name]
    for logical_id, queue in queues.items():
        if pattern.match(logical_id):
            return queue
    raise PlanError(name, "Type", f"the template has no queue matching {pattern.pattern}")
