"""The publisher's asynchronous invokes on the twin, from the template with the fan-out: the
scanner's Invoke(InvocationType=Event) goes through the twin's Lambda Invoke endpoint (its
signature checked, and its role's grant of lambda:InvokeFunction on the publisher's ARN), and
Lambda's queue runs the event with the publisher's EventInvokeConfig on the injected clock.

With the template's values (MaximumRetryAttempts 2, a MaximumEventAgeInSeconds derived from
leaseSeconds: 500 s), a publisher that fails twice is tried a third time, three minutes after
the first, and delivers; one that fails three times is dropped, PublisherEventsDropped fires,
and the delivery goes out once its lease expires and the scanner reclaims it. A copy with the
120 s age the template once had shows why it changed: the third try's turn comes past the age,
so the event is dropped after two tries."""

from __future__ import annotations

import json
import re
import shutil
import time
import uuid
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from reminders import db
from reminders.clock import SharedClock
from reminders.local.twin.alarms import OK
from reminders.local.twin.assets import FunctionAssets, build_assets
from reminders.local.twin.async_invoke import AsyncEvent
from reminders.local.twin.run import Twin
from tests.aws_principals import secrets_key
from tests.conftest import T0, Harness
from tests.integration.pipeline_helpers import delivery, schedule_webhook
from tests.twin_templates import logical_id, props, template_copy


def shared_clock(twin: Twin) -> SharedClock:
    """The twin's clock, which these tests move: the SharedClock they gave it."""
    assert isinstance(twin.clock, SharedClock), twin.clock
    return twin.clock


# A publisher that fails its first TWIN_TEST_FAILURES runs, then is the real one; the counter
# file says how many runs there were.
FLAKY = '''"""A publisher that fails its first runs (the twin's asynchronous invoke tests)."""
import os

from functions.publisher.handler import handler as publisher


def handler(event, context):
    counter = os.environ["TWIN_TEST_COUNTER"]
    runs = int(open(counter).read()) if os.path.exists(counter) else 0
    with open(counter, "w") as written:
        written.write(str(runs + 1))
    if runs < int(os.environ["TWIN_TEST_FAILURES"]):
        raise RuntimeError(f"publisher run {runs + 1} fails on purpose")
    return publisher(event, context)
'''
MINUTE = timedelta(minutes=1)


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> FunctionAssets:
    built = build_assets()
    code = tmp_path_factory.mktemp("code") / "task"
    shutil.copytree(built.code, code)
    (code / "flaky_publisher.py").write_text(FLAKY)
    return replace(built, code=code)


def flaky(template: Any, counter: Path, failures: int) -> Any:
    publisher = props(template, "FunctionsPublisher")
    publisher["Handler"] = "flaky_publisher.handler"
    publisher["Environment"]["Variables"].update(
        {"TWIN_TEST_COUNTER": str(counter), "TWIN_TEST_FAILURES": str(failures)})
    return template


def invoke_config(template: Any) -> Any:
    return props(template, "FunctionsPublisherEventInvokeConfig")


def role_policy(template: Any, function: str) -> Any:
    """The policy document the template attaches to ``function``'s role (Scanner, ...)."""
    return props(template, f"Functions{function}RoleDefaultPolicy")["PolicyDocument"]


def make_twin(h: Harness, template: Any, assets: FunctionAssets, tmp_path: Path) -> Twin:
    root = tmp_path / f"twin-{uuid.uuid4().hex[:6]}"
    root.mkdir()
    return Twin(template, endpoint_url=h.endpoint, database_url=h.rt.settings.database_url,
                prefix=f"ta{uuid.uuid4().hex[:6]}", clock=SharedClock(T0, str(root / "clock")),
                log_dir=root / "logs", secrets_key_arn=secrets_key(h.endpoint), assets=assets,
                visibility_timeout_override=4, max_receive_count_override=2)


def runs(counter: Path) -> int:
    return int(counter.read_text()) if counter.exists() else 0


def held(h: Harness, key: str) -> bool:
    """Whether the delivery is held by a lease the scanner took (not yet started)."""
    row = delivery(h, key)
    return row["state"] == "scheduled" and row["pending_lease_token"] is not None


def only_event(twin: Twin) -> AsyncEvent:
    assert twin.async_events is not None
    (event,) = twin.async_events.events
    return event


def dropped_alarm(twin: Twin) -> str:
    """PublisherEventsDropped's state once the 5-minute period holding now has been
    evaluated: ALARM when it fired within it."""
    board = twin.alarm_board()
    board.advance(T0)
    board.advance(twin.clock.now() + 5 * MINUTE)
    fired = board.first_fired("PublisherEventsDropped")
    assert fired is None or fired <= twin.clock.now() + 5 * MINUTE
    return "OK" if fired is None else "ALARM"


def max_age(template: Any) -> int:
    return int(invoke_config(template)["MaximumEventAgeInSeconds"])


def test_the_template_retries_a_failing_publisher_twice_and_the_third_try_delivers(
        harness: Harness, assets: FunctionAssets, tmp_path: Path) -> None:
    counter = tmp_path / "runs"
    template = flaky(template_copy(), counter, failures=2)
    assert invoke_config(template)["MaximumRetryAttempts"] == 2
    assert max_age(template) >= 3 * MINUTE.total_seconds()
    with make_twin(harness, template, assets, tmp_path) as twin:
        (key,) = schedule_webhook(harness, "twin-async-2", at=T0)
        assert twin.tick()["published"] == 1  # handed to the publisher: 202
        event = only_event(twin)
        assert event.function == "publisher" and event.received == T0
        assert json.loads(event.payload)["messages"][0][0] == delivery(harness, key)["id"]
        shared_clock(twin).advance(MINUTE - timedelta(seconds=1))
        twin.run_async_events()
        assert runs(counter) == 1  # Lambda waits a minute before the second try
        shared_clock(twin).advance(timedelta(seconds=1))
        twin.run_async_events()
        assert runs(counter) == 2
        shared_clock(twin).advance(2 * MINUTE)  # the third try's turn: the event is 180 s old
        twin.run_async_events()
        work = twin.work(max_seconds=30)
        alarm = dropped_alarm(twin)
    assert [a.at for a in event.attempts] == [T0, T0 + MINUTE, T0 + 3 * MINUTE]
    assert event.outcome == "succeeded" and runs(counter) == 3
    assert work["consumer"]["records"] == 1
    assert delivery(harness, key)["state"] == "sent"
    assert harness.receiver.stats()["effects"] == {key: 1}
    assert alarm == "OK"


def test_a_publisher_failing_every_try_is_dropped_and_nothing_is_lost(
        harness: Harness, assets: FunctionAssets, tmp_path: Path) -> None:
    counter = tmp_path / "runs"
    template = flaky(template_copy(), counter, failures=3)
    lease = int(props(template, "FunctionsScanner")["Environment"]["Variables"][
        "REMINDERS_LEASE_SECONDS"])
    with make_twin(harness, template, assets, tmp_path) as twin:
        (key,) = schedule_webhook(harness, "twin-async-1", at=T0)
        assert twin.tick()["published"] == 1
        event = only_event(twin)
        shared_clock(twin).advance(MINUTE)
        twin.run_async_events()
        shared_clock(twin).advance(2 * MINUTE)
        assert twin.run_async_events() == [event]
        assert [a.at for a in event.attempts] == [T0, T0 + MINUTE, T0 + 3 * MINUTE]
        assert (event.outcome, event.reason) == ("dropped", "RetriesExhausted")
        assert runs(counter) == 3
        assert "RuntimeError: publisher run 3 fails on purpose" in str(event.attempts[-1].error)
        assert twin.work(max_seconds=10)["consumer"]["records"] == 0
        assert held(harness, key)  # by the lease the dropped chunk carried
        assert dropped_alarm(twin) == "ALARM"
        # The lease expires; a tick reclaims it and hands it to the publisher again.
        shared_clock(twin).set(T0 + timedelta(seconds=lease + 60))
        for _ in range(3):
            twin.tick()
            if runs(counter) == 4:
                break
            shared_clock(twin).advance(MINUTE)
        assert runs(counter) == 4
        assert twin.async_events is not None
        assert [e.outcome for e in twin.async_events.events] == ["dropped", "succeeded"]
        work = twin.work(max_seconds=30)
    assert work["consumer"]["records"] == 1
    assert delivery(harness, key)["state"] == "sent"
    assert harness.receiver.stats()["effects"] == {key: 1}


def test_the_old_120_s_age_in_a_template_copy_drops_the_third_try(
        harness: Harness, assets: FunctionAssets, tmp_path: Path) -> None:
    """2 retries with a 120 s age, as the template had: the third try's turn comes 180 s after
    the first, past the age, so a publisher failing twice gets no third try."""
    counter = tmp_path / "runs"
    template = flaky(template_copy(), counter, failures=2)
    invoke_config(template)["MaximumEventAgeInSeconds"] = 120
    with make_twin(harness, template, assets, tmp_path) as twin:
        (key,) = schedule_webhook(harness, "twin-async-7", at=T0)
        twin.tick()
        shared_clock(twin).advance(MINUTE)
        twin.run_async_events()
        shared_clock(twin).advance(2 * MINUTE)
        twin.run_async_events()
        event = only_event(twin)
        alarm = dropped_alarm(twin)
    assert [a.at for a in event.attempts] == [T0, T0 + MINUTE]
    assert (event.outcome, event.reason) == ("dropped", "EventAgeExceeded")
    assert runs(counter) == 2
    assert held(harness, key)  # until its lease expires
    assert alarm == "ALARM"


def test_no_retries_in_a_template_copy_drops_the_event_after_its_first_failure(
        harness: Harness, assets: FunctionAssets, tmp_path: Path) -> None:
    counter = tmp_path / "runs"
    template = flaky(template_copy(), counter, failures=1)
    invoke_config(template)["MaximumRetryAttempts"] = 0
    with make_twin(harness, template, assets, tmp_path) as twin:
        (key,) = schedule_webhook(harness, "twin-async-3", at=T0)
        twin.tick()
        for _ in range(3):
            shared_clock(twin).advance(MINUTE)
            twin.run_async_events()
        event = only_event(twin)
        alarm = dropped_alarm(twin)
    assert (event.outcome, event.reason) == ("dropped", "RetriesExhausted")
    assert runs(counter) == 1 and len(event.attempts) == 1
    assert held(harness, key)  # until its lease expires
    assert alarm == "ALARM"


def test_an_event_older_than_its_maximum_age_is_dropped_unrun_and_the_alarm_fires(
        harness: Harness, assets: FunctionAssets, tmp_path: Path) -> None:
    counter = tmp_path / "runs"
    template = flaky(template_copy(), counter, failures=0)
    with make_twin(harness, template, assets, tmp_path) as twin:
        assert twin.async_events is not None
        twin.async_events.paused = True  # Lambda's queue backed up
        schedule_webhook(harness, "twin-async-4", at=T0)
        twin.tick()
        shared_clock(twin).advance(timedelta(seconds=max_age(template) + 1))
        twin.async_events.paused = False
        ended = twin.run_async_events()
        alarm = dropped_alarm(twin)
        instances = twin.pools["publisher"].instances
    assert [(e.outcome, e.reason, e.attempts) for e in ended] == [
        ("dropped", "EventAgeExceeded", [])]
    assert runs(counter) == 0 and instances == 0  # the publisher never started
    assert alarm == "ALARM"


def fired(twin: Twin, alarm: str) -> Any:
    """When ``alarm`` first fired, the 5-minute period holding now evaluated too; None: never."""
    board = twin.alarm_board()
    board.advance(T0)
    board.advance(twin.clock.now() + 5 * MINUTE)
    return board.first_fired(alarm)


def lift_refusal(twin: Twin) -> None:
    """The scanner's role granted the publisher's ARN again, as an operator mends the policy:
    the policy document the twin's Invoke endpoint authorizes the scanner's session by (the
    role's, read when the twin started) with the grant's Resource the publisher's ARN."""
    assert twin.invoke_endpoint is not None
    endpoint = twin.invoke_endpoint
    (caller,) = [c for c in endpoint.callers.values() if "scanner" in c.arn]
    document = json.loads(json.dumps(caller.policy))
    (grant,) = [s for s in document["Statement"] if s.get("Sid") == "InvokePublisher"]
    grant["Resource"] = endpoint.function_arn(twin.specs["publisher"].deployed_name())
    endpoint.add_caller(replace(caller, policy=document))


def test_a_scanner_role_not_granted_the_publishers_arn_is_refused_and_releases_its_lease(
        harness: Harness, assets: FunctionAssets, tmp_path: Path) -> None:
    """The Invoke refused (AccessDenied): the lease goes back, and PublisherNotInvoked fires
    within 5 minutes (the scanner's count of the deliveries it handed back, summed over the
    5-minute period holding the refusal), as the alarm table (docs/operating.md) says. The
    grant mended, the next tick's Invoke is taken, the delivery goes out, and the alarm is OK
    again after a 5-minute period with none (the end of the one after the refused tick's):
    within 10 minutes of the last refused tick, as the table says."""
    template = template_copy()
    policy = role_policy(template, "Scanner")
    (grant,) = [s for s in policy["Statement"] if s.get("Sid") == "InvokePublisher"]
    publisher = logical_id(template, "FunctionsPublisher")
    grant["Resource"] = {"Fn::Join": ["", [{"Fn::GetAtt": [publisher, "Arn"]}, "-old"]]}
    with make_twin(harness, template, assets, tmp_path) as twin:
        (key,) = schedule_webhook(harness, "twin-async-5", at=T0)
        tick = twin.tick()
        assert twin.invoke_endpoint is not None and twin.async_events is not None
        refusals = list(twin.invoke_endpoint.refusals)
        events = list(twin.async_events.events)
        refused_at = fired(twin, "PublisherNotInvoked")
        board = twin.alarm_board()
        board.advance(T0)
        board.advance(T0 + 5 * MINUTE)
        released = not held(harness, key), delivery(harness, key)["state"]
        # The recovery: the grant mended a minute on, a tick each minute after it.
        recovery = twin.alarm_board()
        recovery.advance(T0)
        shared_clock(twin).advance(MINUTE)
        lift_refusal(twin)
        mended = twin.clock.now()
        after: list[dict[str, Any]] = []
        for _ in range(10):
            after.append(twin.tick())
            twin.work(max_seconds=30)
            recovery.advance(twin.clock.now())
            shared_clock(twin).advance(MINUTE)
        recovery.advance(twin.clock.now())
        refused_after = list(twin.invoke_endpoint.refusals)[len(refusals):]
    assert tick["published"] == 0, tick
    assert tick["not_invoked"] == 1, tick
    assert events == []
    (refused,) = refusals
    assert refused["code"] == "AccessDeniedException"
    assert "lambda:InvokeFunction on resource: arn:aws:lambda:" in refused["message"]
    assert released == (True, "scheduled")  # released, due again
    assert refused_at is not None, "PublisherNotInvoked never fired"
    assert T0 <= refused_at <= T0 + 5 * MINUTE, refused_at
    # The refusal pages with that alarm alone: Lambda dropped nothing, nothing raised.
    assert {t.alarm for t in board.fired()} == {
        logical_id(template, "MonitoringPublisherNotInvoked")}, board.fired()
    # Mended: the first tick's Invoke is taken, the delivery goes out once, and the alarm
    # that fired clears within 10 minutes of the last refused tick (and fires no more).
    assert refused_after == []
    assert (after[0]["published"], after[0]["not_invoked"]) == (1, 0), after[0]
    assert delivery(harness, key)["state"] == "sent"
    assert harness.receiver.stats()["effects"] == {key: 1}
    assert recovery.first_fired("PublisherNotInvoked") == refused_at
    cleared = next((t.at for t in recovery.transitions(mended)
                    if t.alarm == logical_id(template, "MonitoringPublisherNotInvoked")
                    and t.new == OK), None)
    assert cleared is not None, "PublisherNotInvoked did not clear after the grant was mended"
    assert mended < cleared <= T0 + 10 * MINUTE, (mended, cleared)
    assert recovery.first_fired("PublisherNotInvoked", cleared) is None
    assert recovery.in_alarm() == [], recovery.in_alarm()


def test_a_healthy_run_of_the_fan_out_fires_no_alarm(
        harness: Harness, assets: FunctionAssets, tmp_path: Path) -> None:
    """Granted, the same tick's Invoke is taken (202) and the delivery goes out; a tick each
    minute for six minutes, and no alarm of the template fires (PublisherNotInvoked
    included)."""
    template = flaky(template_copy(), tmp_path / "runs", failures=0)
    with make_twin(harness, template, assets, tmp_path) as twin:
        (key,) = schedule_webhook(harness, "twin-async-8", at=T0)
        tick = twin.tick()
        twin.work(max_seconds=30)
        for _ in range(6):
            shared_clock(twin).advance(MINUTE)
            twin.tick()
        board = twin.alarm_board()
        board.advance(T0)
        board.advance(twin.clock.now())
        refusals = list(twin.invoke_endpoint.refusals) if twin.invoke_endpoint else None
    assert (tick["published"], tick["not_invoked"]) == (1, 0), tick
    assert refusals == []
    assert delivery(harness, key)["state"] == "sent"
    assert harness.receiver.stats()["effects"] == {key: 1}
    assert board.fired() == [], board.fired()
    assert board.in_alarm() == []


def receive_all(sqs: Any, url: str) -> list[Any]:
    found: list[Any] = []
    for _ in range(10):
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not got:
            break
        found += got
    return found


def test_the_consoles_redrive_of_parking_sends_messages_back_and_redrive_rechecks_each(
        harness: Harness, assets: FunctionAssets, tmp_path: Path) -> None:
    """Two messages reach the parking queue as SQS puts them there (the dead-letter queue's
    maxReceiveCount spent): one for a delivery since sent, one whose lease the scanner took
    and no consumer ever started. The operator's console redrive (StartMessageMoveTask from
    parking, no DestinationArn) puts them back on the dead-letter queue; the redrive function
    re-checks each against its row: it drops the sent one, replays the other, which the next
    tick delivers - each once."""
    from reminders.local import stack
    from reminders.queue import LeaseMessage

    template = flaky(template_copy(), tmp_path / "runs", failures=0)
    sqs = stack.aws_client("sqs", harness.endpoint)
    with make_twin(harness, template, assets, tmp_path) as twin:
        urls = twin.require_urls()
        (sent_key,) = schedule_webhook(harness, "twin-console-1", at=T0)
        twin.tick()
        twin.work(max_seconds=30)
        assert delivery(harness, sent_key)["state"] == "sent"
        (held_key,) = schedule_webhook(harness, "twin-console-2", at=T0 + MINUTE)
        shared_clock(twin).advance(MINUTE)
        twin.tick()
        (stolen,) = receive_all(sqs, urls.deliveries)  # no consumer will see it
        sqs.delete_message(QueueUrl=urls.deliveries, ReceiptHandle=stolen["ReceiptHandle"])
        sent_id = delivery(harness, sent_key)["id"]
        bodies = {LeaseMessage(sent_id, uuid.uuid4()).body(), stolen["Body"]}
        for body in bodies:
            sqs.send_message(QueueUrl=urls.dlq, MessageBody=body)
        dlq = twin.queues[logical_id(template, "QueuesDeadLetter")]
        parking = twin.queues[logical_id(template, "QueuesParking")]
        for _ in range(12):  # past the DLQ's maxReceiveCount: SQS moves them to parking
            for message in receive_all(sqs, urls.dlq):
                sqs.change_message_visibility(QueueUrl=urls.dlq, VisibilityTimeout=0,
                                              ReceiptHandle=message["ReceiptHandle"])
        parked = sqs.get_queue_attributes(QueueUrl=urls.parking, AttributeNames=[
            "ApproximateNumberOfMessages"])["Attributes"]["ApproximateNumberOfMessages"]
        assert parked == "2"
        sqs.start_message_move_task(SourceArn=parking.arn)  # the console's "redrive"
        for _ in range(100):
            (task,) = sqs.list_message_move_tasks(SourceArn=parking.arn)["Results"]
            if task["Status"] != "RUNNING":
                break
            time.sleep(0.05)
        assert (task["Status"], task["ApproximateNumberOfMessagesMoved"]) == ("COMPLETED", 2)
        assert "DestinationArn" not in task  # back to their source: the dead-letter queue
        assert dlq.url == urls.dlq
        work = twin.work(max_seconds=30)
        assert work["redrive"]["records"] == 2, work
        sent_events = db.fetch_all(harness.conn, "events_of_delivery",
                                   {"id": sent_id, "tenant": "acme"})
        held = delivery(harness, held_key)
        held_events = db.fetch_all(harness.conn, "events_of_delivery",
                                   {"id": held["id"], "tenant": "acme"})
        shared_clock(twin).advance(MINUTE)
        twin.tick()
        twin.work(max_seconds=30)
    assert any(e["actor"] == "redrive" and e["event"] == "dropped"
               and "already sent" in e["detail"] for e in sent_events)
    assert any(e["actor"] == "redrive" and e["event"] == "replayed" for e in held_events)
    assert delivery(harness, sent_key)["state"] == "sent"
    assert delivery(harness, held_key)["state"] == "sent"
    assert harness.receiver.stats()["effects"] == {sent_key: 1, held_key: 1}


def test_an_on_failure_destination_in_a_template_copy_gets_lambdas_invocation_record(
        harness: Harness, assets: FunctionAssets, tmp_path: Path) -> None:
    """A copy whose publisher configuration names the dead-letter queue as its OnFailure
    destination (and grants the publisher's role sqs:SendMessage on it): the dropped event's
    invocation record arrives there, sent as the publisher's role."""
    from reminders.local import stack

    counter = tmp_path / "runs"
    template = flaky(template_copy(), counter, failures=1)
    dlq = logical_id(template, "QueuesDeadLetter")
    config = invoke_config(template)
    config["MaximumRetryAttempts"] = 0
    config["DestinationConfig"] = {"OnFailure": {"Destination": {"Fn::GetAtt": [dlq, "Arn"]}}}
    policy = role_policy(template, "Publisher")
    policy["Statement"].append({"Sid": "FailedChunks", "Effect": "Allow",
                                "Action": "sqs:SendMessage",
                                "Resource": {"Fn::GetAtt": [dlq, "Arn"]}})
    sqs = stack.aws_client("sqs", harness.endpoint)
    with make_twin(harness, template, assets, tmp_path) as twin:
        schedule_webhook(harness, "twin-async-6", at=T0)
        twin.tick()
        event = only_event(twin)
        (got,) = sqs.receive_message(QueueUrl=twin.require_urls().dlq)["Messages"]
    assert (event.outcome, event.reason, event.destination) == (
        "dropped", "RetriesExhausted", "sent")
    record = json.loads(got["Body"])
    assert record["requestContext"]["condition"] == "RetriesExhausted"
    assert record["requestContext"]["requestId"] == event.request_id
    assert record["requestContext"]["functionArn"].endswith(
        f":function:Reminders-{logical_id(template, 'FunctionsPublisher')}:$LATEST")
    assert record["requestPayload"] == json.loads(event.payload)
    assert record["responseContext"]["functionError"] == "Unhandled"
    assert record["responsePayload"]["errorType"] == "RuntimeError"


RUNBOOK_STEP = re.compile(r"^4\. On the parking queue, (.+?)(?=^\d\. )", re.S | re.M)


def runbook_destination(readme: str, arns: dict[str, str]) -> dict[str, str]:
    """StartMessageMoveTask's arguments beside SourceArn, as step 4 of the console redrive
    runbook (docs/operating.md) says: its choice after *Start DLQ redrive*, and for a custom
    destination the queue it names in bold (``arns``: by the queue's name in the runbook)."""
    match = RUNBOOK_STEP.search(readme)
    assert match is not None, "docs/operating.md: no step 4 'On the parking queue' in the runbook"
    step = " ".join(match.group(1).split())
    choice = re.search(r"choose \*Start DLQ redrive\*,? (?:and|then) \*([^*]+)\*", step)
    assert choice is not None, f"docs/operating.md step 4 names no redrive choice: {step}"
    if choice.group(1) == "Redrive to source queue(s)":
        return {}
    assert "custom destination" in choice.group(1), choice.group(1)
    named = re.search(r"\*\*(.+?)\*\*", step)
    assert named is not None, f"docs/operating.md step 4 names no destination: {step}"
    return {"DestinationArn": arns[named.group(1)]}


def test_the_runbooks_console_redrive_of_parking_rechecks_each_parked_delivery(
        harness: Harness, assets: FunctionAssets, tmp_path: Path) -> None:
    """The parking queue holds what SQS moved there (the dead-letter queue's maxReceiveCount
    spent: a delivery since sent, one whose lease no consumer took) and what the redrive
    function parked itself (sent there: a body it cannot read, a delivery id it cannot find).
    The operator follows the runbook's step (docs/operating.md) as written: the move task goes
    where it says. Every message is moved, the redrive function re-checks each before any
    replay, and each delivery is sent at most once."""
    from reminders.local import stack
    from reminders.queue import LeaseMessage

    readme = (Path(__file__).resolve().parents[2] / "docs" / "operating.md").read_text(
        encoding="utf-8")
    template = flaky(template_copy(), tmp_path / "runs", failures=0)
    sqs = stack.aws_client("sqs", harness.endpoint)
    with make_twin(harness, template, assets, tmp_path) as twin:
        urls = twin.require_urls()
        dlq = twin.queues[logical_id(template, "QueuesDeadLetter")]
        parking = twin.queues[logical_id(template, "QueuesParking")]
        deliveries = twin.queues[logical_id(template, "QueuesDeliveries")]
        (sent_key,) = schedule_webhook(harness, "twin-runbook-1", at=T0)
        twin.tick()
        twin.work(max_seconds=30)
        assert delivery(harness, sent_key)["state"] == "sent"
        (held_key,) = schedule_webhook(harness, "twin-runbook-2", at=T0 + MINUTE)
        shared_clock(twin).advance(MINUTE)
        twin.tick()
        (stolen,) = receive_all(sqs, urls.deliveries)  # no consumer will see it
        sqs.delete_message(QueueUrl=urls.deliveries, ReceiptHandle=stolen["ReceiptHandle"])
        sent_id = delivery(harness, sent_key)["id"]
        for body in (LeaseMessage(sent_id, uuid.uuid4()).body(), stolen["Body"]):
            sqs.send_message(QueueUrl=urls.dlq, MessageBody=body)
        for _ in range(12):  # past the DLQ's maxReceiveCount: SQS moves them to parking
            for message in receive_all(sqs, urls.dlq):
                sqs.change_message_visibility(QueueUrl=urls.dlq, VisibilityTimeout=0,
                                              ReceiptHandle=message["ReceiptHandle"])
        # What the redrive function parks itself: it sends these to the parking queue.
        unknown_id = sent_id + 1_000_000
        for body in ("{not json", LeaseMessage(unknown_id, uuid.uuid4()).body()):
            sqs.send_message(QueueUrl=urls.dlq, MessageBody=body)
        assert twin.work(max_seconds=30)["redrive"]["records"] == 2
        parked = sqs.get_queue_attributes(QueueUrl=urls.parking, AttributeNames=[
            "ApproximateNumberOfMessages"])["Attributes"]["ApproximateNumberOfMessages"]
        assert parked == "4"

        destination = runbook_destination(readme, {
            "dead-letter queue's ARN": dlq.arn, "deliveries queue's ARN": deliveries.arn})
        sqs.start_message_move_task(SourceArn=parking.arn, **destination)
        for _ in range(200):
            (task,) = sqs.list_message_move_tasks(SourceArn=parking.arn)["Results"]
            if task["Status"] != "RUNNING":
                break
            time.sleep(0.05)
        assert (task["Status"], task.get("FailureReason")) == ("COMPLETED", None), task
        assert task["ApproximateNumberOfMessagesMoved"] == 4
        assert task["DestinationArn"] == dlq.arn
        work = twin.work(max_seconds=30)
        # Each re-checked; one whose batch outlived the twin's 4 s visibility is received
        # again (at least once), and re-checked again.
        assert work["redrive"]["records"] >= 4, work
        sent_events = db.fetch_all(harness.conn, "events_of_delivery",
                                   {"id": sent_id, "tenant": "acme"})
        held_events = db.fetch_all(harness.conn, "events_of_delivery",
                                   {"id": delivery(harness, held_key)["id"], "tenant": "acme"})
        # The two it cannot settle are parked again, with their reasons, for an operator.
        again = sqs.receive_message(QueueUrl=urls.parking, MaxNumberOfMessages=10,
                                    MessageAttributeNames=["All"]).get("Messages", [])
        shared_clock(twin).advance(MINUTE)
        twin.tick()
        twin.work(max_seconds=30)
    assert {e["event"] for e in sent_events if e["actor"] == "redrive"} == {"dropped"}
    assert "replayed" in {e["event"] for e in held_events if e["actor"] == "redrive"}
    reasons = sorted(m["MessageAttributes"]["reason"]["StringValue"].split(":")[0]
                     for m in again)
    assert reasons == [f"unknown delivery id {unknown_id}", "unparseable"], reasons
    assert delivery(harness, sent_key)["state"] == "sent"
    assert delivery(harness, held_key)["state"] == "sent"
    assert harness.receiver.stats()["effects"] == {sent_key: 1, held_key: 1}
