"""The twin's Lambda Invoke endpoint refuses what Lambda refuses (signature, key, grant,
payload, function), and its queue of asynchronous events retries and ages them as Lambda does,
on an injected clock."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from reminders.local.twin.async_invoke import (
    AsyncConfig,
    AsyncEvents,
    Caller,
    InvokeEndpoint,
    RunResult,
    Served,
)

REGION, ACCOUNT = "us-east-1", "123456789012"
NAME = "Reminders-FunctionsPublisherC0BEF0A6"
ARN = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{NAME}"
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def grant(resource: str, effect: str = "Allow") -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": [
        {"Effect": effect, "Action": "lambda:InvokeFunction", "Resource": resource}]}


class Clock:
    def __init__(self) -> None:
        self.at = T0

    def now(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


class Runs:
    """The function: fails its first ``failures`` runs, then succeeds."""

    def __init__(self, clock: Clock, failures: int = 0, throttles: int = 0) -> None:
        self.clock, self.failures, self.throttles = clock, failures, throttles
        self.at: list[datetime] = []

    def __call__(self, name: str, payload: bytes) -> RunResult:
        if self.throttles:
            self.throttles -= 1
            return RunResult("no instance free", throttled=True)
        self.at.append(self.clock.now())
        if len(self.at) <= self.failures:
            return RunResult("PublishIncomplete: refused", response=b'{"errorType": "X"}')
        return RunResult(None, response=b'{"published": 1}')


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def endpoint(clock: Clock) -> Iterator[InvokeEndpoint]:
    events = AsyncEvents(Runs(clock), {"publisher": AsyncConfig()}, clock.now)
    served = InvokeEndpoint({NAME: Served("publisher", NAME)}, events, region=REGION,
                            account=ACCOUNT)
    served.add_caller(Caller("AKIASCANNER", "scanner-secret", "scanner-token",
                             f"arn:aws:sts::{ACCOUNT}:assumed-role/scanner/scanner",
                             grant(ARN)))
    served.add_caller(Caller("AKIACONSUMER", "consumer-secret", "consumer-token",
                             f"arn:aws:sts::{ACCOUNT}:assumed-role/consumer/consumer",
                             grant(f"{ARN}-other")))
    yield served
    served.close()


def client(endpoint: InvokeEndpoint, key: str = "AKIASCANNER", secret: str = "scanner-secret",
           token: str | None = "scanner-token", region: str = REGION) -> Any:
    return boto3.client("lambda", region_name=region, endpoint_url=endpoint.url,
                        aws_access_key_id=key, aws_secret_access_key=secret,
                        aws_session_token=token,
                        config=Config(retries={"max_attempts": 1}))


def refusal(call: Any) -> tuple[int, str, str]:
    with pytest.raises(ClientError) as refused:
        call()
    error = refused.value.response["Error"]
    return (refused.value.response["ResponseMetadata"]["HTTPStatusCode"], error["Code"],
            error.get("Message", ""))


def test_a_signed_event_invoke_granted_by_the_role_is_queued_with_202(
        endpoint: InvokeEndpoint) -> None:
    answer = client(endpoint).invoke(FunctionName=NAME, InvocationType="Event",
                                     Payload=b'{"version": 1, "messages": []}')
    assert answer["StatusCode"] == 202
    (event,) = endpoint.events.pending()
    assert event.function == "publisher" and event.received == T0
    assert json.loads(event.payload) == {"version": 1, "messages": []}
    assert event.request_id == answer["ResponseMetadata"]["HTTPHeaders"]["x-amzn-requestid"]
    by_arn = client(endpoint).invoke(FunctionName=ARN, InvocationType="Event", Payload=b"{}")
    assert by_arn["StatusCode"] == 202
    dry = client(endpoint).invoke(FunctionName=NAME, InvocationType="DryRun", Payload=b"{}")
    assert dry["StatusCode"] == 204 and len(endpoint.events.pending()) == 2


def test_what_lambda_refuses_is_refused_with_its_code_and_nothing_is_queued(
        endpoint: InvokeEndpoint) -> None:
    def invoke(lambda_client: Any, name: str = NAME, payload: bytes = b"{}",
               kind: str = "Event") -> Any:
        return lambda: lambda_client.invoke(FunctionName=name, InvocationType=kind,
                                            Payload=payload)

    good = client(endpoint)
    assert refusal(invoke(client(endpoint, secret="wrong")))[:2] == (
        403, "InvalidSignatureException")
    assert refusal(invoke(client(endpoint, key="AKIANOBODY")))[:2] == (
        403, "UnrecognizedClientException")
    assert refusal(invoke(client(endpoint, token="another-session")))[:2] == (
        403, "UnrecognizedClientException")
    assert refusal(invoke(client(endpoint, region="eu-west-1")))[:2] == (
        403, "InvalidSignatureException")
    status, code, message = refusal(invoke(client(endpoint, "AKIACONSUMER", "consumer-secret",
                                                  "consumer-token")))
    assert (status, code) == (403, "AccessDeniedException")
    assert message == (f"User: arn:aws:sts::{ACCOUNT}:assumed-role/consumer/consumer is not "
                       f"authorized to perform: lambda:InvokeFunction on resource: {ARN} "
                       "because no identity-based policy allows the lambda:InvokeFunction "
                       "action")
    assert refusal(invoke(good, name="Reminders-Nothing"))[:2] == (
        404, "ResourceNotFoundException")
    assert refusal(invoke(good, name=f"arn:aws:lambda:{REGION}:999999999999:function:{NAME}")
                   )[:2] == (404, "ResourceNotFoundException")
    assert refusal(invoke(good, payload=b"not json"))[:2] == (
        400, "InvalidRequestContentException")
    big = json.dumps({"pad": "x" * (256 * 1024)}).encode()
    assert refusal(invoke(good, payload=big))[:2] == (413, "RequestEntityTooLargeException")
    assert endpoint.events.pending() == []
    assert len(endpoint.refusals) == 9


def test_an_explicit_deny_beats_the_grant(endpoint: InvokeEndpoint) -> None:
    endpoint.add_caller(Caller("AKIADENIED", "s", "t", "arn:aws:sts::1:assumed-role/d/d", {
        "Version": "2012-10-17", "Statement": [*grant(ARN)["Statement"],
                                               *grant("*", "Deny")["Statement"]]}))
    _, code, message = refusal(lambda: client(endpoint, "AKIADENIED", "s", "t").invoke(
        FunctionName=NAME, InvocationType="Event", Payload=b"{}"))
    assert code == "AccessDeniedException" and "explicit deny" in message


def queue(clock: Clock, runs: Runs, **config: Any) -> AsyncEvents:
    sent: list[tuple[str, dict[str, Any]]] = []
    events = AsyncEvents(runs, {"publisher": AsyncConfig(**config)}, clock.now,
                         send_failure=lambda e, url, record: sent.append((url, record)))
    events.sent = sent  # type: ignore[attr-defined]
    return events


def test_a_function_error_is_retried_after_one_then_two_minutes(clock: Clock) -> None:
    runs = Runs(clock, failures=2)
    events = queue(clock, runs, maximum_retry_attempts=2, maximum_event_age=300)
    event = events.accept("publisher", b"{}")
    assert events.run_due() == [] and runs.at == [T0]
    clock.advance(59)
    assert events.run_due() == [] and len(runs.at) == 1  # not before its minute
    clock.advance(1)
    events.run_due()
    assert runs.at == [T0, T0 + timedelta(minutes=1)]
    clock.advance(119)
    events.run_due()
    assert len(runs.at) == 2
    clock.advance(1)
    assert events.run_due() == [event]
    assert runs.at[-1] == T0 + timedelta(minutes=3)
    assert event.outcome == "succeeded" and event.function_errors == 2


def test_the_third_try_is_dropped_when_it_would_come_after_the_maximum_event_age(
        clock: Clock) -> None:
    runs = Runs(clock, failures=2)
    events = queue(clock, runs, maximum_retry_attempts=2, maximum_event_age=120,
                   on_failure="http://queue/failures")
    event = events.accept("publisher", b'{"version": 1}')
    for _ in range(4):
        events.run_due()
        clock.advance(60)
    assert runs.at == [T0, T0 + timedelta(minutes=1)]
    assert (event.outcome, event.reason, event.destination) == (
        "dropped", "EventAgeExceeded", "sent")
    ((url, record),) = events.sent  # type: ignore[attr-defined]
    assert url == "http://queue/failures"
    assert record["requestContext"]["condition"] == "EventAgeExceeded"
    assert record["requestContext"]["approximateInvokeCount"] == 2
    assert record["requestPayload"] == {"version": 1}


def test_no_retries_drops_the_event_after_its_first_error(clock: Clock) -> None:
    runs = Runs(clock, failures=1)
    events = queue(clock, runs, maximum_retry_attempts=0, maximum_event_age=21_600)
    event = events.accept("publisher", b"{}")
    events.run_due()
    clock.advance(3600)
    events.run_due()
    assert runs.at == [T0]
    assert (event.outcome, event.reason) == ("dropped", "RetriesExhausted")


def test_an_event_older_than_its_maximum_age_is_dropped_unrun(clock: Clock) -> None:
    runs = Runs(clock)
    events = queue(clock, runs, maximum_event_age=60)
    event = events.accept("publisher", b"{}")
    events.paused = True  # Lambda's queue is backed up
    clock.advance(61)
    assert events.run_due() == []
    events.paused = False
    assert events.run_due() == [event]
    assert runs.at == [] and (event.outcome, event.reason) == ("dropped", "EventAgeExceeded")


def test_a_throttled_attempt_backs_off_without_spending_a_retry(clock: Clock) -> None:
    runs = Runs(clock, throttles=3)
    events = queue(clock, runs, maximum_retry_attempts=0)
    event = events.accept("publisher", b"{}")
    waits = []
    for _ in range(4):
        events.run_due()
        waits.append((event.next_at - clock.now()).total_seconds())
        clock.at = event.next_at
    assert waits[:3] == [1, 2, 4]
    assert event.outcome == "succeeded" and runs.at == [T0 + timedelta(seconds=7)]
