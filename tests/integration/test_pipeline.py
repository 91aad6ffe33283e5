"""The delivery pipeline end to end on the real embedded Postgres, moto's SQS over HTTP and a
real webhook receiver: leases, fencing, budgets, retries, re-checks, DLQ and redrive."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import pytest

from reminders import batch, consumer, db, scanner, schedules
from reminders.clock import iso
from reminders.endpoints import signing_secrets
from reminders.local import pipeline
from reminders.queue import LeaseMessage
from tests.aws_principals import function_roles
from tests.conftest import Harness, make_runtime
from tests.integration.pipeline_helpers import (
    at_most_one_effect_per_key,
    attempts,
    bodies,
    delivery,
    due_entry,
    effects,
    event_for,
    events,
    minutes,
    ok_answers,
    pending_lease,
    register,
    run_minutes,
    schedule_webhook,
    start_attempt,
    take_messages,
    tick,
    work,
)


def test_on_time_delivery_is_sent_once_with_its_key(harness: Harness) -> None:
    h = harness
    (key,) = schedule_webhook(h, "inv-1", at=h.clock.now() + minutes(5),
                              payload={"text": "Balance due in 13 days"})
    assert tick(h)["leased"] == 0  # not due yet
    h.clock.advance(minutes(5))
    assert tick(h)["published"] == 1
    work(h)
    assert delivery(h, key)["state"] == "sent"
    assert effects(h) == {key: 1}
    (payload,) = h.receiver.payloads(key)[key]
    assert payload["delivery_key"] == key and payload["payload"] == {
        "text": "Balance due in 13 days"}


# ---------------------------------------------------------------- leases


def test_two_scanners_racing_never_lease_one_delivery_twice(harness: Harness,
                                                            database_url: str) -> None:
    h = harness
    url = register(h, h.receiver.hook_url("race"))
    people = [f"p{i}" for i in range(120)]
    schedules.schedule(h.conn, tenant="acme", recipients=people, channel="webhook", to=url,
                       at=h.clock.now(), now=h.clock.now(), key="race")
    runtimes = [make_runtime(database_url, _urls(h), h.endpoint, h.clock, scan_batch=25)
                for _ in range(2)]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def scan(rt: Any) -> None:
        try:
            barrier.wait()
            for _ in range(4):
                scanner.tick(rt)
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=scan, args=(rt,)) for rt in runtimes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    published = bodies(take_messages(h, n=500))
    ids = [b["delivery_id"] for b in published]
    assert len(ids) == len(set(ids)) == 120
    for rt in runtimes:
        rt.close()


def test_lease_statement_skips_rows_another_transaction_holds(harness: Harness,
                                                              database_url: str) -> None:
    h = harness
    url = register(h, h.receiver.hook_url("skip"))
    schedules.schedule(h.conn, tenant="acme", recipients=["a", "b", "c", "d"], channel="webhook",
                       to=url, at=h.clock.now(), now=h.clock.now(), key="skip")
    params = {"now": h.clock.now(), "batch": 2, "share": 2, "lease_seconds": 60}
    with db.connect(database_url) as other, db.transaction(other):
        first = db.fetch_all(other, "lease_due", params)  # holds its two rows, uncommitted
        with db.transaction(h.conn):
            second = db.fetch_all(h.conn, "lease_due", params)
    assert len(first) == len(second) == 2
    assert not {r["id"] for r in first} & {r["id"] for r in second}


def test_killed_consumer_lease_expires_and_is_taken_over_exactly_once(harness: Harness) -> None:
    h = harness
    (key,) = schedule_webhook(h, "k", at=h.clock.now())
    tick(h)
    (lost,) = take_messages(h)  # the consumer died holding this message: no attempt started
    first_token = json.loads(lost["Body"])["lease_token"]
    h.clock.advance(timedelta(seconds=h.rt.settings.limits.lease_seconds + 1))
    out = tick(h)
    assert out["reclaimed"] == {"scheduled": 1} and out["published"] == 1
    lease = pending_lease(h, key)
    assert lease is not None and str(lease["token"]) != first_token
    h.rt.deliveries.send_raw(lost["Body"], {})  # the lost message turns up late after all
    work(h)
    assert delivery(h, key)["state"] == "sent"
    assert len(attempts(h, key)) == 1
    assert effects(h) == {key: 1} and ok_answers(h) == {key: 1}
    assert any(e["event"] == "message ignored" for e in events(h, key))


@pytest.mark.resends_allowed
def test_send_then_crash_on_a_keyed_channel_is_resent_with_the_same_key(harness: Harness) -> None:
    h = harness
    (key,) = schedule_webhook(h, "crash", at=h.clock.now())
    tick(h)
    (msg,) = take_messages(h)
    lease = LeaseMessage(int(json.loads(msg["Body"])["delivery_id"]),
                         _uuid(json.loads(msg["Body"])["lease_token"]))
    row = batch.load_rows(h.conn, [lease.delivery_id])[lease.delivery_id]
    # Start the attempt and send, then "crash" before recording the outcome.
    attempt = start_attempt(h, lease.delivery_id, lease.lease_token)
    assert attempt is not None
    from reminders.channels.base import Message

    h.rt.channels["webhook"].send(Message(
        delivery_key=key, tenant="acme", kind="default", recipient="alice",
        destination=row["destination"], payload={}, revision="1",
        occurrence_at=row["occurrence_at"], attempt=1,
        secrets=signing_secrets(row, h.clock.now(), h.rt.secret_box)),
        h.clock.now())
    h.clock.advance(timedelta(seconds=h.rt.settings.limits.lease_seconds + 1))
    assert tick(h)["reclaimed"] == {"retrying": 1}
    work(h)
    assert delivery(h, key)["state"] == "sent"
    outcomes = [a["outcome"] for a in attempts(h, key)]
    assert outcomes == ["unknown", "sent"]
    # The receiver saw the key twice but honoured it: one effect.
    assert effects(h) == {key: 1} and ok_answers(h) == {key: 2}


def test_send_then_crash_on_a_channel_without_keys_is_parked_unknown(harness: Harness) -> None:
    h = harness
    result = schedules.schedule(h.conn, tenant="acme", recipients=["frank@example.com"],
                                channel="email", at=h.clock.now(), now=h.clock.now(), key="em")
    key = result.deliveries[0].delivery_key
    tick(h)
    (msg,) = take_messages(h)
    body = json.loads(msg["Body"])
    assert start_attempt(h, body["delivery_id"], body["lease_token"]) is not None
    h.clock.advance(timedelta(seconds=h.rt.settings.limits.lease_seconds + 1))
    assert tick(h)["reclaimed"] == {"unknown": 1}
    row = delivery(h, key)
    assert row["state"] == "unknown" and "cannot deduplicate" in row["reason"]
    assert [a["outcome"] for a in attempts(h, key)] == ["unknown"]
    h.clock.advance(minutes(10))
    assert tick(h)["leased"] == 0  # never blindly resent


def test_stale_lease_holder_write_is_refused(harness: Harness) -> None:
    h = harness
    (key,) = schedule_webhook(h, "fence", at=h.clock.now())
    tick(h)
    (old,) = take_messages(h)
    old_token = json.loads(old["Body"])["lease_token"]
    h.clock.advance(timedelta(seconds=h.rt.settings.limits.lease_seconds + 1))
    tick(h)  # taken over with a new token, pending
    row = delivery(h, key)
    lease = pending_lease(h, key)
    assert lease is not None and str(lease["token"]) != old_token
    assert not consumer.settle(h.conn, row, old_token, "sent", "stale holder", None,
                               h.clock.now())
    assert start_attempt(h, row["id"], old_token) is None  # takes nothing, starts nothing
    after = delivery(h, key)
    assert after["state"] == "scheduled" and pending_lease(h, key) == lease
    assert attempts(h, key) == []
    assert start_attempt(h, row["id"], lease["token"]) is not None  # the current holder can


def test_paused_consumer_does_not_grow_the_queue_past_the_budget(harness: Harness,
                                                                 database_url: str) -> None:
    h = harness
    rt = make_runtime(database_url, _urls(h), h.endpoint, h.clock, scan_batch=3,
                      inflight_budget=5, lease_seconds=60)
    h.rt.close()
    h.rt = rt
    url = register(h, h.receiver.hook_url("paused"))
    people = [f"p{i}" for i in range(12)]
    schedules.schedule(h.conn, tenant="acme", recipients=people, channel="webhook", to=url,
                       at=h.clock.now(), now=h.clock.now(), key="paused")
    depths = []
    for _ in range(8):  # nobody consumes; leases keep expiring
        tick(h)
        depths.append(rt.deliveries.depth())
        h.clock.advance(timedelta(seconds=61))
    assert max(depths) == 5, depths
    for _ in range(12):  # the consumer comes back
        tick(h)
        work(h)
        h.clock.advance(timedelta(seconds=61))
    rows = h.conn.execute("select state, count(*) as n from deliveries group by state").fetchall()
    assert rows == [{"state": "sent", "n": 12}]
    assert len(effects(h)) == 12
    at_most_one_effect_per_key(h)


# ---------------------------------------------------------------- receivers' answers


def test_429_with_retry_after_waits_that_long(harness: Harness) -> None:
    h = harness
    url = register(h, h.receiver.hook_url("busy", codes=[429, 200], retry_after=120))
    (key,) = schedule_webhook(h, "busy", url=url)
    t0 = h.clock.now()
    tick(h)
    work(h)
    row = delivery(h, key)
    assert row["state"] == "retrying"
    assert row["due_at"] == t0 + timedelta(seconds=120)
    h.clock.advance(timedelta(seconds=119))
    assert tick(h)["leased"] == 0
    h.clock.advance(timedelta(seconds=1))
    tick(h)
    work(h)
    assert delivery(h, key)["state"] == "sent"
    assert [a["status_code"] for a in attempts(h, key)] == [429, 200]
    assert effects(h) == {key: 1}


def test_429_without_retry_after_backs_off_with_jitter(harness: Harness) -> None:
    h = harness
    url = register(h, h.receiver.hook_url("busy2", codes=[429, 200]))
    (key,) = schedule_webhook(h, "busy2", url=url)
    t0 = h.clock.now()
    tick(h)
    work(h)
    row = delivery(h, key)
    assert row["state"] == "retrying"
    assert t0 + timedelta(seconds=1) <= row["due_at"] <= t0 + timedelta(seconds=30)
    h.clock.set(row["due_at"])
    tick(h)
    work(h)
    assert delivery(h, key)["state"] == "sent"
    assert effects(h) == {key: 1}


def test_500_then_success(harness: Harness) -> None:
    h = harness
    url = register(h, h.receiver.hook_url("flaky", codes=[500, 200]))
    (key,) = schedule_webhook(h, "flaky", url=url)
    run_minutes(h, 2)
    assert delivery(h, key)["state"] == "sent"
    assert [a["outcome"] for a in attempts(h, key)] == ["transient", "sent"]
    assert effects(h) == {key: 1}


def test_permanent_rejection_is_not_retried(harness: Harness) -> None:
    h = harness
    url = register(h, h.receiver.hook_url("gone", codes=[410]))
    (key,) = schedule_webhook(h, "gone", url=url)
    run_minutes(h, 3)
    row = delivery(h, key)
    assert row["state"] == "failed" and "410" in row["reason"]
    assert len(attempts(h, key)) == 1
    assert effects(h) == {}


def test_retry_budget_spent_is_dead(harness: Harness) -> None:
    h = harness
    schedules.set_kind(h.conn, name="twice", now=h.clock.now(), max_attempts=2,
                       backoff_base=timedelta(seconds=5), backoff_cap=timedelta(seconds=5))
    url = register(h, h.receiver.hook_url("down", codes=[503]))
    (key,) = schedule_webhook(h, "down", url=url, kind="twice")
    run_minutes(h, 3)
    row = delivery(h, key)
    assert row["state"] == "dead" and "2 of 2" in row["reason"]


def test_retry_past_the_staleness_deadline_is_parked_stale(harness: Harness) -> None:
    h = harness
    schedules.set_kind(h.conn, name="trip", now=h.clock.now(), stale_after=timedelta(minutes=1))
    url = register(h, h.receiver.hook_url("slow", codes=[429, 200], retry_after=600))
    (key,) = schedule_webhook(h, "trip", url=url, kind="trip")
    tick(h)
    work(h)
    row = delivery(h, key)
    assert row["state"] == "stale" and "staleness deadline" in row["reason"]


# ---------------------------------------------------------------- current state decides


def test_cancelled_delivery_is_not_sent_by_its_old_message(harness: Harness) -> None:
    h = harness
    (key,) = schedule_webhook(h, "c1")
    tick(h)  # its message is on the queue
    schedules.cancel(h.conn, tenant="acme", key="c1", now=h.clock.now())
    work(h)
    row = delivery(h, key)
    assert (row["state"], row["reason"]) == ("suppressed", "cancelled")
    assert effects(h) == {} and attempts(h, key) == []


def test_opted_out_delivery_is_not_sent_by_its_old_message(harness: Harness) -> None:
    h = harness
    (key,) = schedule_webhook(h, "o1")
    tick(h)
    schedules.opt_out(h.conn, tenant="acme", recipient="alice", channel="webhook",
                      now=h.clock.now())
    work(h)
    row = delivery(h, key)
    assert (row["state"], row["reason"]) == ("suppressed", "opted out of webhook")
    assert effects(h) == {}


def test_rescheduled_delivery_goes_out_once_at_its_new_time(harness: Harness) -> None:
    h = harness
    (old_key,) = schedule_webhook(h, "r1")
    tick(h)
    new_at = h.clock.now() + minutes(30)
    result = schedules.reschedule(h.conn, tenant="acme", key="r1", at=new_at, revision="2",
                                  now=h.clock.now())
    (new_key,) = [d.delivery_key for d in result.deliveries]
    assert new_key != old_key
    work(h)  # the old message arrives: nothing is sent
    assert delivery(h, old_key)["state"] == "suppressed"
    assert effects(h) == {}
    h.clock.advance(minutes(29))
    tick(h)
    work(h)
    assert effects(h) == {}
    h.clock.advance(minutes(1))
    tick(h)
    work(h)
    assert delivery(h, new_key)["state"] == "sent"
    assert effects(h) == {new_key: 1}
    (payload,) = h.receiver.payloads(new_key)[new_key]
    assert payload["revision"] == "2"


def test_revision_moved_on_while_in_flight_sends_the_new_revision_once(harness: Harness) -> None:
    h = harness
    (old_key,) = schedule_webhook(h, "rev")
    tick(h)
    schedules.reschedule(h.conn, tenant="acme", key="rev", revision="itinerary-2",
                         now=h.clock.now())
    work(h)
    tick(h)
    work(h)
    sent = [k for k, n in effects(h).items() if n]
    assert len(sent) == 1 and sent[0] != old_key
    (payload,) = h.receiver.payloads(sent[0])[sent[0]]
    assert payload["revision"] == "itinerary-2"


# ---------------------------------------------------------------- DLQ and redrive


def _to_dlq(h: Harness) -> dict[str, Any]:
    """Move the queued message to the DLQ, as maxReceiveCount failures would."""
    (msg,) = take_messages(h)
    h.sqs().send_message(QueueUrl=h.rt.dlq.url, MessageBody=msg["Body"])
    return msg


def test_dlq_message_after_an_opt_out_is_dropped_with_its_reason(harness: Harness) -> None:
    h = harness
    (key,) = schedule_webhook(h, "dlq1")
    tick(h)
    _to_dlq(h)
    schedules.opt_out(h.conn, tenant="acme", recipient="alice", channel="webhook",
                      now=h.clock.now())
    work(h)
    row = delivery(h, key)
    assert (row["state"], row["reason"]) == ("suppressed", "opted out of webhook")
    dropped = [e for e in events(h, key) if e["actor"] == "redrive"]
    assert [e["event"] for e in dropped] == ["dropped"]
    assert dropped[0]["detail"].startswith("opted out of webhook")
    assert effects(h) == {}


def test_dlq_message_still_deliverable_is_replayed_with_the_same_key(harness: Harness) -> None:
    h = harness
    (key,) = schedule_webhook(h, "dlq2")
    tick(h)
    _to_dlq(h)
    work(h)  # redrive replays through Postgres: due again now
    row = delivery(h, key)
    assert row["state"] == "scheduled" and row["redrives"] == 1
    tick(h)
    work(h)
    assert delivery(h, key)["state"] == "sent"
    assert effects(h) == {key: 1}


def test_dlq_replay_beyond_the_redrive_budget_is_dead(harness: Harness) -> None:
    h = harness
    schedules.set_kind(h.conn, name="once", now=h.clock.now(), redrive_budget=0)
    (key,) = schedule_webhook(h, "dlq3", kind="once")
    tick(h)
    _to_dlq(h)
    work(h)
    row = delivery(h, key)
    assert row["state"] == "dead" and "redrive budget spent" in row["reason"]


def test_console_redrive_of_a_delivered_message_sends_nothing(harness: Harness) -> None:
    h = harness
    (key,) = schedule_webhook(h, "console")
    tick(h)
    (msg,) = take_messages(h)
    h.rt.deliveries.send_raw(msg["Body"], {})  # put it back, keeping its body
    work(h)
    assert delivery(h, key)["state"] == "sent"
    # Later an operator moves "the same" message back from the DLQ with the console.
    h.rt.deliveries.send_raw(msg["Body"], {})
    h.sqs().send_message(QueueUrl=h.rt.dlq.url, MessageBody=msg["Body"])
    work(h)
    assert effects(h) == {key: 1} and ok_answers(h) == {key: 1}
    assert len(attempts(h, key)) == 1
    details = [e["detail"] for e in events(h, key)]
    assert any(d.startswith("already sent") for d in details), details


def test_malformed_message_fails_alone(harness: Harness) -> None:
    h = harness
    (key,) = schedule_webhook(h, "good")
    tick(h)
    h.rt.deliveries.send_raw("{not json", {})
    h.rt.deliveries.send_raw(json.dumps({"delivery_id": 999999,
                                         "lease_token": "00000000-0000-0000-0000-000000000000"}),
                             {})
    messages = take_messages(h, n=3)
    assert len(messages) == 3
    answer = consumer.process_batch(event_for(h, messages), h.rt)
    failed = {f["itemIdentifier"] for f in answer["batchItemFailures"]}
    bad = {m["MessageId"] for m in messages
           if m["Body"] == "{not json" or '"delivery_id": 999999' in m["Body"]}
    assert len(bad) == 2 and failed == bad
    assert delivery(h, key)["state"] == "sent"
    # Through the real loop: the bad ones are retried, dead-lettered, then parked with reasons.
    for m in messages:
        if m["MessageId"] in failed:
            h.rt.deliveries.send_raw(m["Body"], {})
    work(h)
    parked = h.rt.parking.receive(10)
    reasons = sorted(p["MessageAttributes"]["reason"]["StringValue"] for p in parked)
    assert reasons == ["unknown delivery id 999999", "unparseable: body is not JSON: '{not json'"]
    assert effects(h) == {key: 1}


def test_run_reports_idle_and_counts(harness: Harness) -> None:
    h = harness
    schedule_webhook(h, "count", recipients=["a", "b", "c"])
    out = pipeline.run(h.rt)
    assert out["tick"]["leased"] == 3
    assert out["work"]["consumer"]["records"] == 3 and out["work"]["consumer"]["failures"] == 0
    at_most_one_effect_per_key(h)


def _urls(h: Harness) -> Any:
    from reminders.config import QueueUrls

    return QueueUrls(h.rt.deliveries.url, h.rt.dlq.url, h.rt.parking.url)


def in_30s(h: Harness) -> Any:
    """A send's deadline, as the consumer would set it."""
    return h.clock.now() + timedelta(seconds=30)


def _uuid(text: str) -> Any:
    from uuid import UUID

    return UUID(text)


def test_operator_reconciles_an_unknown_delivery(harness: Harness) -> None:
    from reminders import operator

    h = harness
    keys = []
    for n in (1, 2):
        result = schedules.schedule(h.conn, tenant="acme", recipients=[f"u{n}@example.com"],
                                    channel="email", at=h.clock.now(), now=h.clock.now(),
                                    key=f"unknown-{n}")
        keys.append(result.deliveries[0].delivery_key)
    tick(h)
    for body in bodies(take_messages(h, n=2)):  # both crash after starting their attempt
        start_attempt(h, body["delivery_id"], body["lease_token"])
    h.clock.advance(timedelta(seconds=h.rt.settings.limits.lease_seconds + 1))
    tick(h)
    parked = operator.in_state(h.conn, state="unknown", tenant="acme", limit=10)
    assert sorted(p["delivery_key"] for p in parked) == sorted(keys)
    operator.reconcile(h.conn, key=keys[0], tenant="acme", target="sent",
                       reason="SES delivery log shows it arrived", now=h.clock.now())
    operator.reconcile(h.conn, key=keys[1], tenant="acme", target="retry",
                       reason="no trace at the provider", now=h.clock.now())
    tick(h)
    work(h)
    assert delivery(h, keys[0])["state"] == "sent"
    assert delivery(h, keys[0])["attempts_made"] == 1  # nothing resent
    second = delivery(h, keys[1])
    assert second["state"] == "sent" and second["attempts_made"] == 2
    assert [e["actor"] for e in events(h, keys[0])] == ["operator"]
    from reminders.errors import InvalidInput

    with pytest.raises(InvalidInput, match="is sent: only unknown"):
        operator.reconcile(h.conn, key=keys[0], tenant="acme", target="retry",
                           reason="again", now=h.clock.now())


@pytest.mark.refusals_expected  # the scanner's role may not send to the vanished queue
def test_messages_the_queue_refuses_are_released_for_the_next_tick(harness: Harness) -> None:
    from reminders.queue import Queue

    h = harness
    keys = schedule_webhook(h, "refused", recipients=["a", "b", "c"])
    scanner = h.rt.functions["scanner"]
    good = scanner.deliveries
    gone = h.sqs().create_queue(QueueName="about-to-vanish")["QueueUrl"]
    h.sqs().delete_queue(QueueUrl=gone)
    scanner.deliveries = Queue(good.client, gone)  # every SendMessageBatch now fails
    scanner.deliveries.depth = lambda: 0  # type: ignore[method-assign]
    out = tick(h)
    assert (out["leased"], out["published"], out["released"]) == (3, 0, 3)
    assert {delivery(h, k)["state"] for k in keys} == {"scheduled"}
    assert all(due_entry(h, k) and not pending_lease(h, k) for k in keys)  # back in the due set
    scanner.deliveries = good
    out = tick(h)
    assert (out["leased"], out["published"]) == (3, 3)
    work(h)
    assert set(effects(h)) == set(keys)


def test_deployment_redrive_budget_caps_every_kind(harness: Harness, database_url: str) -> None:
    h = harness
    h.rt.close()
    h.rt = make_runtime(database_url, _urls(h), h.endpoint, h.clock, redrive_budget=0)
    (key,) = schedule_webhook(h, "capped")  # the default kind allows 3 replays
    tick(h)
    _to_dlq(h)
    work(h)
    row = delivery(h, key)
    assert row["state"] == "dead" and row["reason"] == "redrive budget spent (0 of 0)"


def _crash_mid_send(h: Harness) -> dict[str, Any]:
    """Take the queued message, start its attempt as a consumer would, then 'crash' (the
    message comes back after its visibility timeout)."""
    (msg,) = take_messages(h)
    body = json.loads(msg["Body"])
    assert start_attempt(h, body["delivery_id"], body["lease_token"]) is not None
    h.rt.deliveries.send_raw(msg["Body"], {})
    return msg


def test_redelivered_message_after_a_crash_mid_send_is_parked_without_keys(
        harness: Harness) -> None:
    h = harness
    result = schedules.schedule(h.conn, tenant="acme", recipients=["gail@example.com"],
                                channel="email", at=h.clock.now(), now=h.clock.now(), key="mid")
    key = result.deliveries[0].delivery_key
    tick(h)
    _crash_mid_send(h)
    work(h)  # the same message again, its send still in flight: no second e-mail
    assert delivery(h, key)["state"] == "leased"
    assert [a["outcome"] for a in attempts(h, key)] == [None]
    assert "a send is already in flight" in events(h, key)[-1]["detail"]
    h.clock.advance(timedelta(seconds=h.rt.settings.limits.lease_seconds + 1))
    assert tick(h)["reclaimed"] == {"unknown": 1}
    row = delivery(h, key)
    assert row["state"] == "unknown" and "cannot deduplicate" in row["reason"]
    assert [a["outcome"] for a in attempts(h, key)] == ["unknown"]


@pytest.mark.resends_allowed
def test_redelivered_message_after_a_crash_mid_send_resends_with_the_key(
        harness: Harness) -> None:
    h = harness
    (key,) = schedule_webhook(h, "mid-hook")
    tick(h)
    _crash_mid_send(h)
    work(h)  # the copy is ignored: the crashed send is still in flight until its deadline
    assert delivery(h, key)["state"] == "leased" and effects(h) == {}
    h.clock.advance(timedelta(seconds=h.rt.settings.limits.lease_seconds + 1))
    assert tick(h)["reclaimed"] == {"retrying": 1}
    work(h)
    assert delivery(h, key)["state"] == "sent"
    assert [a["outcome"] for a in attempts(h, key)] == ["unknown", "sent"]
    assert effects(h) == {key: 1}


def test_two_copies_of_one_message_in_flight_start_one_attempt(harness: Harness) -> None:
    h = harness
    (key,) = schedule_webhook(h, "twins")
    tick(h)
    (msg,) = take_messages(h)
    mine = h.rt.functions["consumer"]
    webhook = mine.channels["webhook"]
    seen: list[dict[str, Any]] = []

    class SecondCopyArrivesMidSend:
        """While the first copy is sending, the second copy is processed by another
        consumer."""

        name = "webhook"
        honours_idempotency_key = True

        def send(self, message: Any, now: Any) -> Any:
            mine.channels = {**mine.channels, "webhook": webhook}
            seen.append(consumer.process_batch(event_for(h, [msg]), h.rt))
            return webhook.send(message, now)

    mine.channels = {**mine.channels, "webhook": SecondCopyArrivesMidSend()}
    first = consumer.process_batch(event_for(h, [msg]), h.rt)
    assert first == {"batchItemFailures": []} and seen == [{"batchItemFailures": []}]
    assert delivery(h, key)["state"] == "sent"
    assert len(attempts(h, key)) == 1 and effects(h) == {key: 1}
    ignored = [e["detail"] for e in events(h, key) if e["event"] == "message ignored"]
    assert len(ignored) == 1 and ignored[0].startswith("a send is already in flight")


def test_redrive_never_replays_a_send_that_may_have_happened(harness: Harness) -> None:
    h = harness
    result = schedules.schedule(h.conn, tenant="acme", recipients=["hal@example.com"],
                                channel="email", at=h.clock.now(), now=h.clock.now(), key="dlq-em")
    key = result.deliveries[0].delivery_key
    tick(h)
    msg = _crash_mid_send(h)
    take_messages(h)  # it failed maxReceiveCount times...
    h.sqs().send_message(QueueUrl=h.rt.dlq.url, MessageBody=msg["Body"])  # ...and was moved
    work(h)
    row = delivery(h, key)
    assert row["state"] == "leased" and row["redrives"] == 0  # never replayed mid-send
    assert [e["detail"].split(" (message")[0] for e in events(h, key)
            if e["actor"] == "redrive"] == [
        f"a send is in flight until {iso(row['send_deadline'])}; its holder or the scanner "
        "settles it"]
    h.clock.advance(timedelta(seconds=h.rt.settings.limits.lease_seconds + 1))
    tick(h)
    assert delivery(h, key)["state"] == "unknown"


class RecordingMetrics:
    """A metrics port that keeps what was put, flush by flush."""

    def __init__(self) -> None:
        self.pending: dict[str, float] = {}
        self.flushed: list[dict[str, float]] = []

    def put(self, name: str, value: float, unit: str = "Count",
            dimensions: dict[str, str] | None = None) -> None:
        label = name + "".join(f"[{k}={v}]" for k, v in sorted((dimensions or {}).items()))
        self.pending[label] = value

    def flush(self) -> None:
        self.flushed.append(self.pending)
        self.pending = {}


def test_consumer_counts_outcomes_per_batch(harness: Harness) -> None:
    h = harness
    metrics = RecordingMetrics()
    h.rt.metrics = metrics
    schedule_webhook(h, "metrics", recipients=["a", "b"])
    schedules.opt_out(h.conn, tenant="acme", recipient="b", channel="webhook",
                      now=h.clock.now())
    tick(h)
    h.rt.deliveries.send_raw("{not json", {})
    messages = take_messages(h, n=3)
    consumer.process_batch(event_for(h, messages), h.rt)
    assert metrics.flushed[-1] == {"Sent": 1, "Suppressed": 1, "MessagesFailed": 1}
    assert metrics.flushed[0]["Leased"] == 2  # the scanner's tick flushed first


def test_a_message_that_always_fails_before_a_send_is_parked_dead(
        harness: Harness, database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    h = harness
    h.rt.close()
    h.rt = make_runtime(database_url, _urls(h), h.endpoint, h.clock, max_empty_leases=3,
                        lease_seconds=60)
    (key,) = schedule_webhook(h, "poison")

    def dies(*args: Any) -> None:
        raise RuntimeError("the consumer dies on this message before any send")

    monkeypatch.setattr(consumer, "_decide", dies)
    summaries = []
    for _ in range(4):  # every consumer that receives its message dies before attempting
        summaries.append(tick(h))
        taken = take_messages(h)
        if taken:
            with pytest.raises(RuntimeError):
                consumer.process_batch(event_for(h, taken), h.rt)
        h.clock.advance(timedelta(seconds=61))
    assert [s["leased"] for s in summaries] == [1, 1, 1, 0]
    assert [s["reclaimed"] for s in summaries] == [{}, {"scheduled": 1}, {"scheduled": 1},
                                                    {"dead": 1}]
    row = delivery(h, key)
    assert row["state"] == "dead"
    assert row["reason"] == ("its message reached a consumer 3 times and failed each time "
                             "before any send (a poison message)")
    assert attempts(h, key) == []


@pytest.mark.refusals_expected  # the scanner's role may not send to the vanished queue
def test_a_publish_failure_does_not_count_as_an_empty_lease(harness: Harness,
                                                             database_url: str) -> None:
    from reminders.queue import Queue

    h = harness
    h.rt.close()
    h.rt = make_runtime(database_url, _urls(h), h.endpoint, h.clock, max_empty_leases=2)
    (key,) = schedule_webhook(h, "outage")
    scanner = h.rt.functions["scanner"]
    good = scanner.deliveries
    gone = h.sqs().create_queue(QueueName="outage-vanish")["QueueUrl"]
    h.sqs().delete_queue(QueueUrl=gone)
    scanner.deliveries = Queue(good.client, gone)
    scanner.deliveries.depth = lambda: 0  # type: ignore[method-assign]
    for _ in range(4):  # SQS refuses for four ticks
        assert tick(h)["released"] == 1
    scanner.deliveries = good
    tick(h)
    work(h)
    assert delivery(h, key)["state"] == "sent"


def test_redrive_counts_what_it_parks_as_metrics(harness: Harness, database_url: str) -> None:
    """A deployment whose redrive turns deliveries dead must reach the Dead alarm."""
    h = harness
    h.rt.close()
    h.rt = make_runtime(database_url, _urls(h), h.endpoint, h.clock, redrive_budget=0)
    metrics = RecordingMetrics()
    h.rt.metrics = metrics
    schedule_webhook(h, "dead-metric")
    tick(h)
    _to_dlq(h)
    work(h)
    assert {"Dead": 1} in metrics.flushed


@pytest.mark.refusals_expected  # the consumer's role may send only from its SES identity
def test_an_ses_configuration_error_is_retried_and_counted_by_channel(
        harness: Harness) -> None:
    """A sender identity that is not verified fails every e-mail the same way: each is retried
    (never settled failed for good) and SendConfigErrors pages someone."""
    from dataclasses import replace

    from reminders.local import stack
    from reminders.runtime import build_channels

    h = harness
    h.rt.settings = replace(h.rt.settings, email_sender="nobody@unverified.example")
    role = function_roles(h.endpoint, _urls(h))["consumer"]
    h.rt.functions["consumer"].channels = build_channels(
        h.rt.settings, lambda service, config=None: stack.aws_client(
            service, h.endpoint, config, credentials=role.credentials))
    metrics = RecordingMetrics()
    h.rt.metrics = metrics
    result = schedules.schedule(h.conn, tenant="acme", recipients=["ida@example.com"],
                                channel="email", at=h.clock.now(), now=h.clock.now(),
                                key="config-error")
    key = result.deliveries[0].delivery_key
    tick(h)
    work(h)
    row = delivery(h, key)
    assert row["state"] == "retrying" and row["reason"].startswith("configuration error")
    assert any(f.get("SendConfigErrors[channel=email]") == 1 for f in metrics.flushed)


def test_a_webhook_recipient_outside_latin_1_is_delivered_once_with_its_key(
        harness: Harness) -> None:
    """The delivery key travels in HTTP headers (webhook-id, Idempotency-Key), which carry
    printable ASCII only: a recipient such as Łukasz or 用户 failed at every send. The header
    carries the key percent-encoded; the signature covers that id and the body keeps the key."""
    h = harness
    keys = schedule_webhook(h, "unicode", recipients=["Łukasz", "用户"])
    tick(h)
    work(h)
    assert {delivery(h, k)["state"] for k in keys} == {"sent"}
    from reminders.channels.signing import message_id

    assert effects(h) == {message_id(k): 1 for k in keys}
    assert h.receiver.stats()["bad_signatures"] == 0


@pytest.mark.parametrize("payload", [
    '{"n": 1e5000}',
    "{\"a\": " + "[" * 1100 + "]" * 1100 + "}",
    '{"n": ' + "9" * 5000 + "}",
])
def test_a_payload_the_service_cannot_read_back_parks_its_delivery_alone(
        harness: Harness, payload: str) -> None:
    """Written before the entry checks, or by hand: a payload psycopg's JSON reader cannot
    load (a number out of every float's range, nesting past Python's parser, an integer of
    thousands of digits) fails that one delivery with the reason; the delivery batched with
    it goes out, and neither is counted as a poison message."""
    h = harness
    (bad,) = schedule_webhook(h, "unreadable")
    (good,) = schedule_webhook(h, "readable", recipients=["bob"])
    h.conn.execute("update schedules set payload = %s::jsonb where schedule_key = 'unreadable'",
                   (payload,))
    tick(h)
    messages = take_messages(h)
    assert len(messages) == 2
    answer = consumer.process_batch(event_for(h, messages), h.rt)
    assert answer == {"batchItemFailures": []}
    assert delivery(h, good)["state"] == "sent" and effects(h) == {good: 1}
    row = delivery(h, bad)
    assert row["state"] == "failed"
    assert row["reason"].startswith("payload cannot be read back: "), row["reason"]
