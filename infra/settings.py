"""Deployment settings read from CDK context, with the defaults a first deploy needs.

Every value can be overridden with ``-c name=value`` (strings) or in ``cdk.json``'s
``context`` block (typed JSON). Nothing here calls AWS or reads git, so synth is offline.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from aws_cdk import aws_logs as logs
from constructs import Node

T = TypeVar("T")

# Connections held through RDS Proxy by one function instance (each opens one).
CONNECTIONS_PER_INSTANCE = 1
# The migrate function runs once per deploy, alone.
MIGRATE_CONCURRENCY = 1
# AWS minimum for an event source mapping's maximum concurrency.
MIN_ESM_CONCURRENCY = 2


class SettingsError(ValueError):
    """A context value is missing its expected shape."""


def _as_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in {"true", "1", "yes", "on"}:
        return True
    if isinstance(value, str) and value.strip().lower() in {"false", "0", "no", "off"}:
        return False
    raise SettingsError(f"context {name!r} must be true or false, got {value!r}")


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise SettingsError(f"context {name!r} must be an integer, got {value!r}")
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"context {name!r} must be an integer, got {value!r}") from exc


def _as_str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise SettingsError(f"context {name!r} must be a string, got {value!r}")
    return value


def _as_list(name: str, value: Any) -> tuple[str, ...]:
    """Accept a JSON list (cdk.json) or a comma-separated string (``-c``)."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        return tuple(value)
    raise SettingsError(f"context {name!r} must be a list of strings, got {value!r}")


@dataclass(frozen=True)
class Settings:
    """Everything the stack needs to know about one deployment."""

    account: str = "123456789012"
    region: str = "eu-west-1"
    availability_zones: tuple[str, ...] = ()  # empty: "<region>a", "<region>b"
    stack_name: str = "Reminders"

    # network
    webhook_egress: bool = True
    nat_gateways: int = 1

    # database
    db_name: str = "reminders"
    db_instance_class: str = "t4g.small"
    db_allocated_storage_gib: int = 20
    db_max_allocated_storage_gib: int = 100
    db_backup_retention_days: int = 7
    db_multi_az: bool = True
    db_deletion_protection: bool = True
    db_rotation_days: int = 30
    db_connection_budget: int = 40

    # functions
    log_retention_days: int = 30
    log_level: str = "INFO"
    scanner_timeout_seconds: int = 60
    consumer_timeout_seconds: int = 60
    redrive_timeout_seconds: int = 60
    migrate_timeout_seconds: int = 300
    scanner_reserved_concurrency: int = 1
    redrive_max_concurrency: int = 2
    scan_batch: int = 100
    inflight_budget: int = 1000
    lease_seconds: int = 600
    redrive_budget: int = 3
    email_sender: str = "reminders@example.com"
    email_identity: str = ""  # empty: the sender's domain
    webhook_allow: str = ""

    # queues and event sources
    max_receive_count: int = 5
    deliveries_retention_days: int = 4
    consumer_batch_size: int = 10
    consumer_batching_window_seconds: int = 1
    redrive_batch_size: int = 10
    redrive_batching_window_seconds: int = 0

    # schedule
    scanner_enabled: bool = True
    schedule_retry_attempts: int = 2
    schedule_max_event_age_seconds: int = 120

    # alarms
    alarm_emails: tuple[str, ...] = ()
    queue_age_alarm_seconds: int = 600
    dlq_age_alarm_seconds: int = 3600
    parking_age_alarm_seconds: int = 3 * 24 * 3600
    overdue_alarm_seconds: int = 300
    # deliveries settled in that state within 5 minutes (the functions' EMF counts)
    unknown_alarm_threshold: int = 1
    dead_alarm_threshold: int = 1
    failed_alarm_threshold: int = 10

    @property
    def azs(self) -> list[str]:
        if self.availability_zones:
            return list(self.availability_zones)
        return [f"{self.region}a", f"{self.region}b"]

    @property
    def ses_identity(self) -> str:
        """The SES identity ``ses:SendEmail`` is granted on."""
        if self.email_identity:
            return self.email_identity
        return self.email_sender.rpartition("@")[2]

    @property
    def consumer_max_concurrency(self) -> int:
        """Consumer instances allowed at once, derived from the database connection budget.

        budget - scanner reserved concurrency - redrive max concurrency - migrate (1),
        each times the connections one instance holds; never below the AWS minimum of 2.
        """
        reserved = (
            self.scanner_reserved_concurrency + self.redrive_max_concurrency + MIGRATE_CONCURRENCY
        ) * CONNECTIONS_PER_INSTANCE
        return max(
            MIN_ESM_CONCURRENCY,
            (self.db_connection_budget - reserved) // CONNECTIONS_PER_INSTANCE,
        )

    @property
    def deliveries_visibility_seconds(self) -> int:
        """Six times the consumer timeout, the SQS event source guidance."""
        return 6 * self.consumer_timeout_seconds

    def validate(self) -> Settings:
        if self.max_receive_count < 5:
            raise SettingsError("maxReceiveCount must be at least 5")
        if not 1 <= self.deliveries_retention_days < 14:
            raise SettingsError("deliveriesRetentionDays must be 1..13 (the DLQ keeps 14)")
        if self.redrive_max_concurrency < MIN_ESM_CONCURRENCY:
            raise SettingsError("redriveMaxConcurrency must be at least 2")
        if self.scanner_reserved_concurrency < 1:
            raise SettingsError("scannerReservedConcurrency must be at least 1")
        if "@" not in self.email_sender:
            raise SettingsError("emailSender must be an email address")
        outcome_thresholds = {
            "unknownAlarmThreshold": self.unknown_alarm_threshold,
            "deadAlarmThreshold": self.dead_alarm_threshold,
            "failedAlarmThreshold": self.failed_alarm_threshold,
        }
        for name, threshold in outcome_thresholds.items():
            # Below 1 the alarm would fire on every datapoint the functions publish.
            if threshold < 1:
                raise SettingsError(f"{name} must be at least 1")
        return self

    @classmethod
    def from_node(cls, node: Node) -> Settings:
        """Read every field from context under its camelCase name."""
        values: dict[str, Any] = {}
        for field_name, (context_key, convert) in _CONTEXT_KEYS.items():
            raw = node.try_get_context(context_key)
            if raw is not None:
                values[field_name] = convert(context_key, raw)
        return cls(**values).validate()


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _converter(default: Any) -> Callable[[str, Any], Any]:
    if isinstance(default, bool):
        return _as_bool
    if isinstance(default, int):
        return _as_int
    if isinstance(default, tuple):
        return _as_list
    return _as_str


_CONTEXT_KEYS: Mapping[str, tuple[str, Callable[[str, Any], Any]]] = {
    name: (_camel(name), _converter(field.default))
    for name, field in Settings.__dataclass_fields__.items()
}


def retention_days(days: int) -> logs.RetentionDays:
    """Map a number of days from context onto the closest allowed retention, rounding up."""
    allowed = sorted(
        (_RETENTION_DAYS[member.name], member)
        for member in logs.RetentionDays
        if member.name in _RETENTION_DAYS
    )
    for value, member in allowed:
        if days <= value:
            return member
    return logs.RetentionDays.TEN_YEARS


_RETENTION_DAYS: dict[str, int] = {
    "ONE_DAY": 1,
    "THREE_DAYS": 3,
    "FIVE_DAYS": 5,
    "ONE_WEEK": 7,
    "TWO_WEEKS": 14,
    "ONE_MONTH": 30,
    "TWO_MONTHS": 60,
    "THREE_MONTHS": 90,
    "FOUR_MONTHS": 120,
    "FIVE_MONTHS": 150,
    "SIX_MONTHS": 180,
    "ONE_YEAR": 365,
    "THIRTEEN_MONTHS": 400,
    "EIGHTEEN_MONTHS": 545,
    "TWO_YEARS": 731,
    "THREE_YEARS": 1096,
    "FIVE_YEARS": 1827,
    "SIX_YEARS": 2192,
    "SEVEN_YEARS": 2557,
    "EIGHT_YEARS": 2922,
    "NINE_YEARS": 3288,
    "TEN_YEARS": 3653,
}
