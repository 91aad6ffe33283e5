"""SQS's message move tasks (the console's dead-letter queue redrive) in the local moto server:
what SQS refuses is refused, one task a source at a time, messages go back to the queue that
dead-lettered them (or to a DestinationArn) with their bodies and attributes and a fresh
receive count, and the caller's grants on the source and the destination are checked."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError

from reminders.aws_http import Credentials
from reminders.local import stack

REASON = {"reason": {"DataType": "String", "StringValue": "unparseable: not JSON"}}


def sqs(endpoint: str, credentials: Credentials | None = None) -> Any:
    return stack.aws_client("sqs", endpoint, credentials=credentials)


def make_queue(client: Any, name: str, **attributes: Any) -> tuple[str, str]:
    url = client.create_queue(QueueName=name, Attributes={
        k: v if isinstance(v, str) else json.dumps(v) for k, v in attributes.items()})[
        "QueueUrl"]
    arn = client.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
        "Attributes"]["QueueArn"]
    return url, arn


def pair(client: Any, *, allow: Any = None, count: int = 1) -> dict[str, str]:
    """A source queue and its dead-letter queue (``allow``: the latter's RedriveAllowPolicy)."""
    tag = uuid.uuid4().hex[:8]
    dlq_url, dlq_arn = make_queue(client, f"mv-{tag}-dlq",
                                  **({"RedriveAllowPolicy": allow} if allow else {}))
    url, arn = make_queue(client, f"mv-{tag}-src", VisibilityTimeout="0", RedrivePolicy={
        "deadLetterTargetArn": dlq_arn, "maxReceiveCount": count})
    return {"url": url, "arn": arn, "dlq_url": dlq_url, "dlq_arn": dlq_arn}


def dead_letter(client: Any, queues: dict[str, str], body: str, count: int = 1) -> None:
    """Send ``body`` to the source and receive it until SQS moves it to the dead-letter
    queue (past maxReceiveCount, on the next receive)."""
    client.send_message(QueueUrl=queues["url"], MessageBody=body, MessageAttributes=REASON)
    for _ in range(count + 1):
        client.receive_message(QueueUrl=queues["url"], MaxNumberOfMessages=10)
    assert depth(client, queues["dlq_url"]) >= 1


def depth(client: Any, url: str) -> int:
    return int(client.get_queue_attributes(QueueUrl=url, AttributeNames=[
        "ApproximateNumberOfMessages"])["Attributes"]["ApproximateNumberOfMessages"])


def settled(client: Any, source_arn: str, seconds: float = 10) -> dict[str, Any]:
    """The source's latest task once it is no longer RUNNING (bounded wait)."""
    deadline = time.monotonic() + seconds
    while True:
        (task,) = client.list_message_move_tasks(SourceArn=source_arn)["Results"]
        if task["Status"] not in ("RUNNING", "CANCELLING") or time.monotonic() > deadline:
            return dict(task)
        time.sleep(0.05)


def refused(call: Callable[[], Any]) -> tuple[str, str]:
    with pytest.raises(ClientError) as failed:
        call()
    error = failed.value.response["Error"]
    return str(error["Code"]), str(error.get("Message", ""))


def test_a_redrive_to_source_moves_bodies_and_attributes_with_a_fresh_receive_count(
        moto_endpoint: str) -> None:
    client = sqs(moto_endpoint)
    queues = pair(client)
    for n in range(3):
        dead_letter(client, queues, f'{{"n": {n}}}')
    handle = client.start_message_move_task(SourceArn=queues["dlq_arn"])["TaskHandle"]
    assert handle
    task = settled(client, queues["dlq_arn"])
    assert task["Status"] == "COMPLETED"
    assert task["ApproximateNumberOfMessagesMoved"] == 3
    assert task["ApproximateNumberOfMessagesToMove"] == 3
    assert "TaskHandle" not in task and "DestinationArn" not in task
    assert depth(client, queues["dlq_url"]) == 0
    got = client.receive_message(QueueUrl=queues["url"], MaxNumberOfMessages=10,
                                 AttributeNames=["ApproximateReceiveCount"],
                                 MessageAttributeNames=["All"])["Messages"]
    assert sorted(m["Body"] for m in got) == ['{"n": 0}', '{"n": 1}', '{"n": 2}']
    assert {m["Attributes"]["ApproximateReceiveCount"] for m in got} == {"1"}
    assert all(m["MessageAttributes"]["reason"]["StringValue"] == "unparseable: not JSON"
               for m in got)


def test_what_sqs_refuses_is_refused(moto_endpoint: str) -> None:
    client = sqs(moto_endpoint)
    queues = pair(client)
    lone_url, lone_arn = make_queue(client, f"mv-{uuid.uuid4().hex[:8]}-lone")
    fifo_url, fifo_arn = make_queue(client, f"mv-{uuid.uuid4().hex[:8]}.fifo", FifoQueue="true")
    region, account = stack.REGION, queues["arn"].split(":")[4]
    missing = f"arn:aws:sqs:{region}:{account}:mv-nothing-here"

    def start(**kwargs: Any) -> Callable[[], Any]:
        return lambda: client.start_message_move_task(**kwargs)

    assert refused(start(SourceArn=lone_arn)) == (
        "InvalidParameterValue", "Source queue must be configured as a Dead Letter Queue.")
    assert refused(start(SourceArn=missing))[0] == "ResourceNotFoundException"
    assert refused(start(SourceArn="not-an-arn"))[0] == "InvalidParameterValue"
    assert refused(start(SourceArn=queues["dlq_arn"], DestinationArn=missing))[0] == \
        "ResourceNotFoundException"
    assert refused(start(SourceArn=queues["dlq_arn"], DestinationArn=fifo_arn))[0] == \
        "InvalidParameterValue"
    assert refused(start(SourceArn=queues["dlq_arn"], DestinationArn=queues["dlq_arn"]))[0] \
        == "InvalidParameterValue"
    for rate in (0, 501):
        assert refused(start(SourceArn=queues["dlq_arn"], MaxNumberOfMessagesPerSecond=rate)
                       )[0] == "InvalidParameterValue"
    assert refused(lambda: client.list_message_move_tasks(SourceArn=queues["dlq_arn"],
                                                          MaxResults=11))[0] == \
        "InvalidParameterValue"
    assert refused(lambda: client.cancel_message_move_task(TaskHandle="bm90IGEgaGFuZGxl"))[0] \
        == "ResourceNotFoundException"
    assert client.list_message_move_tasks(SourceArn=queues["dlq_arn"])["Results"] == []
    del lone_url, fifo_url


def test_a_redrive_allow_policy_that_denies_the_source_makes_it_no_dead_letter_queue(
        moto_endpoint: str) -> None:
    client = sqs(moto_endpoint)
    denied = pair(client, allow={"redrivePermission": "denyAll"})
    assert refused(lambda: client.start_message_move_task(SourceArn=denied["dlq_arn"]))[0] == \
        "InvalidParameterValue"
    other = pair(client)
    listed = pair(client, allow={"redrivePermission": "byQueue",
                                 "sourceQueueArns": [other["arn"]]})
    assert refused(lambda: client.start_message_move_task(SourceArn=listed["dlq_arn"]))[0] == \
        "InvalidParameterValue"
    allowed = pair(client, allow={"redrivePermission": "byQueue"})
    client.set_queue_attributes(QueueUrl=allowed["dlq_url"], Attributes={
        "RedriveAllowPolicy": json.dumps({"redrivePermission": "byQueue",
                                          "sourceQueueArns": [allowed["arn"]]})})
    assert client.start_message_move_task(SourceArn=allowed["dlq_arn"])["TaskHandle"]


def test_one_task_a_source_at_a_time_and_a_cancelled_one_stops(moto_endpoint: str) -> None:
    client = sqs(moto_endpoint)
    queues = pair(client)
    for n in range(5):
        dead_letter(client, queues, f"slow-{n}")
    handle = client.start_message_move_task(SourceArn=queues["dlq_arn"],
                                            MaxNumberOfMessagesPerSecond=1)["TaskHandle"]
    (running,) = client.list_message_move_tasks(SourceArn=queues["dlq_arn"])["Results"]
    assert running["Status"] == "RUNNING" and running["TaskHandle"] == handle
    assert running["MaxNumberOfMessagesPerSecond"] == 1
    assert refused(lambda: client.start_message_move_task(SourceArn=queues["dlq_arn"])) == (
        "InvalidParameterValue", "There is already a task running. Only one active task is "
        "allowed for a source queue arn at a given time.")
    moved = client.cancel_message_move_task(TaskHandle=handle)[
        "ApproximateNumberOfMessagesMoved"]
    task = settled(client, queues["dlq_arn"])
    assert task["Status"] == "CANCELLED" and moved < 5
    assert task["ApproximateNumberOfMessagesMoved"] < 5
    assert depth(client, queues["dlq_url"]) + depth(client, queues["url"]) == 5
    assert refused(lambda: client.cancel_message_move_task(TaskHandle=handle))[0] == \
        "InvalidParameterValue"
    client.start_message_move_task(SourceArn=queues["dlq_arn"])  # the next one may start
    assert settled(client, queues["dlq_arn"])["Status"] == "COMPLETED"
    tasks = client.list_message_move_tasks(SourceArn=queues["dlq_arn"], MaxResults=10)[
        "Results"]
    assert [t["Status"] for t in tasks] == ["COMPLETED", "CANCELLED"]
    assert depth(client, queues["url"]) == 5


def test_a_message_sent_to_the_dead_letter_queue_has_no_source_to_go_back_to(
        moto_endpoint: str) -> None:
    client = sqs(moto_endpoint)
    queues = pair(client)
    client.send_message(QueueUrl=queues["dlq_url"], MessageBody="parked by a function",
                        MessageAttributes=REASON)
    client.start_message_move_task(SourceArn=queues["dlq_arn"])
    failed = settled(client, queues["dlq_arn"])
    assert failed["Status"] == "FAILED"
    assert "give a DestinationArn" in failed["FailureReason"]
    assert depth(client, queues["dlq_url"]) == 1  # nothing lost
    client.start_message_move_task(SourceArn=queues["dlq_arn"], DestinationArn=queues["arn"])
    done = settled(client, queues["dlq_arn"])
    assert (done["Status"], done["DestinationArn"]) == ("COMPLETED", queues["arn"])
    (got,) = client.receive_message(QueueUrl=queues["url"], MessageAttributeNames=["All"])[
        "Messages"]
    assert got["Body"] == "parked by a function"
    assert got["MessageAttributes"]["reason"]["StringValue"] == "unparseable: not JSON"


@pytest.mark.refusals_expected
def test_the_callers_grants_on_the_source_and_the_destination_are_checked(
        moto_endpoint: str) -> None:
    admin = sqs(moto_endpoint)
    queues = pair(admin)
    iam = stack.aws_client("iam", moto_endpoint)
    name = f"mover-{uuid.uuid4().hex[:8]}"
    iam.create_user(UserName=name)
    key = iam.create_access_key(UserName=name)["AccessKey"]
    mover = sqs(moto_endpoint, Credentials(key["AccessKeyId"], key["SecretAccessKey"]))

    def grant(*statements: tuple[list[str], str]) -> None:
        iam.put_user_policy(UserName=name, PolicyName="move", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Action": actions, "Resource": resource}
                for actions, resource in statements]}))

    def start() -> Any:
        return mover.start_message_move_task(SourceArn=queues["dlq_arn"],
                                             DestinationArn=queues["arn"])

    source_reads = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"]
    grant((["sqs:ListMessageMoveTasks"], queues["dlq_arn"]))
    seen = stack.decision_count(moto_endpoint)
    assert refused(start)[0] in ("AccessDenied", "AccessDeniedException")
    grant((["sqs:StartMessageMoveTask"], queues["dlq_arn"]))
    assert refused(start)[0] in ("AccessDenied", "AccessDeniedException")  # no reads
    grant((["sqs:StartMessageMoveTask", *source_reads], queues["dlq_arn"]))
    assert refused(start)[0] in ("AccessDenied", "AccessDeniedException")  # no send
    grant((["sqs:StartMessageMoveTask", *source_reads], queues["dlq_arn"]),
          (["sqs:SendMessage"], queues["arn"]))
    assert start()["TaskHandle"]
    assert refused(lambda: mover.list_message_move_tasks(SourceArn=queues["dlq_arn"]))[0] in (
        "AccessDenied", "AccessDeniedException")
    denied = [(d["action"], d["resource"].rsplit(":", 1)[1]) for d in
              stack.decisions(moto_endpoint, since=seen)
              if d["key"] == key["AccessKeyId"] and d["outcome"] != "allowed"]
    dlq, src = queues["dlq_arn"].rsplit(":", 1)[1], queues["arn"].rsplit(":", 1)[1]
    assert denied == [("sqs:StartMessageMoveTask", dlq), ("sqs:ReceiveMessage", dlq),
                      ("sqs:SendMessage", src), ("sqs:ListMessageMoveTasks", dlq)]
