"""The deliveries queue, its dead-letter queue and the parking queue operators redrive from."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.settings import Settings

# The longest SQS allows: a DLQ must outlive the messages it receives.
MAX_RETENTION = Duration.days(14)


def _queue(
    scope: Construct,
    construct_id: str,
    *,
    retention: Duration,
    visibility_timeout: Duration | None = None,
    dead_letter_queue: sqs.DeadLetterQueue | None = None,
) -> sqs.Queue:
    """A queue with SQS-managed encryption that refuses requests without TLS."""
    return sqs.Queue(
        scope,
        construct_id,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        retention_period=retention,
        visibility_timeout=visibility_timeout,
        dead_letter_queue=dead_letter_queue,
    )


class Queues(Construct):
    """Transport only: messages carry a delivery id and a lease token, never content.

    deliveries ──(maxReceiveCount)──▶ dead-letter ──(redrive function)──▶ parking

    The parking queue is also the dead-letter queue's own dead-letter queue: a message the
    redrive function keeps failing on lands there too. Being a DLQ of the dead-letter queue is
    what lets operators move parked messages back with the console's "Start DLQ redrive", to a
    custom destination: the dead-letter queue's ARN, so the redrive function checks them again
    (not "to source queue": what the redrive function parked itself was sent there, and SQS
    knows no source queue for it; README, "Dead-letter queue runbook").
    """

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings) -> None:
        super().__init__(scope, construct_id)
        self.parking = _queue(self, "Parking", retention=MAX_RETENTION)
        self.dead_letter = _queue(
            self,
            "DeadLetter",
            retention=MAX_RETENTION,
            visibility_timeout=Duration.seconds(6 * settings.redrive_timeout_seconds),
            # Twice the source's count: a moved message may keep its receive count, and the
            # redrive function must still get its own tries before anything is parked.
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.parking, max_receive_count=2 * settings.max_receive_count
            ),
        )
        self.deliveries = _queue(
            self,
            "Deliveries",
            retention=Duration.days(settings.deliveries_retention_days),
            visibility_timeout=Duration.seconds(settings.deliveries_visibility_seconds),
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.dead_letter, max_receive_count=settings.max_receive_count
            ),
        )
