"""Pacing on the strict stand-ins: real Postgres behind the pooler, the SES stand-in (moto over
HTTP, IAM enforced) counting what it accepts, four consumers in parallel.

The clock story: one injected clock for everything. The schedules are made at its instant, the
scanner and every consumer read it, and the test alone moves it, in steps (STEP). At each step
the scanner ticks and the four consumers drain the queue together, at that frozen instant;
then the SES stand-in's count says how many e-mails that step sent. The buckets refill by the
same clock, so a step of STEP seconds can give at most rate * STEP tokens (plus what the
bucket held), however long the step takes in real time. A one-second window is any run of
1 / STEP consecutive steps.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from reminders import consumer, db, pacing, schedules
from reminders.local import stack
from reminders.local.event_source import sqs_event
from reminders.runtime import Runtime
from tests.conftest import Harness, make_runtime
from tests.integration.pipeline_helpers import (
    bodies,
    delivery,
    schedule_webhook,
    take_leases,
    take_messages,
    tick,
    work,
)

STEP = 0.5
CONSUMERS = 4
RATE = 10.0
BURST = 10.0


def email_burst(h: Harness, key: str, n: int, kind: str = "default") -> None:
    schedules.schedule(h.conn, tenant="acme",
                       recipients=[f"r{i}@example.com" for i in range(n)], channel="email",
                       at=h.clock.now(), now=h.clock.now(), key=key, kind=kind)


def states(h: Harness, key: str) -> dict[str, int]:
    rows = h.conn.execute(
        "select d.state, count(*) as n from deliveries d join schedules s on s.id = "
        "d.schedule_id where s.schedule_key = %s group by d.state", (key,)).fetchall()
    return {r["state"]: int(r["n"]) for r in rows}


def budgets(h: Harness, key: str) -> list[dict[str, Any]]:
    return h.conn.execute(
        "select d.attempts_made, d.attempts_base, d.throttles, d.leases from deliveries d "
        "join schedules s on s.id = d.schedule_id where s.schedule_key = %s",
        (key,)).fetchall()


class Consumers:
    """CONSUMERS consumer runtimes on the test's clock, each with its own connection, handling
    the queue's batches in parallel threads (the test receives them, as the event source
    mapping does, and hands each consumer its share)."""

    def __init__(self, h: Harness, database_url: str, queue_urls: Any) -> None:
        self.h = h
        self.runtimes: list[Runtime] = [
            make_runtime(database_url, queue_urls, h.endpoint, h.clock)
            for _ in range(CONSUMERS)]
        self.failures: list[dict[str, Any]] = []

    def drain(self) -> None:
        batches = self._receive()
        shares = [batches[i::CONSUMERS] for i in range(CONSUMERS)]
        threads = [threading.Thread(target=self._handle, args=(rt, share))
                   for rt, share in zip(self.runtimes, shares, strict=True) if share]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
            assert not t.is_alive()

    def _receive(self) -> list[list[dict[str, Any]]]:
        sqs = self.h.sqs()
        url = self.h.rt.deliveries.url
        batches = []
        for _ in range(1000):  # bounded: what one step queued
            got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                      AttributeNames=["All"]).get("Messages", [])
            if not got:
                break
            sqs.delete_message_batch(QueueUrl=url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)])
            batches.append(got)
        return batches

    def _handle(self, rt: Runtime, batches: list[list[dict[str, Any]]]) -> None:
        for got in batches:
            answer = consumer.process_batch(
                sqs_event(got, self.h.rt.deliveries.arn(), "us-east-1"), rt)
            self.failures += answer["batchItemFailures"]

    def close(self) -> None:
        for rt in self.runtimes:
            rt.close()


@pytest.fixture
def consumers(harness: Harness, database_url: str, queue_urls: Any) -> Any:
    c = Consumers(harness, database_url, queue_urls)
    yield c
    c.close()


def run_steps(h: Harness, fleet: Consumers, done: Callable[[], bool], limit: int,
              step: float = STEP) -> list[int]:
    """Step the clock until ``done`` (at most ``limit`` steps); each step's sends as the SES
    stand-in counted them."""
    sent: list[int] = []
    before = stack.ses_state(h.endpoint)["sent"]
    for _ in range(limit):
        tick(h)
        fleet.drain()
        now_sent = stack.ses_state(h.endpoint)["sent"]
        sent.append(now_sent - before)
        before = now_sent
        if done():
            break
        h.clock.advance(timedelta(seconds=step))
    return sent


def windows(per_step: list[int], seconds: float, step: float = STEP) -> int:
    """The most sends in any window of ``seconds`` (runs of consecutive steps)."""
    width = round(seconds / step)
    return max(sum(per_step[i:i + width]) for i in range(max(1, len(per_step) - width + 1)))


# 200 e-mails, not the 2,000 of the issue: what the test must prove is that four consumers
# taking tokens at once never send more than the bucket gives over any second, which needs a
# backlog many bursts deep and many refills (200 is 20 bursts and 20 s of the clock), and that
# a token wait spends nothing. 2,000 proves the same ten times over in ten times the real time
# (each step costs the queue stand-in's round trips, about a second a step on this machine).
# The benchmark sends at the limit for longer.
EMAILS = 200


def test_four_consumers_never_send_faster_than_the_rate_and_a_token_wait_spends_nothing(
        harness: Harness, consumers: Consumers) -> None:
    h = harness
    pacing.set_rate(h.conn, "email", RATE, BURST, h.clock.now())
    email_burst(h, "burst", EMAILS)
    start = h.clock.now()
    per_step = run_steps(h, consumers, lambda: states(h, "burst") == {"sent": EMAILS},
                         limit=round(2 * EMAILS / RATE / STEP))
    assert states(h, "burst") == {"sent": EMAILS}, states(h, "burst")
    assert consumers.failures == []
    assert sum(per_step) == EMAILS  # counted at the stand-in: every e-mail once
    # Never above the rate, give or take the burst, over any one second; over ten seconds the
    # burst is the only slack.
    assert windows(per_step, 1) <= RATE + BURST, per_step
    assert windows(per_step, 10) <= 10 * RATE + BURST, per_step
    # ...and the bucket is the limit, not the consumers: the whole burst took as long as the
    # rate says, give or take a second.
    took = (h.clock.now() - start).total_seconds()
    assert (EMAILS - BURST) / RATE <= took <= EMAILS / RATE + 2, took
    # A token wait spent no attempt: one attempt each, the one that was sent.
    rows = budgets(h, "burst")
    assert {(r["attempts_made"], r["attempts_base"]) for r in rows} == {(1, 0)}
    attempts = h.conn.execute("select count(*) as n from attempts").fetchone()
    assert attempts is not None and attempts["n"] == EMAILS
    (used,) = [r for r in pacing.rates(h.conn, h.clock.now()) if r["key"] == "email"]
    assert used["used_last_minute"] + used["used_this_minute"] == EMAILS


def test_without_a_rate_the_same_burst_goes_out_at_once(
        harness: Harness, consumers: Consumers) -> None:
    """The control: the same fleet, no rate set, sends the burst in one step."""
    h = harness
    email_burst(h, "unpaced", 100)
    per_step = run_steps(h, consumers, lambda: states(h, "unpaced") == {"sent": 100}, limit=4)
    assert per_step[0] == 100


def test_a_minute_of_provider_throttles_costs_no_attempt_and_everything_is_sent(
        harness: Harness, consumers: Consumers) -> None:
    h = harness
    schedules.set_kind(h.conn, name="tight", now=h.clock.now(), max_attempts=2)
    pacing.set_rate(h.conn, "email", RATE, BURST, h.clock.now())
    email_burst(h, "throttled", 40, kind="tight")
    stack.ses_state(h.endpoint, throttle=True)
    try:
        before = stack.ses_state(h.endpoint)["throttled"]
        sent = run_steps(h, consumers, lambda: False, limit=30, step=2.0)  # a minute
        throttled = stack.ses_state(h.endpoint)["throttled"] - before
    finally:
        stack.ses_state(h.endpoint, throttle=False)
    assert sum(sent) == 0 and throttled >= 40  # each e-mail was throttled, some many times
    (rate,) = [r for r in pacing.rates(h.conn, h.clock.now()) if r["key"] == "email"]
    assert rate["throttles"] > 1 and rate["rate_now"] < RATE / 4  # AIMD: halved, repeatedly
    assert set(states(h, "throttled")) <= {"scheduled", "retrying", "leased"}
    run_steps(h, consumers, lambda: states(h, "throttled") == {"sent": 40}, limit=300,
              step=1.0)
    assert states(h, "throttled") == {"sent": 40}, states(h, "throttled")
    assert consumers.failures == []
    rows = budgets(h, "throttled")
    # Every throttle gave its attempt back: one attempt counted each, the one that was sent,
    # with a kind whose budget (2) the throttles alone would have spent many times over.
    assert {r["attempts_made"] - r["attempts_base"] for r in rows} == {1}
    assert sum(r["throttles"] for r in rows) == throttled
    ledger = h.conn.execute("select outcome, count(*) as n from attempts group by outcome")
    assert {r["outcome"]: r["n"] for r in ledger.fetchall()} == {"transient": throttled,
                                                                  "sent": 40}


def test_a_receiver_answering_429_is_paced_and_retried_without_spending_an_attempt(
        harness: Harness) -> None:
    h = harness
    url = h.receiver.hook_url("slow", codes=[429, 429, 200], retry_after=30)
    pacing.set_rate(h.conn, pacing.endpoint_key(url), 5.0, None, h.clock.now())
    schedules.set_kind(h.conn, name="once", now=h.clock.now(), max_attempts=1)
    (key,) = schedule_webhook(h, "hook", url=url, kind="once")
    for _ in range(3):
        tick(h)
        work(h)
        h.clock.advance(timedelta(seconds=30))
    row = h.conn.execute("select state, attempts_made, attempts_base, throttles from deliveries "
                         "where delivery_key = %s", (key,)).fetchone()
    assert row is not None and row["state"] == "sent", row
    assert (row["attempts_made"], row["attempts_base"], row["throttles"]) == (3, 2, 2)
    (rate,) = pacing.rates(h.conn, h.clock.now())
    assert rate["throttles"] == 2  # 30 s apart: each throttle halved the endpoint's rate


def test_a_paced_release_is_fenced_on_its_lease(harness: Harness) -> None:
    """A release for want of a token writes only under the lease it was decided on."""
    h = harness
    (key,) = schedule_webhook(h, "fenced")
    tick(h)
    (message,) = bodies(take_messages(h))
    take_leases(h, [(message["delivery_id"], message["lease_token"])])
    row = delivery(h, key)
    assert row["state"] == "leased"
    params = {"ids": [row["id"]], "tokens": ["00000000-0000-0000-0000-000000000000"],
              "due_ats": [h.clock.now()], "reasons": ["paced"], "now": h.clock.now()}
    assert db.fetch_all(h.conn, "lease_release_paced", params) == []
    assert delivery(h, key)["state"] == "leased"
    params["tokens"] = [message["lease_token"]]
    params["due_ats"] = [h.clock.now() + timedelta(seconds=2)]
    assert len(db.fetch_all(h.conn, "lease_release_paced", params)) == 1
    after = h.conn.execute("select state, due_at, attempts_made, leases from deliveries "
                           "where delivery_key = %s", (key,)).fetchone()
    assert after is not None and (after["state"], after["due_at"], after["attempts_made"],
                                  after["leases"]) == (
        "scheduled", h.clock.now() + timedelta(seconds=2), 0, 0)


def test_channels_set_and_list_and_an_endpoints_rate_from_the_command_line(
        cli: Any, conn: db.Connection) -> None:
    from reminders.channels.signing import new_secret

    got = cli("channels", "set", "email", "--rate", "14/s", "--reason", "SES quota",
              "--json").json()
    assert (got["rate_per_second"], got["burst"], got["shards"]) == (14.0, 14.0, 1)
    assert cli("channels", "set", "sms", "--rate", "1200/m", "--burst", "40", "--json").json()[
        "rate_per_second"] == 20.0
    url = "https://hooks.example.com/paced"
    missing = cli("endpoints", "set", url, "--rate", "50/s")
    assert missing.code != 0 and "no endpoint" in missing.err
    cli("endpoints", "add", url, "--secret", new_secret(), "--json").json()
    assert cli("endpoints", "set", url, "--rate", "50/s", "--json").json()["shards"] == 5
    listed = {r["key"]: r for r in cli("channels", "list", "--json").json()}
    assert set(listed) == {"email", "sms", f"webhook {url}"}
    assert listed["email"]["used_last_minute"] == 0 and listed["email"]["source"] == "set"
    assert "14/s" in cli("channels", "list").out
    for bad, why in ((["--rate", "fast"], "--rate must be a count per unit"),
                     (["--rate", "0/s"], "--rate must be more than 0"),
                     (["--rate", "5/s", "--burst", "0"], "--burst must be between 1")):
        wrong = cli("channels", "set", "email", *bad)
        assert wrong.code != 0 and why in wrong.err, wrong.err
    wrong = cli("channels", "set", "webhook", "--rate", "5/s")
    assert wrong.code != 0 and "endpoints set URL" in wrong.err
    assert cli("channels", "set", "sms", "--rate", "off", "--json").json()["changed"] is True
    assert {r["key"] for r in cli("channels", "list", "--json").json()} == {
        "email", f"webhook {url}"}
    actions = conn.execute("select object, name, action, reason from operator_actions "
                           "where object = 'channel' order by id").fetchall()
    assert actions[0] == {"object": "channel", "name": "email", "action": "paced",
                          "reason": "SES quota"}
