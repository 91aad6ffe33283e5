"""The faults of the alarm table (docs/operating.md), forced on the local pipeline on the
simulated clock: each promised alarm of the synthesized template fires within its stated time,
clears after recovery, and no other alarm that pages fires beside it; a deliberate tenant
pause fires none.

The alarms are the template's (the variant the local stack runs), evaluated every simulated
minute by :class:`reminders.local.twin.board.AlarmBoard` from what the real handlers emitted
(their metrics, their invocations, the queues sampled each minute). Every case keeps its
metric store, and the same checks run again on it with a copy of the template changed in one
value (a dimension, a threshold, a metric name, the evaluation periods): each then fails, so
a check here cannot pass with the wrong alarm.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from reminders import db, operator, schedules
from reminders.local import pipeline
from reminders.local.twin.alarms import ALARM, OK
from reminders.local.twin.board import (
    AlarmBoard,
    board_for,
    local_names,
    queue_prefix,
    short_name,
)
from reminders.local.twin.metrics import MetricStore
from reminders.local.twin.watch import AlarmWatch
from reminders.queue import LeaseMessage, Queue, Rejected
from tests.conftest import Harness
from tests.integration.pipeline_helpers import (
    delivery,
    register,
    schedule_webhook,
    start_attempt,
    take_messages,
)
from tests.twin_templates import logical_id, props, template_copy

MINUTE = timedelta(minutes=1)
WORK_SECONDS = 20.0


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


@pytest.fixture(scope="module")
def template() -> Any:
    return template_copy("self-publishing")


@dataclass
class World:
    """The local pipeline with its alarms: a round is one simulated minute."""

    h: Harness
    template: Any
    watch: AlarmWatch
    start: datetime
    timeline: dict[str, datetime] = field(default_factory=dict)

    @property
    def board(self) -> AlarmBoard:
        return self.watch.board

    def now(self) -> datetime:
        return self.h.clock.now()

    def round(self, *, scanner: bool = True, consumer: bool = True) -> None:
        if scanner:
            pipeline.tick(self.h.rt, observe=self.watch.invoked)
        if consumer:
            pipeline.work(self.h.rt, max_seconds=WORK_SECONDS, observe=self.watch.invoked)
        self.watch.minute()

    def minutes(self, n: int, **kw: bool) -> None:
        """``n`` rounds, each a minute after the one before."""
        for _ in range(n):
            self.h.clock.advance(MINUTE)
            self.round(**kw)

    def until(self, what: Callable[[], bool], bound: int, **kw: bool) -> datetime:
        """Rounds a minute apart until ``what`` holds (at most ``bound``); when it did."""
        for _ in range(bound):
            if what():
                return self.now()
            self.h.clock.advance(MINUTE)
            self.round(**kw)
        assert what(), f"not within {bound} simulated minutes"
        return self.now()

    def mark(self, name: str) -> datetime:
        self.timeline[name] = self.now()
        return self.now()


@pytest.fixture
def world(harness: Harness, template: Any) -> Iterator[World]:
    h = harness
    watch = AlarmWatch.for_local_queues(template, h.clock, endpoint_url=h.endpoint,
                                        sqs=h.sqs(), deliveries_url=h.rt.deliveries.url)
    h.rt.metrics = watch.metrics
    yield World(h, template, watch, h.clock.now())


# ---------------------------------------------------------------- the promises, checked


@dataclass(frozen=True)
class Promise:
    """An alarm fires between ``earliest`` and ``latest`` after the fault, and is OK again
    within ``clears`` of the recovery."""

    alarm: str
    fault: str            # the timeline's instant the delay counts from
    earliest: timedelta
    latest: timedelta
    recovery: str
    clears: timedelta


def check(board: AlarmBoard, timeline: dict[str, datetime], promises: list[Promise],
          others: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    """Each promise kept; and no alarm that pages fired but the promised ones and ``others``
    (alarms the same fault rightly provokes too)."""
    for p in promises:
        fault = timeline[p.fault]
        fired = board.first_fired(p.alarm, fault)
        assert fired is not None, f"{p.alarm} never fired after {p.fault}"
        delay = fired - fault
        assert p.earliest <= delay <= p.latest, (
            f"{p.alarm} fired {delay} after {p.fault}, promised within "
            f"[{p.earliest}, {p.latest}]")
        recovered = timeline[p.recovery]
        cleared = next((t.at for t in board.transitions(recovered)
                        if short_name(t.alarm) == p.alarm and t.new == OK), None)
        assert cleared is not None, f"{p.alarm} did not clear after {p.recovery}"
        assert cleared - recovered <= p.clears, (
            f"{p.alarm} cleared {cleared - recovered} after {p.recovery}, promised within "
            f"{p.clears}")
    fired_names = {short_name(t.alarm) for t in board.fired()}
    expected = {p.alarm for p in promises} | set(others)
    assert fired_names == expected, f"fired {sorted(fired_names)}, expected {sorted(expected)}"


def replay(world: World, template: Any) -> AlarmBoard:
    """The same run's metrics, evaluated minute by minute by ``template``'s alarms."""
    board = board_for(template, world.watch.store,
                      local_names(world.template, queue_prefix(world.h.rt.deliveries.url)))
    board.advance(world.start)
    board.advance(world.now())
    return board


def changed(template: Any, alarm: str, change: Callable[[dict[str, Any]], None]) -> Any:
    copy = template_copy("self-publishing")
    change(props(copy, f"Monitoring{alarm}"))
    return copy


def fails(world: World, template: Any, promises: list[Promise],
          others: set[str] = frozenset()) -> str:  # type: ignore[assignment]
    """The checks on this run, by ``template``'s alarms: they must fail; why."""
    with pytest.raises(AssertionError) as failed:
        check(replay(world, template), world.timeline, promises, others)
    return str(failed.value)


def queue_ref(template: Any, prefix: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [logical_id(template, prefix), "QueueName"]}


# ---------------------------------------------------------------- the cases


def test_a_consumer_outage_fires_deliveries_queue_age(world: World) -> None:
    schedule_webhook(world.h, "outage", recipients=["a", "b", "c"])
    world.mark("outage")
    world.round(consumer=False)
    world.minutes(15, consumer=False)
    assert world.board.state_of("DeliveriesQueueAge") == ALARM
    world.minutes(1)
    world.mark("back")
    assert delivery(world.h, _key(world, "a"))["state"] == "sent"
    world.minutes(6)
    promises = [Promise("DeliveriesQueueAge", "outage", minutes(11), minutes(13), "back",
                        minutes(4)),
                Promise("OldestOverdueDelivery", "outage", minutes(6), minutes(8), "back",
                        minutes(2))]
    check(world.board, world.timeline, promises)
    # Watching the dead-letter queue's age instead, the alarm never fires.
    wrong = changed(world.template, "DeliveriesQueueAge", lambda p: p["Dimensions"].__setitem__(
        0, {"Name": "QueueName", "Value": queue_ref(world.template, "QueuesDeadLetter")}))
    assert "DeliveriesQueueAge never fired" in fails(world, wrong, promises)
    # With a threshold of 5 minutes, it fires too early.
    early = changed(world.template, "DeliveriesQueueAge",
                    lambda p: p.__setitem__("Threshold", 300))
    assert "DeliveriesQueueAge fired 0:08:00 after outage" in fails(world, early, promises)


def _key(world: World, recipient: str) -> str:
    row = world.h.conn.execute("select delivery_key from deliveries where recipient = %s",
                               (recipient,)).fetchone()
    assert row is not None
    return str(row["delivery_key"])


def test_poison_messages_fire_dead_letter_arrivals_and_the_parked_ones_park(
        world: World) -> None:
    h = world.h
    h.sqs().send_message_batch(QueueUrl=h.rt.deliveries.url, Entries=[
        {"Id": str(i), "MessageBody": f"{{not json {i}"} for i in range(3)])
    world.mark("poison")
    world.round()  # the consumer fails them, SQS dead-letters them, redrive parks them
    parked = h.sqs().get_queue_attributes(QueueUrl=h.rt.parking.url, AttributeNames=[
        "ApproximateNumberOfMessages"])["Attributes"]["ApproximateNumberOfMessages"]
    assert parked == "3"
    world.minutes(11)
    # Three days later the parked messages are still there: old, as well as present.
    h.clock.advance(timedelta(days=3) - minutes(11))
    world.round()
    world.minutes(2)
    assert world.board.state_of("ParkingQueueAge") == ALARM
    take_messages(h, h.rt.parking.url)  # the operator dealt with them
    world.mark("parking emptied")
    world.minutes(3)
    promises = [
        Promise("DeadLetterArrivals", "poison", minutes(0), minutes(5), "poison", minutes(10)),
        Promise("ParkingQueueNotEmpty", "poison", minutes(0), minutes(2), "parking emptied",
                minutes(2)),
        Promise("ParkingQueueAge", "poison", timedelta(days=3), timedelta(days=3, minutes=2),
                "parking emptied", minutes(2)),
    ]
    # A scanner that did not run for three days is silent too: the gap is simulated.
    check(world.board, world.timeline, promises, others={"ScannerSilent"})
    wrong = changed(world.template, "DeadLetterArrivals", lambda p: p["Dimensions"].__setitem__(
        0, {"Name": "FunctionName", "Value": {"Ref": logical_id(world.template,
                                                                "FunctionsOpsRead")}}))
    assert "DeadLetterArrivals never fired" in fails(world, wrong, promises, {"ScannerSilent"})
    gone = changed(world.template, "ParkingQueueNotEmpty",
                   lambda p: p.__setitem__("MetricName", "ApproximateNumberOfMessagesDelayed"))
    assert "ParkingQueueNotEmpty never fired" in fails(world, gone, promises, {"ScannerSilent"})


def test_a_stopped_scanner_fires_scanner_silent(world: World) -> None:
    schedule_webhook(world.h, "silence", at=world.now() + minutes(3))
    world.round()
    world.minutes(3)
    world.mark("stopped")
    world.minutes(8, scanner=False)
    assert world.board.state_of("ScannerSilent") == ALARM
    world.minutes(1)
    world.mark("started")
    world.minutes(2)
    # The last invocation was in the minute before "stopped": five silent minutes complete
    # five minutes later, and the composite goes with its input.
    promises = [Promise("ScannerSilent", "stopped", minutes(5), minutes(6), "started",
                        minutes(1))]
    check(world.board, world.timeline, promises)
    slow = changed(world.template, "ScannerSilentInput", lambda p: p.update(
        {"EvaluationPeriods": 8, "DatapointsToAlarm": 8}))
    assert "ScannerSilent fired 0:09:00 after stopped" in fails(world, slow, promises)


def test_dead_deliveries_fire_deliveries_dead(world: World) -> None:
    h = world.h
    schedules.set_kind(h.conn, name="once", now=h.clock.now(), max_attempts=1)
    url = register(h, h.receiver.hook_url("broken", codes=[500]))
    keys = schedule_webhook(h, "dead", url=url, kind="once")
    world.round()
    assert delivery(h, keys[0])["state"] == "dead"
    world.mark("dead")
    world.minutes(11)
    promises = [Promise("DeliveriesDead", "dead", minutes(0), minutes(5), "dead", minutes(10))]
    check(world.board, world.timeline, promises)
    two = changed(world.template, "DeliveriesDead", lambda p: p.__setitem__("Threshold", 2))
    assert "DeliveriesDead never fired" in fails(world, two, promises)


def test_an_unknown_delivery_fires_deliveries_unknown(world: World) -> None:
    """An e-mail's send cut short by a crash (the attempt started, its outcome never
    recorded): SES cannot deduplicate, so the delivery is parked as unknown."""
    h = world.h
    result = schedules.schedule(h.conn, tenant="acme", recipients=["frank@example.com"],
                                channel="email", at=h.clock.now(), now=h.clock.now(),
                                key="unknown", payload={"subject": "s", "text": "t"})
    key = result.deliveries[0].delivery_key
    world.round(consumer=False)
    (message,) = take_messages(h)
    body = json.loads(message["Body"])
    assert start_attempt(h, body["delivery_id"], body["lease_token"]) is not None
    world.mark("crash")
    settled = world.until(lambda: delivery(h, key)["state"] == "unknown", 15)
    world.minutes(11)
    promises = [Promise("DeliveriesUnknown", "crash", minutes(0),
                        settled - world.timeline["crash"] + minutes(5), "crash", minutes(20))]
    check(world.board, world.timeline, promises)
    other = changed(world.template, "DeliveriesUnknown", lambda p: p["Dimensions"].__setitem__(
        0, {"Name": "service", "Value": "other"}))
    assert "DeliveriesUnknown never fired" in fails(world, other, promises)


@pytest.mark.refusals_expected
def test_a_refused_publish_fires_oldest_overdue_delivery(world: World) -> None:
    """SQS refuses the scanner's SendMessageBatch (AccessDenied: the scanner's sends go to a
    queue its role is not granted): each tick releases its leases, the deliveries stay due."""
    h = world.h
    keys = schedule_webhook(h, "refused", recipients=["a", "b"])
    scanner = h.rt.functions["scanner"]
    refused_url = h.rt.deliveries.url.rsplit("/", 1)[0] + "/not-the-deliveries-queue"
    h.rt.functions["scanner"] = dataclasses.replace(
        scanner, deliveries=SendsElsewhere(scanner.deliveries, refused_url))
    world.mark("refused")
    world.round()
    world.minutes(9)
    assert delivery(h, keys[0])["state"] == "scheduled"
    h.rt.functions["scanner"] = scanner
    world.minutes(1)
    world.mark("accepted")
    assert delivery(h, keys[0])["state"] == "sent"
    world.minutes(3)
    promises = [Promise("OldestOverdueDelivery", "refused", minutes(7), minutes(8),
                        "accepted", minutes(2))]
    check(world.board, world.timeline, promises)
    late = changed(world.template, "OldestOverdueDelivery",
                   lambda p: p.__setitem__("Threshold", 600))
    assert "OldestOverdueDelivery never fired" in fails(world, late, promises)


class SendsElsewhere(Queue):
    """The scanner's deliveries queue, whose sends go to ``url`` instead (its reads, the
    queue's depth, are the real queue's)."""

    def __init__(self, queue: Queue, url: str) -> None:
        super().__init__(queue.client, queue.url)
        self.elsewhere = Queue(queue.client, url)

    def publish(self, messages: Sequence[LeaseMessage], *,
                concurrency: int = 1) -> list[Rejected]:
        return self.elsewhere.publish(messages, concurrency=concurrency)


def test_a_paused_tenant_fires_no_alarm(world: World) -> None:
    h = world.h
    schedule_webhook(h, "paused", recipients=["a", "b"], tenant="quiet")
    operator.set_tenant_paused(h.conn, tenant="quiet", paused=True, now=h.clock.now(),
                               actor="test", via="cli", reason="maintenance", create=False)
    world.mark("paused")
    world.round()
    world.minutes(20)
    waiting = db.fetch_all(h.conn, "tenants_paused")
    assert [r["tenant"] for r in waiting] == ["quiet"]
    assert world.board.fired() == [], world.board.fired()
    assert world.board.in_alarm() == []
    # Had the overdue alarm watched the paused tenants' lateness, it would have fired.
    paused = changed(world.template, "OldestOverdueDelivery",
                     lambda p: p.__setitem__("MetricName", "PausedOldestOverdueSeconds"))
    board = replay(world, paused)
    assert [short_name(t.alarm) for t in board.fired()] == ["OldestOverdueDelivery"]


def test_the_board_names_the_alarms_and_jumps_quiet_minutes(template: Any) -> None:
    store = MetricStore()
    board = board_for(template, store, local_names(template, "x"))
    start = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
    board.advance(start)
    board.advance(start + timedelta(days=7))
    names = {s.name for s in board.states()}
    assert {"DeliveriesQueueAge", "ScannerSilent", "ScannerSilentInput"} <= names
    # Nothing fed: only the input that counts missing data as breaching is in ALARM.
    assert [s.name for s in board.in_alarm(inputs=True)] == ["ScannerSilentInput"]
    assert board.in_alarm() == []
