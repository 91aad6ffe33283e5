"""The template's queues in moto: every AWS::SQS::Queue with exactly the template's
attributes, and prepare_aws (the local stack's and the tests' queues) made from it."""

from __future__ import annotations

import json
import time
from typing import Any

from reminders import config
from reminders.local import stack
from reminders.local.twin import metrics, resources
from tests.twin_templates import logical_id, template_copy

STATED = ("VisibilityTimeout", "MessageRetentionPeriod", "MaximumMessageSize",
          "ReceiveMessageWaitTimeSeconds", "DelaySeconds", "SqsManagedSseEnabled",
          "KmsMasterKeyId")


def attributes(sqs: Any, url: str) -> dict[str, str]:
    found: dict[str, str] = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])[
        "Attributes"]
    return found


def test_every_queue_gets_the_templates_attributes(moto_endpoint: str) -> None:
    template = template_copy()
    sqs = stack.aws_client("sqs", moto_endpoint)
    made = resources.create_queues(resources.read_plan(template), sqs, f"twin{time.time_ns()}")
    queues = {k: r["Properties"] for k, r in template["Resources"].items()
              if r["Type"] == "AWS::SQS::Queue"}
    assert set(made) == set(queues)
    for queue_id, given in queues.items():
        got = attributes(sqs, made[queue_id].url)
        for name in STATED:
            if name in given:
                assert got[name] == str(given[name]).lower() if isinstance(given[name], bool) \
                    else got[name] == str(given[name]), (queue_id, name, got.get(name))
        if "RedrivePolicy" in given:
            policy = json.loads(got["RedrivePolicy"])
            target = given["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
            assert policy == {"deadLetterTargetArn": made[target].arn,
                              "maxReceiveCount": given["RedrivePolicy"]["maxReceiveCount"]}
        else:
            assert "RedrivePolicy" not in got


def test_prepare_aws_makes_every_template_queue_with_only_the_named_overrides(
        queue_urls: config.QueueUrls, moto_endpoint: str) -> None:
    """The tests' queues (conftest: visibility_timeout_override=1,
    max_receive_count_override=2) are the template's: its retention and encryption, its
    dead-letter chain with the counts scaled (the DLQ keeps twice the source's), and the
    schedule's invocation dead-letter queue too."""
    template = template_copy("self-publishing")
    sqs = stack.aws_client("sqs", moto_endpoint)
    prefix = queue_urls.deliveries.rsplit("/", 1)[1].removesuffix("-deliveries")
    main, dlq, parking = (attributes(sqs, u) for u in
                          (queue_urls.deliveries, queue_urls.dlq, queue_urls.parking))
    given = {name: template["Resources"][logical_id(template, prefix_)]["Properties"]
             for name, prefix_ in (("main", "QueuesDeliveries"), ("dlq", "QueuesDeadLetter"),
                                   ("parking", "QueuesParking"))}
    assert main["VisibilityTimeout"] == dlq["VisibilityTimeout"] == "1"
    assert main["MessageRetentionPeriod"] == str(given["main"]["MessageRetentionPeriod"])
    assert parking["MessageRetentionPeriod"] == str(given["parking"]["MessageRetentionPeriod"])
    assert main["SqsManagedSseEnabled"] == dlq["SqsManagedSseEnabled"] == "true"
    assert json.loads(main["RedrivePolicy"]) == {"deadLetterTargetArn": dlq["QueueArn"],
                                                 "maxReceiveCount": 2}
    assert json.loads(dlq["RedrivePolicy"]) == {"deadLetterTargetArn": parking["QueueArn"],
                                                "maxReceiveCount": 4}
    schedule_dlq = sqs.get_queue_url(QueueName=f"{prefix}-schedule-invocation-dead-letter")
    assert attributes(sqs, schedule_dlq["QueueUrl"])["MessageRetentionPeriod"] == str(
        template["Resources"][logical_id(template, "ScheduleInvocationDeadLetter")][
            "Properties"]["MessageRetentionPeriod"])


def test_sqs_metrics_are_sampled_from_moto(queue_urls: config.QueueUrls,
                                           moto_endpoint: str) -> None:
    from datetime import UTC, datetime

    sqs = stack.aws_client("sqs", moto_endpoint)
    name = queue_urls.deliveries.rsplit("/", 1)[1]
    empty = queue_urls.parking.rsplit("/", 1)[1]
    sqs.send_message(QueueUrl=queue_urls.deliveries, MessageBody="{}")
    sqs.send_message(QueueUrl=queue_urls.deliveries, MessageBody="{}")
    time.sleep(1.2)
    store = metrics.MetricStore()
    at = datetime(2026, 3, 2, 9, 0, 5, tzinfo=UTC)
    metrics.sample_queues(store, sqs, {name: queue_urls.deliveries, empty: queue_urls.parking},
                          at, oldest=metrics.oldest_sent(moto_endpoint),
                          now_ms=int(time.time() * 1000))
    window = (at, datetime(2026, 3, 2, 9, 1, tzinfo=UTC))

    def value(metric: str, queue: str) -> list[float]:
        return store.values(metrics.MetricKey.of("AWS/SQS", metric, {"QueueName": queue}),
                            *window)

    assert value("ApproximateNumberOfMessagesVisible", name) == [2]
    (age,) = value("ApproximateAgeOfOldestMessage", name)
    assert 1.2 <= age < 30
    assert value("ApproximateAgeOfOldestMessage", empty) == [0]
    assert value("ApproximateNumberOfMessagesVisible", empty) == [0]
