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
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
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
    register,
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


class Outcomes:
    """What one consumer's batches came to, as its metrics say (the runtime's metrics port)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def put(self, name: str, value: float, unit: str = "Count",
            dimensions: dict[str, str] | None = None) -> None:
        self.counts[name] += int(value)

    def flush(self) -> None:
        return None


class Consumers:
    """CONSUMERS consumer runtimes on the test's clock, each with its own connection, handling
    the queue's batches in parallel threads (the test receives them, as the event source
    mapping does, ``batch`` messages a batch, and hands each consumer its share)."""

    def __init__(self, h: Harness, database_url: str, queue_urls: Any) -> None:
        self.h = h
        self.runtimes: list[Runtime] = [
            make_runtime(database_url, queue_urls, h.endpoint, h.clock)
            for _ in range(CONSUMERS)]
        self.outcomes = [Outcomes() for _ in self.runtimes]
        for rt, outcomes in zip(self.runtimes, self.outcomes, strict=True):
            rt.metrics = outcomes
        self.failures: list[dict[str, Any]] = []
        self.steps_with_several_consumers = 0
        self.batch = 10  # messages a batch, at most (the event source mapping's BatchSize)

    def drain(self) -> None:
        batches = self._receive()
        shares = [batches[i::CONSUMERS] for i in range(CONSUMERS)]
        before = [sum(o.counts.values()) for o in self.outcomes]
        threads = [threading.Thread(target=self._handle, args=(rt, share))
                   for rt, share in zip(self.runtimes, shares, strict=True) if share]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
            assert not t.is_alive()
        busy = sum(sum(o.counts.values()) > b for o, b in zip(self.outcomes, before, strict=True))
        self.steps_with_several_consumers += busy > 1

    def total(self, name: str) -> int:
        return sum(o.counts[name] for o in self.outcomes)

    def _receive(self) -> list[list[dict[str, Any]]]:
        sqs = self.h.sqs()
        url = self.h.rt.deliveries.url
        batches = []
        for _ in range(1000):  # bounded: what one step queued
            got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=self.batch,
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


# The size: 2,000 e-mails at 10/s, 200 s of the clock in 400 steps. What keeps it to
# a minute or so of real time is the in-flight budget: the scanner leases at most IN_FLIGHT at
# once, so the queue stand-in is never deep (receiving from a queue a thousand deep costs it a
# tenth of a second a call) and the backlog takes its slots IN_FLIGHT at a time, as a deployed
# scanner's budget hands it over: four batches a step, one a consumer, all taking tokens from
# the one bucket at the same instant. Batches of BATCH: the in-flight budget is four batches,
# one a consumer.
EMAILS = 2000
IN_FLIGHT = 20
BATCH = 5
# Steps of a second, and a bucket that holds one step's refill: a one-second window holds one
# step's instant, and a step can send at most BURST = RATE.
PACED_STEP = 1.0
PACED_BURST = RATE * PACED_STEP


def sent_at(h: Harness, key: str) -> Counter[datetime]:
    """The e-mails sent, by the instant the clock gave their attempt (the instant their token
    was taken: the attempt is started in the transaction that takes it)."""
    rows = h.conn.execute(
        "select a.started_at, count(*) as n from attempts a join deliveries d on d.id = "
        "a.delivery_id join schedules s on s.id = d.schedule_id where s.schedule_key = %s "
        "and a.outcome = 'sent' group by a.started_at", (key,)).fetchall()
    return Counter({r["started_at"]: int(r["n"]) for r in rows})


def most_in_windows(counts: Counter[datetime], start: datetime, end: datetime,
                    steps: int, step: float = PACED_STEP) -> int:
    """The most sends at the instants of any ``steps`` consecutive steps from ``start`` to
    ``end`` (a window ``steps * step`` seconds long holds at most that many step instants)."""
    n = round((end - start).total_seconds() / step) + 1
    per_step = [counts.get(start + timedelta(seconds=i * step), 0) for i in range(n)]
    return max(sum(per_step[i:i + steps]) for i in range(max(1, n - steps + 1)))


def test_four_consumers_never_send_faster_than_the_rate_and_a_token_wait_spends_nothing(
        harness: Harness, consumers: Consumers, database_url: str, queue_urls: Any) -> None:
    h = harness
    h.rt = make_runtime(database_url, queue_urls, h.endpoint, h.clock,
                        inflight_budget=IN_FLIGHT)
    consumers.batch = BATCH
    pacing.set_rate(h.conn, "email", RATE, PACED_BURST, h.clock.now())
    email_burst(h, "burst", EMAILS)
    start = h.clock.now()
    per_step = run_steps(h, consumers, lambda: states(h, "burst") == {"sent": EMAILS},
                         limit=round(2 * EMAILS / RATE / PACED_STEP), step=PACED_STEP)
    end = h.clock.now()
    assert states(h, "burst") == {"sent": EMAILS}, states(h, "burst")
    assert consumers.failures == []
    assert sum(per_step) == EMAILS  # counted at the stand-in: every e-mail once
    # The instants the clock gave the sends, and the stand-in's count of each step, agree.
    counts = sent_at(h, "burst")
    assert sorted(counts.values()) == sorted(n for n in per_step if n), (counts, per_step)
    assert set(counts) <= {start + timedelta(seconds=i * PACED_STEP)
                           for i in range(len(per_step))}
    # Never above the rate in any one-second window (one step's instant)...
    assert most_in_windows(counts, start, end, round(1 / PACED_STEP)) <= RATE, per_step
    # ...nor, at any length, above what a bucket of PACED_BURST refilled at RATE gives: k
    # consecutive steps, (k - 1) steps of refill plus what the bucket held.
    for steps in (2, 3, 5, 10, 30, 100, len(per_step)):
        bound = PACED_BURST + RATE * (steps - 1) * PACED_STEP
        assert most_in_windows(counts, start, end, steps) <= bound + 1e-9, (steps, per_step)
    # ...and the bucket is the limit, not the consumers: the whole burst took about as long as
    # the rate says (tokens a step wasted, with no send due to take them, make it longer).
    took = (end - start).total_seconds()
    assert (EMAILS - PACED_BURST) / RATE <= took <= 1.1 * EMAILS / RATE, (took, per_step)
    # The consumers took tokens from the one bucket at the same instants: in many steps several
    # of them handled a batch (each its own connection and thread).
    assert consumers.steps_with_several_consumers >= 10, consumers.steps_with_several_consumers
    # A token wait spent no attempt: one attempt each, the one that was sent.
    rows = budgets(h, "burst")
    assert {(r["attempts_made"], r["attempts_base"]) for r in rows} == {(1, 0)}
    attempts = h.conn.execute("select count(*) as n from attempts").fetchone()
    assert attempts is not None and attempts["n"] == EMAILS
    # ...though most of them waited for a token, some many times (their releases counted).
    assert consumers.total("Paced") >= EMAILS - PACED_BURST, consumers.total("Paced")
    assert consumers.total("Sent") == EMAILS
    # The bucket's own counts (this minute's and the one before) are the sends of those minutes.
    (used,) = [r for r in pacing.rates(h.conn, end) if r["key"] == "email"]
    minute = end.replace(second=0, microsecond=0)
    assert used["used_this_minute"] == sum(n for t, n in counts.items() if t >= minute)
    assert used["used_last_minute"] == sum(
        n for t, n in counts.items() if minute - timedelta(minutes=1) <= t < minute)


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


def test_status_shows_what_waits_for_a_token_and_the_providers_throttles(
        harness: Harness, cli: Any) -> None:
    """`status` (JSON and text), per paced key: the sends waiting for a token (the slots its
    bucket booked ahead), the rate in force, and the provider's throttles."""
    from reminders.clock import iso

    h = harness
    pacing.set_rate(h.conn, "email", RATE, BURST, h.clock.now())
    email_burst(h, "waiting", 40)
    tick(h)
    work(h)  # one consumer, batch by batch: 10 sent, 30 released due at the bucket's slots
    assert states(h, "waiting") == {"sent": 10, "scheduled": 30}

    def paced(at: str) -> dict[str, Any]:
        got = cli("status", "--json", now=at).json()
        (email,) = [p for p in got["pacing"] if p["key"] == "email"]
        return dict(email)

    now = h.clock.now()
    email = paced(iso(now))
    assert (email["waiting_for_token"], email["booked_until"]) == (
        30, iso(now + timedelta(seconds=30 / RATE)))
    assert (email["rate_per_second"], email["rate_in_force_per_second"]) == (RATE, RATE)
    assert (email["throttles_last_hour"], email["throttled_in_last_hour"]) == (0, False)
    text = cli("status", now=iso(now)).out
    assert "paced channels:\nemail\t10/s\t10/s\t30 (booked until " in text, text
    # A second on, a second's slots are behind: ten fewer wait.
    assert paced(iso(now + timedelta(seconds=1)))["waiting_for_token"] == 20
    # The provider throttles: the rate in force halves, and status says when.
    stack.ses_state(h.endpoint, throttle=True)
    try:
        h.clock.advance(timedelta(seconds=1))
        tick(h)
        work(h)
    finally:
        stack.ses_state(h.endpoint, throttle=False)
    throttled_at = h.clock.now()
    ledger = h.conn.execute("select count(*) as n from attempts where outcome = 'transient'")
    throttled = int((ledger.fetchone() or {})["n"])
    assert throttled > 1
    email = paced(iso(throttled_at))
    assert email["throttles_last_hour"] == throttled, email  # every throttled send counted
    assert email["throttled_in_last_hour"] is True and email["rate_halvings"] == 1
    assert email["last_throttled_at"] == iso(throttled_at)
    assert email["rate_in_force_per_second"] == RATE / 2
    assert f"{throttled} (the last " in cli("status", now=iso(throttled_at)).out
    # Two hours on: nothing booked ahead, no throttle in the last hour.
    later = paced(iso(throttled_at + timedelta(hours=2)))
    assert (later["waiting_for_token"], later["booked_until"]) == (0, None)
    assert (later["throttles_last_hour"], later["throttled_in_last_hour"]) == (0, False)
    assert later["rate_halvings"] == 1
    assert later["rate_in_force_per_second"] == RATE


def test_status_counts_every_throttled_send_of_the_last_hour_by_endpoint(
        harness: Harness, cli: Any) -> None:
    """Provider throttles in `status` (JSON and text) are the sends throttled in the last hour,
    each counted, per paced endpoint: seven 429s in two batches two minutes apart (two
    halvings of the rate), counted by the minute, so an hour on only the second batch's are."""
    from reminders.clock import iso

    h = harness
    url = h.receiver.hook_url("busy", codes=[429] * 7 + [200])
    other = h.receiver.hook_url("calm")
    for u in (url, other):
        register(h, u)
        pacing.set_rate(h.conn, pacing.endpoint_key(u), 100.0, None, h.clock.now())
    schedule_webhook(h, "busy", url=url, recipients=[f"r{i}" for i in range(5)])
    schedule_webhook(h, "calm", url=other)
    first = h.clock.now()
    tick(h)
    work(h)  # five sends, five 429s
    h.clock.advance(timedelta(minutes=2))
    second = h.clock.now()
    tick(h)
    work(h)  # five retries: two 429s, three sent

    def shown(at: datetime) -> dict[str, dict[str, Any]]:
        got = cli("status", "--json", now=iso(at)).json()["pacing"]
        return {p["endpoint"]: p for p in got}

    now = shown(second)
    assert (now[url]["throttles_last_hour"], now[url]["rate_halvings"]) == (7, 2), now[url]
    assert now[url]["last_throttled_at"] == iso(second)
    assert now[other]["throttles_last_hour"] == 0 and now[other]["last_throttled_at"] is None
    assert list(now) == [url, other]  # the throttled endpoint first
    text = cli("status", now=iso(second)).out
    assert f"webhook {url}\t100/s\t50/s\t0\t7 (the last {iso(second)})" in text, text
    # An hour after the first batch's minute, only the second batch's throttles count.
    assert shown(first + timedelta(hours=1))[url]["throttles_last_hour"] == 2
    gone = shown(second + timedelta(hours=1))[url]
    assert (gone["throttles_last_hour"], gone["throttled_in_last_hour"]) == (0, False)


class Spin:
    """The shard order's tie-break a take starts from (``pace_take``'s spin), fixed."""

    def __init__(self, spin: int) -> None:
        self.spin = spin

    def randrange(self, stop: int) -> int:
        return self.spin % stop


@pytest.mark.parametrize("spin", [0, 1])
def test_a_take_draws_on_the_shard_holding_the_most_tokens(conn: db.Connection,
                                                            spin: int) -> None:
    """A bucket of two shards, one spent: whichever shard the spin puts first, a send takes
    the token the other holds (drawing on the spent one would book it a slot at the back and
    leave the full one to overflow: the bucket giving less than its rate)."""
    from datetime import UTC, datetime

    now = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
    pacing.set_rate(conn, "email", 20.0, 20.0, now)
    conn.execute("update rate_shards set tokens = 0 where key = 'email' and shard = 0")
    wanted = Counter({"email": 1})
    with db.transaction(conn):
        rows = pacing.submit_take(conn, wanted, now, Spin(spin)).rows()  # type: ignore[arg-type]
    (row,) = rows
    assert (row["shard"], row["taken"]) == (1, 1), row
