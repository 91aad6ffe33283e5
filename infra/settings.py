"""Deployment settings read from CDK context, with the defaults a first deploy needs.

Every value can be overridden with ``-c name=value`` (strings) or in ``cdk.json``'s
``context`` block (typed JSON). Nothing here calls AWS or reads git, so synth is offline.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from aws_cdk import aws_logs as logs
from constructs import Node

T = TypeVar("T")

# Connections held through RDS Proxy by one function instance (each opens one).
CONNECTIONS_PER_INSTANCE = 1
# The migrate function runs once per deploy, alone.
MIGRATE_CONCURRENCY = 1
# AWS minimum and maximum for an SQS event source mapping's maximum concurrency.
MIN_ESM_CONCURRENCY = 2
MAX_ESM_CONCURRENCY = 1000
# Provisioned mode of an SQS event source (Lambda API ProvisionedPollerConfig).
MIN_SQS_POLLERS = 2
MAX_SQS_MIN_POLLERS = 200
MAX_SQS_POLLERS = 2000
# An SQS event source takes more than 10 messages a batch only with a batching window.
SQS_BATCH_WITHOUT_WINDOW = 10
# Lambda's longest timeout.
MAX_FUNCTION_TIMEOUT_SECONDS = 900
# The scanner's rule fires every minute (infra/constructs/schedule.py).
SCHEDULE_PERIOD_SECONDS = 60
# Kept back from each minute after a scanner tick drains: reclaim, the oldest-overdue figure and
# the metrics run after the drain, and the tick must end before the next one starts (the
# scanner's reserved concurrency is 1, so an overlapping tick would be throttled).
SCANNER_TICK_MARGIN_SECONDS = 5
# Time a consumer invocation needs besides the sends and the invocation margin: recording the
# batch's outcomes and advancing its series after the last send; at least one transaction's
# worst case (Settings.db_transaction_seconds).
CONSUMER_SETTLE_ALLOWANCE_SECONDS = 10
# RDS Proxy's borrow timeout (infra/constructs/database.py): how long a transaction waits for a
# database connection from the proxy's pool. The consumer counts it in the time it keeps for
# recording a batch (shared/reminders/consumer.py, DB_WAIT_SECONDS).
PROXY_BORROW_TIMEOUT_SECONDS = 5
# The longest an e-mail or SMS send may take (their clients' timeouts): the consumer keeps at
# least this much for a send, whatever sendTimeoutSeconds says for webhooks
# (shared/reminders/consumer.py, DEFAULT_SEND_SECONDS).
AWS_CHANNEL_SEND_SECONDS = 15
# The most sends of one batch the consumer runs at once (REMINDERS_SEND_CONCURRENCY's ceiling
# in shared/reminders/config.py). A batch is sent all at once, so this caps the batch size. Each
# send is a thread and a socket, and a Lambda execution environment allows 1,024 of each
# (processes/threads and file descriptors), so half of them at most. An SQS event takes about
# 1-2 KB a message in the function's payload: 500 stay well under its 6 MB.
MAX_SEND_CONCURRENCY = 500
# What shared/reminders/config.py accepts for the settings passed through from context, so a
# bad value fails synth instead of every cold start.
RUNTIME_RANGES: Mapping[str, tuple[int, int]] = {
    "scanBatch": (1, 10_000),
    "inflightBudget": (1, 1_000_000),
    "leaseSeconds": (5, 43_200),
    "redriveBudget": (0, 100),
    "scanSeconds": (1, 840),
    "publishConcurrency": (1, 64),
    "publishChunk": (1, 2000),
    "sendTimeoutSeconds": (1, 120),
    "invocationMarginSeconds": (0, 600),
    "dbLockTimeoutMs": (1, 600_000),
    "dbStatementTimeoutMs": (100, 3_600_000),
}


# The publisher function's asynchronous configuration. Lambda retries a failed chunk at most
# PUBLISHER_RETRY_ATTEMPTS times, waiting PUBLISHER_RETRY_WAITS_SECONDS before each retry (one
# minute, then two, as Lambda documents), and drops an event older than its maximum event age
# (PublisherEventsDropped fires). The age is derived from the lease the chunk carries
# (Settings.publisher_max_event_age_seconds): a chunk is worth publishing only while a consumer
# can still use its leases before they expire and the scanner reclaims them.
PUBLISHER_RETRY_ATTEMPTS = 2
PUBLISHER_RETRY_WAITS_SECONDS = (60, 120)
# Between the lease and Lambda's acceptance of its chunk: the scanner hands a pass over as soon
# as it is leased, and an Invoke answers in well under this (its client's timeouts included).
PUBLISH_HANDOVER_SECONDS = 10
# Lambda's bounds on MaximumEventAgeInSeconds.
MIN_EVENT_AGE_SECONDS = 60
MAX_EVENT_AGE_SECONDS = 21_600


def retry_latest_starts(retries: int, timeout_seconds: int) -> list[int]:
    """Seconds after a chunk's first try at which each retry starts at the latest: every try
    before it ran its whole timeout, then Lambda waited its turn (1 min, then 2)."""
    return [sum(PUBLISHER_RETRY_WAITS_SECONDS[:k]) + k * timeout_seconds
            for k in range(1, retries + 1)]


# operatorAccess values: the operations function alone, or with an SSM port-forward instance.
OPERATOR_ACCESS = ("", "bastion")
# The command line waits 30 s longer than this for the operations function's answer.
MAX_OPS_TIMEOUT_SECONDS = 300
# The operations functions are named "{stackName}-ops-read" and "{stackName}-ops-write"
# (Lambda allows 64 characters).
MAX_STACK_NAME_FOR_FUNCTION = 54

# Zones used when ``availabilityZones`` is not given: the first ones Fn::GetAZs returns.
DEFAULT_ZONE_COUNT = 2
# Where the CDK CLI puts the account and region of the caller's credentials and configuration.
DEFAULT_ACCOUNT_ENV = "CDK_DEFAULT_ACCOUNT"
DEFAULT_REGION_ENV = "CDK_DEFAULT_REGION"


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

    # Empty: the CDK CLI's CDK_DEFAULT_ACCOUNT / CDK_DEFAULT_REGION (the caller's credentials and
    # configured region); without those the stack is environment-agnostic and CloudFormation
    # fills them in at deploy time. Nothing account- or region-specific lives in cdk.json.
    account: str = ""
    region: str = ""
    availability_zones: tuple[str, ...] = ()  # empty: the region's first two, at deploy time
    stack_name: str = "Reminders"

    # network
    webhook_egress: bool = True
    nat_gateways: int = 1

    # database
    db_name: str = "reminders"
    # The schema the service's tables live in (REMINDERS_DB_SCHEMA in every function).
    db_schema: str = "reminders"
    db_instance_class: str = "t4g.small"
    db_allocated_storage_gib: int = 20
    db_max_allocated_storage_gib: int = 100
    db_backup_retention_days: int = 7
    db_multi_az: bool = True
    db_deletion_protection: bool = True
    db_rotation_days: int = 30
    db_connection_budget: int = 40

    # bring your own database: with existingDbHost set, no VPC, RDS instance or proxy is
    # created; the functions join the given VPC and subnets and log in to that Postgres.
    existing_db_host: str = ""
    existing_db_port: int = 5432
    existing_db_secret_arn: str = ""  # username/password JSON of a role that may run DDL
    existing_db_sslmode: str = "verify-full"
    existing_vpc_id: str = ""
    existing_subnet_ids: tuple[str, ...] = ()
    # The functions' security group; empty: the stack creates one (output
    # DatabaseClientSecurityGroupId) for the database's inbound rules.
    existing_security_group_id: str = ""

    # operator access: "" (the operations function only) or "bastion" (an SSM-managed
    # instance for port-forwarding to the proxy as well)
    operator_access: str = ""
    ops_timeout_seconds: int = 120
    # The roles that administer the webhook secrets' KMS key (IAM role ARNs); empty: the CDK
    # bootstrap's CloudFormation execution role, which deploys the stack.
    key_administrators: tuple[str, ...] = ()

    # functions
    log_retention_days: int = 30
    log_level: str = "INFO"
    scanner_timeout_seconds: int = 120
    consumer_timeout_seconds: int = 60
    redrive_timeout_seconds: int = 60
    migrate_timeout_seconds: int = 300
    scanner_reserved_concurrency: int = 1
    redrive_max_concurrency: int = 2
    # The consumer's SQS event source: "" is standard mode with its maximum concurrency (derived
    # from dbConnectionBudget); "MIN-MAX" is provisioned mode with that many event pollers
    # (ProvisionedPollerConfig), the consumer then capped by reserved concurrency instead, as
    # provisioned mode and maximum concurrency are mutually exclusive.
    sqs_pollers: str = ""
    scanner_memory_mib: int = 1769  # one full vCPU: lease passes, and publishing without fan-out
    # two vCPUs: a batch's TLS handshakes (about half of a send's CPU time, outside Python's
    # lock) run beside the rest of the sends' work; one vCPU is tight for 300 sends at once
    consumer_memory_mib: int = 3538
    scan_batch: int = 1000
    scan_seconds: int = 0  # 0: derived from the scanner timeout and the tick period
    publish_concurrency: int = 10  # SendMessageBatch calls in flight (the pool holds 64)
    # Fan-out: the scanner hands chunks of publishChunk leases to the publisher function
    # (asynchronous invokes, publishConcurrency at a time); off: it publishes them itself.
    publisher_fan_out: bool = True
    # Pace e-mail at the account's SES MaxSendRate (read by the consumer at cold start) unless
    # an operator set a rate with `reminders channels set email --rate`.
    email_rate_from_account: bool = True
    publish_chunk: int = 1000
    publisher_reserved_concurrency: int = 10
    publisher_timeout_seconds: int = 30
    publisher_memory_mib: int = 1769  # one full vCPU: ten SendMessageBatch calls in flight
    inflight_budget: int = 0  # 0: derived from what the consumers can take
    inflight_factor: int = 4
    send_timeout_seconds: int = 15
    invocation_margin_seconds: int = 5
    db_lock_timeout_ms: int = 5000
    db_statement_timeout_ms: int = 30_000
    lease_seconds: int = 600
    redrive_budget: int = 3
    email_sender: str = "reminders@example.com"
    email_identity: str = ""  # empty: the sender's domain
    webhook_allow: str = ""

    # queues and event sources
    max_receive_count: int = 5
    deliveries_retention_days: int = 4
    consumer_batch_size: int = 300  # sent all at once: about one send's time plus the CPU
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
    def existing_database(self) -> bool:
        """Bring your own database: deploy against ``existingDbHost`` instead of RDS."""
        return bool(self.existing_db_host)

    @property
    def azs(self) -> list[str]:
        """Zones named in context; empty means the region's first two (``Fn::GetAZs``)."""
        return list(self.availability_zones)

    @property
    def zone_count(self) -> int:
        return len(self.availability_zones) or DEFAULT_ZONE_COUNT

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
    def consumer_pollers(self) -> tuple[int, int] | None:
        """``sqsPollers`` as (minimum, maximum) event pollers, or None for standard mode."""
        if not self.sqs_pollers:
            return None
        match = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", self.sqs_pollers)
        if match is None:
            raise SettingsError(f"sqsPollers must be MIN-MAX event pollers, e.g. 2-20, got "
                                f"{self.sqs_pollers!r}")
        low, high = int(match[1]), int(match[2])
        if not MIN_SQS_POLLERS <= low <= MAX_SQS_MIN_POLLERS or not low <= high <= MAX_SQS_POLLERS:
            raise SettingsError(
                f"sqsPollers {self.sqs_pollers!r}: an SQS event source in provisioned mode takes "
                f"{MIN_SQS_POLLERS} to {MAX_SQS_MIN_POLLERS} minimum pollers and a maximum from "
                f"the minimum to {MAX_SQS_POLLERS}")
        return low, high

    @property
    def deliveries_visibility_seconds(self) -> int:
        """Six times the consumer timeout, the SQS event source guidance."""
        return 6 * self.consumer_timeout_seconds

    @property
    def consumer_send_concurrency(self) -> int:
        """Every message of a batch is sent at once, so a batch takes about one send's time."""
        return self.consumer_batch_size

    @property
    def effective_inflight_budget(self) -> int:
        """``inflightBudget`` if given; else what the consumers can hold at once times
        ``inflightFactor``: consumer maximum concurrency x batch size x factor."""
        if self.inflight_budget:
            return self.inflight_budget
        return self.consumer_max_concurrency * self.consumer_batch_size * self.inflight_factor

    @property
    def effective_scan_seconds(self) -> int:
        """``scanSeconds`` if given; else as long as a tick can drain: half the scanner timeout
        (the scanner never drains longer than half its remaining time), and never into the next
        minute's tick."""
        if self.scan_seconds:
            return self.scan_seconds
        return min(
            self.scanner_timeout_seconds // 2,
            SCHEDULE_PERIOD_SECONDS - SCANNER_TICK_MARGIN_SECONDS,
        )

    @property
    def db_transaction_seconds(self) -> int:
        """The longest one transaction of a function may take: waiting for a connection
        through the proxy, then for its statement."""
        return PROXY_BORROW_TIMEOUT_SECONDS + -(-self.db_statement_timeout_ms // 1000)

    @property
    def consumer_settle_allowance_seconds(self) -> int:
        """Time kept after the last send to record the outcomes: one transaction's worst."""
        return max(CONSUMER_SETTLE_ALLOWANCE_SECONDS, self.db_transaction_seconds)

    @property
    def consumer_time_needed_seconds(self) -> int:
        """The least consumer timeout with which a batch can start, send and settle."""
        return (
            self.consumer_send_seconds
            + self.invocation_margin_seconds
            + self.consumer_settle_allowance_seconds
        )

    @property
    def consumer_send_seconds(self) -> int:
        """The longest one send of a batch may take: a webhook's deadline, or an AWS channel's."""
        return max(self.send_timeout_seconds, AWS_CHANNEL_SEND_SECONDS)

    @property
    def publisher_useful_seconds(self) -> int:
        """How long after its lease a chunk's publish is still of use: its message must reach
        the queue with a consumer's whole run (consumerTimeoutSeconds) left before the lease
        expires (leaseSeconds), and a try that starts then may take publisherTimeoutSeconds."""
        return (self.lease_seconds - PUBLISH_HANDOVER_SECONDS - self.publisher_timeout_seconds
                - self.consumer_timeout_seconds)

    @property
    def publisher_max_event_age_seconds(self) -> int:
        """The publisher's MaximumEventAgeInSeconds: as long as its publish is of use (within
        Lambda's 60-21600 s). Older, Lambda drops the chunk; its leases are reclaimed."""
        return max(MIN_EVENT_AGE_SECONDS, min(MAX_EVENT_AGE_SECONDS,
                                              self.publisher_useful_seconds))

    def _check_publisher_retries(self) -> None:
        """Every retry Lambda may make of a chunk starts within the maximum event age, and so
        while the lease it carries has time left for a consumer."""
        needed = retry_latest_starts(PUBLISHER_RETRY_ATTEMPTS, self.publisher_timeout_seconds)[-1]
        waits = " and ".join(map(str, PUBLISHER_RETRY_WAITS_SECONDS))
        if self.publisher_useful_seconds < max(needed, MIN_EVENT_AGE_SECONDS):
            least = (max(needed, MIN_EVENT_AGE_SECONDS) + PUBLISH_HANDOVER_SECONDS
                     + self.publisher_timeout_seconds + self.consumer_timeout_seconds)
            raise SettingsError(
                f"leaseSeconds must be at least {least} with publisherFanOut on, got "
                f"{self.lease_seconds}: Lambda's last retry of a chunk may start {needed} s "
                f"after its first try (waits of {waits} s, "
                f"each try up to publisherTimeoutSeconds {self.publisher_timeout_seconds}), "
                f"{PUBLISH_HANDOVER_SECONDS} s after the lease at most, and must still reach "
                f"the queue with consumerTimeoutSeconds {self.consumer_timeout_seconds} left "
                "before the lease expires")

    def validate(self) -> Settings:
        for arn in self.key_administrators:
            if not _ROLE_ARN.fullmatch(arn):
                raise SettingsError(f"keyAdministrators must be IAM role ARNs "
                                    f"(arn:aws:iam::123456789012:role/name), got {arn!r}")
        if self.max_receive_count < 5:
            raise SettingsError("maxReceiveCount must be at least 5")
        if not 1 <= self.deliveries_retention_days < 14:
            raise SettingsError("deliveriesRetentionDays must be 1..13 (the DLQ keeps 14)")
        if self.redrive_max_concurrency < MIN_ESM_CONCURRENCY:
            raise SettingsError("redriveMaxConcurrency must be at least 2")
        if self.scanner_reserved_concurrency < 1:
            raise SettingsError("scannerReservedConcurrency must be at least 1")
        if self.publisher_reserved_concurrency < 1:
            raise SettingsError("publisherReservedConcurrency must be at least 1")
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
        self._validate_throughput()
        self._validate_access()
        return self

    def _validate_access(self) -> None:
        """Operator access, the schema, and bringing your own database."""
        import re

        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", self.db_schema):
            raise SettingsError(f"dbSchema must be a lower-case Postgres name (a-z, 0-9, _; at "
                                f"most 63), got {self.db_schema!r}")
        if self.operator_access not in OPERATOR_ACCESS:
            raise SettingsError(f"operatorAccess must be one of "
                                f"{', '.join(repr(a) for a in OPERATOR_ACCESS)}, got "
                                f"{self.operator_access!r}")
        if not 10 <= self.ops_timeout_seconds <= MAX_OPS_TIMEOUT_SECONDS:
            raise SettingsError(f"opsTimeoutSeconds must be between 10 and "
                                f"{MAX_OPS_TIMEOUT_SECONDS} (the command line waits "
                                f"{MAX_OPS_TIMEOUT_SECONDS + 30} s), got "
                                f"{self.ops_timeout_seconds}")
        if len(self.stack_name) > MAX_STACK_NAME_FOR_FUNCTION:
            raise SettingsError(f"stackName must be at most {MAX_STACK_NAME_FOR_FUNCTION} "
                                "characters (the operations functions are named STACK-ops-read and "
                                "STACK-ops-write)")
        byo = {
            "existingVpcId": self.existing_vpc_id,
            "existingSubnetIds": self.existing_subnet_ids,
            "existingDbSecretArn": self.existing_db_secret_arn,
        }
        if not self.existing_database:
            given = [name for name, value in {**byo, "existingSecurityGroupId":
                                              self.existing_security_group_id}.items() if value]
            if given:
                raise SettingsError(f"{given[0]} applies only with existingDbHost (bring your "
                                    "own database)")
            return
        missing = [name for name, value in byo.items() if not value]
        if missing:
            raise SettingsError(f"existingDbHost needs {', '.join(missing)} as well")
        if not re.fullmatch(r"vpc-[0-9a-f]{8,17}", self.existing_vpc_id):
            raise SettingsError(f"existingVpcId must look like vpc-0123456789abcdef0, got "
                                f"{self.existing_vpc_id!r}")
        for subnet in self.existing_subnet_ids:
            if not re.fullmatch(r"subnet-[0-9a-f]{8,17}", subnet):
                raise SettingsError(f"existingSubnetIds: {subnet!r} is not a subnet id")
        if self.existing_security_group_id and not re.fullmatch(
                r"sg-[0-9a-f]{8,17}", self.existing_security_group_id):
            raise SettingsError(f"existingSecurityGroupId must look like sg-0123456789abcdef0, "
                                f"got {self.existing_security_group_id!r}")
        if not self.existing_db_secret_arn.startswith("arn:") or \
                ":secretsmanager:" not in self.existing_db_secret_arn:
            raise SettingsError("existingDbSecretArn must be a Secrets Manager secret ARN, got "
                                f"{self.existing_db_secret_arn!r}")
        if not 1 <= self.existing_db_port <= 65_535:
            raise SettingsError(f"existingDbPort must be 1..65535, got {self.existing_db_port}")
        if self.existing_db_sslmode not in ("verify-full", "verify-ca", "require"):
            raise SettingsError("existingDbSslmode must be verify-full, verify-ca or require, "
                                f"got {self.existing_db_sslmode!r}")
        if self.operator_access == "bastion":
            raise SettingsError("operatorAccess=bastion creates an instance in the stack's own "
                                "VPC; with existingDbHost, reach your database the way your "
                                "VPC already allows (the operations function works either way)")

    def _validate_throughput(self) -> None:
        """The consumer, scanner and queue settings that must agree with each other."""
        explicit = {
            "scanBatch": self.scan_batch,
            "leaseSeconds": self.lease_seconds,
            "redriveBudget": self.redrive_budget,
            "publishConcurrency": self.publish_concurrency,
            "publishChunk": self.publish_chunk,
            "sendTimeoutSeconds": self.send_timeout_seconds,
            "invocationMarginSeconds": self.invocation_margin_seconds,
            "dbLockTimeoutMs": self.db_lock_timeout_ms,
            "dbStatementTimeoutMs": self.db_statement_timeout_ms,
        }
        if self.inflight_budget:
            explicit["inflightBudget"] = self.inflight_budget
        if self.scan_seconds:
            explicit["scanSeconds"] = self.scan_seconds
        for name, value in explicit.items():
            low, high = RUNTIME_RANGES[name]
            if not low <= value <= high:
                raise SettingsError(f"{name} must be between {low} and {high}, got {value}")
        timeouts = {
            "scannerTimeoutSeconds": self.scanner_timeout_seconds,
            "consumerTimeoutSeconds": self.consumer_timeout_seconds,
            "redriveTimeoutSeconds": self.redrive_timeout_seconds,
            "migrateTimeoutSeconds": self.migrate_timeout_seconds,
            "publisherTimeoutSeconds": self.publisher_timeout_seconds,
        }
        for name, seconds in timeouts.items():
            if not 1 <= seconds <= MAX_FUNCTION_TIMEOUT_SECONDS:
                raise SettingsError(
                    f"{name} must be between 1 and {MAX_FUNCTION_TIMEOUT_SECONDS}, got {seconds}"
                )
        for name, mib in {
            "scannerMemoryMib": self.scanner_memory_mib,
            "consumerMemoryMib": self.consumer_memory_mib,
            "publisherMemoryMib": self.publisher_memory_mib,
        }.items():
            if not 128 <= mib <= 10_240:
                raise SettingsError(f"{name} must be between 128 and 10240, got {mib}")
        if not 1 <= self.consumer_batch_size <= MAX_SEND_CONCURRENCY:
            raise SettingsError(
                f"consumerBatchSize must be between 1 and {MAX_SEND_CONCURRENCY}, got "
                f"{self.consumer_batch_size}: the consumer sends a whole batch at once, a "
                f"thread and a connection each (REMINDERS_SEND_CONCURRENCY, at most "
                f"{MAX_SEND_CONCURRENCY}; Lambda allows 1,024 threads and file descriptors), so "
                "one send deadline bounds the batch"
            )
        windows = {
            "consumer": (self.consumer_batch_size, self.consumer_batching_window_seconds),
            "redrive": (self.redrive_batch_size, self.redrive_batching_window_seconds),
        }
        for source, (size, window) in windows.items():
            if size > SQS_BATCH_WITHOUT_WINDOW and window < 1:
                raise SettingsError(
                    f"{source}BatchingWindowSeconds must be at least 1 when {source}BatchSize "
                    f"is above {SQS_BATCH_WITHOUT_WINDOW} (got {size}): SQS event sources "
                    "take larger batches only with a batching window"
                )
        self.consumer_pollers  # noqa: B018 (raises on a bad sqsPollers)
        if self.consumer_max_concurrency > MAX_ESM_CONCURRENCY:
            raise SettingsError(
                f"dbConnectionBudget {self.db_connection_budget} gives a consumer maximum "
                f"concurrency of {self.consumer_max_concurrency}; an SQS event source allows "
                f"at most {MAX_ESM_CONCURRENCY}"
            )
        if self.inflight_factor < 1:
            raise SettingsError(f"inflightFactor must be at least 1, got {self.inflight_factor}")
        budget_high = RUNTIME_RANGES["inflightBudget"][1]
        if not self.inflight_budget and self.effective_inflight_budget > budget_high:
            raise SettingsError(
                f"the derived in-flight budget {self.effective_inflight_budget} (consumer "
                f"maximum concurrency {self.consumer_max_concurrency} x consumerBatchSize "
                f"{self.consumer_batch_size} x inflightFactor {self.inflight_factor}) exceeds "
                f"{budget_high}; lower inflightFactor or set inflightBudget"
            )
        if self.consumer_timeout_seconds < self.consumer_time_needed_seconds:
            raise SettingsError(
                f"consumerTimeoutSeconds must be at least {self.consumer_time_needed_seconds} "
                f"(a send's {self.consumer_send_seconds} s: sendTimeoutSeconds "
                f"{self.send_timeout_seconds}, at least {AWS_CHANNEL_SEND_SECONDS}; + "
                f"invocationMarginSeconds "
                f"{self.invocation_margin_seconds} + {self.consumer_settle_allowance_seconds} s "
                f"to record the outcomes: the proxy's {PROXY_BORROW_TIMEOUT_SECONDS} s borrow "
                f"timeout and dbStatementTimeoutMs {self.db_statement_timeout_ms}, at least "
                f"{CONSUMER_SETTLE_ALLOWANCE_SECONDS}), got {self.consumer_timeout_seconds}: a "
                "shorter "
                "invocation starts no send (every message comes back until it is "
                "dead-lettered) or times out before it records what it sent"
            )
        if self.publisher_fan_out:
            self._check_publisher_retries()
        scan_high = min(
            self.scanner_timeout_seconds // 2,
            SCHEDULE_PERIOD_SECONDS - SCANNER_TICK_MARGIN_SECONDS,
        )
        if scan_high < 1:
            raise SettingsError(
                f"scannerTimeoutSeconds must be at least 2, got {self.scanner_timeout_seconds}: "
                "a tick drains for at most half the scanner's remaining time"
            )
        if self.effective_scan_seconds > scan_high:
            raise SettingsError(
                f"scanSeconds must be between 1 and {scan_high}, got "
                f"{self.effective_scan_seconds}: a tick drains for at most half the scanner's "
                f"remaining time (scannerTimeoutSeconds {self.scanner_timeout_seconds}) and "
                f"must end {SCANNER_TICK_MARGIN_SECONDS} s before the next minute's tick"
            )

    @classmethod
    def from_node(cls, node: Node, environ: Mapping[str, str] | None = None) -> Settings:
        """Read every field from context under its camelCase name; the account and region
        fall back to the CDK CLI's ``CDK_DEFAULT_ACCOUNT``/``CDK_DEFAULT_REGION``."""
        values: dict[str, Any] = {}
        for field_name, (context_key, convert) in _CONTEXT_KEYS.items():
            raw = node.try_get_context(context_key)
            if raw is not None:
                values[field_name] = convert(context_key, raw)
        settings = cls(**values)
        env = os.environ if environ is None else environ
        settings = replace(
            settings,
            account=settings.account or env.get(DEFAULT_ACCOUNT_ENV, ""),
            region=settings.region or env.get(DEFAULT_REGION_ENV, ""),
        )
        return settings.validate()


_ROLE_ARN = re.compile(r"arn:aws(-[a-z]+)*:iam::\d{12}:role/[\w+=,.@/-]{1,512}")


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
