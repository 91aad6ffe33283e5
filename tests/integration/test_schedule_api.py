"""The application API on a real Postgres: idempotency, validation that writes nothing, the
caller's transaction, reschedule, cancel and opt-out."""

from __future__ import annotations

import base64
import re
import secrets
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from reminders import db, schedules
from reminders.errors import InvalidInput, NotFound
from reminders.local import pipeline
from tests.conftest import T0, Harness

URL = "https://hooks.example.com/reminders"
TABLES = ("tenants", "schedules", "schedule_recipients", "deliveries", "opt_outs",
          "delivery_events", "attempts")
KEY_SHAPE = re.compile(
    r"^schedule:(?P<id>\d+)/(?P<generation>\d+):(?P<stamp>\d{8}T\d{6}Z):(?P<recipient>.+)"
    r":(?P<channel>webhook|email|sms)$")


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def register(conn: db.Connection, url: str = URL, secret: str | None = None) -> None:
    """An endpoint row as written before secrets were encrypted (the API only needs it to
    exist; the consumer tests sign with sealed secrets)."""
    conn.execute("insert into endpoints (tenant, url, secret) values (null, %s, %s)",
                 (url, secret or new_secret()))


def counts(conn: db.Connection) -> dict[str, int]:
    out = {}
    for table in TABLES:
        row = conn.execute(f"select count(*) as n from {table}").fetchone()
        assert row is not None
        out[table] = int(row["n"])
    return out


def deliveries(conn: db.Connection) -> list[dict[str, Any]]:
    return conn.execute(
        "select delivery_key, recipient, channel, destination, generation, occurrence_at,"
        " due_at, revision, state, reason from deliveries order by id").fetchall()


def schedule_webhook(conn: db.Connection, **overrides: Any) -> schedules.ScheduleResult:
    args: dict[str, Any] = {"tenant": "acme", "recipients": ["alice"], "channel": "webhook",
                            "to": URL, "at": T0 + timedelta(minutes=5), "now": T0,
                            "key": "k1"}
    args.update(overrides)
    return schedules.schedule(conn, **args)


# ---------------------------------------------------------------- schedule


def test_schedule_creates_one_delivery_with_a_stable_key(conn: db.Connection) -> None:
    register(conn)
    result = schedule_webhook(conn, payload={"invoice": 17})
    assert result.created is True
    assert result.tenant == "acme" and result.schedule_key == "k1"
    key = f"schedule:{result.schedule_id}/0:20270301T090500Z:alice:webhook"
    assert result.deliveries == [schedules.DeliveryRef("alice", key, T0 + timedelta(minutes=5),
                                                       "scheduled")]
    assert result.as_json() == {
        "tenant": "acme", "schedule_key": "k1", "created": True, "delivery_key": key,
        "deliveries": [{"recipient": "alice", "delivery_key": key,
                        "due_at": "2027-03-01T09:05:00Z", "state": "scheduled"}]}
    assert deliveries(conn) == [{
        "delivery_key": key, "recipient": "alice", "channel": "webhook", "destination": URL,
        "generation": 0, "occurrence_at": T0 + timedelta(minutes=5),
        "due_at": T0 + timedelta(minutes=5), "revision": "1", "state": "scheduled",
        "reason": None}]
    row = conn.execute("select payload, state, kind from schedules").fetchone()
    assert row == {"payload": {"invoice": 17}, "state": "active", "kind": "default"}


def test_delivery_keys_have_the_documented_shape(conn: db.Connection) -> None:
    berlin = timezone(timedelta(hours=1))
    result = schedules.schedule(
        conn, tenant="acme", recipients=["bob@example.com", "alice@example.com",
                                         "bob@example.com"],
        channel="email", at=datetime(2027, 3, 2, 8, 30, 15, tzinfo=berlin), now=T0, key="mail")
    keys = sorted(d.delivery_key for d in result.deliveries)
    sid = result.schedule_id
    assert keys == [f"schedule:{sid}/0:20270302T073015Z:alice@example.com:email",
                    f"schedule:{sid}/0:20270302T073015Z:bob@example.com:email"]
    for key in keys:
        match = KEY_SHAPE.match(key)
        assert match is not None
        assert match["id"] == str(sid) and match["generation"] == "0"
        assert match["stamp"] == "20270302T073015Z" and match["channel"] == "email"
    assert [(d["recipient"], d["destination"]) for d in deliveries(conn)] == [
        ("bob@example.com", "bob@example.com"), ("alice@example.com", "alice@example.com")]


def test_schedule_is_idempotent_on_key(conn: db.Connection) -> None:
    register(conn)
    first = schedule_webhook(conn, recipients=["alice", "bob"], payload={"a": 1})
    before = counts(conn)
    assert before["schedules"] == 1 and before["deliveries"] == 2
    again = schedule_webhook(conn, recipients=["alice", "bob"], payload={"a": 1},
                             now=T0 + timedelta(minutes=1))
    assert again.created is False
    assert again.schedule_id == first.schedule_id
    assert sorted(d.delivery_key for d in again.deliveries) == sorted(
        d.delivery_key for d in first.deliveries)
    assert counts(conn) == before


def test_the_same_instant_in_another_offset_is_the_same_request(conn: db.Connection) -> None:
    register(conn)
    first = schedule_webhook(conn)
    before = counts(conn)
    plus_two = timezone(timedelta(hours=2))
    again = schedule_webhook(conn, at=datetime(2027, 3, 1, 11, 5, tzinfo=plus_two))
    assert again.created is False
    assert [d.delivery_key for d in again.deliveries] == [
        d.delivery_key for d in first.deliveries]
    assert counts(conn) == before


@pytest.mark.parametrize("change", [
    {"at": T0 + timedelta(minutes=6)},
    {"recipients": ["alice", "carol"]},
    {"payload": {"a": 2}},
    {"revision": "2"},
    {"kind": "trip"},
])
def test_the_same_key_for_a_different_request_is_refused(conn: db.Connection,
                                                         change: dict[str, Any]) -> None:
    register(conn)
    conn.execute("insert into kinds (name) values ('trip')")
    schedule_webhook(conn, payload={"a": 1})
    before = counts(conn)
    with pytest.raises(InvalidInput) as err:
        schedule_webhook(conn, **{"payload": {"a": 1}, **change})
    assert str(err.value) == ("key 'k1' was already used for a different request; "
                              "use reschedule to change it, or a new key")
    assert counts(conn) == before


def test_the_same_key_in_another_tenant_is_another_schedule(conn: db.Connection) -> None:
    register(conn)
    a = schedule_webhook(conn, tenant="acme")
    b = schedule_webhook(conn, tenant="globex")
    assert a.created is True and b.created is True
    assert a.schedule_id != b.schedule_id
    assert counts(conn)["deliveries"] == 2


def _too_big() -> dict[str, Any]:
    # {"x": "…"} is 9 bytes of jsonb text (the form the limit is measured on) around the string
    return {"x": "a" * (schedules.MAX_PAYLOAD_BYTES - 9 + 1)}


INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("naive at", {"at": datetime(2027, 3, 1, 9, 5)},
     "at must carry a UTC offset or zone, got naive 2027-03-01T09:05:00"),
    ("empty recipient", {"recipients": [""]}, "recipient must be a non-empty string"),
    ("blank recipient", {"recipients": ["alice", "   "]}, "recipient must be a non-empty string"),
    ("no recipients", {"recipients": []}, "at least one recipient is required"),
    ("oversized payload", {"payload": _too_big()}, "payload is 16385 bytes; the limit is 16384"),
    ("list payload", {"payload": [1]}, "payload must be a JSON object, got list"),
    ("string payload", {"payload": "hello"}, "payload must be a JSON object, got str"),
    ("unserialisable payload", {"payload": {"when": T0}},
     "payload is not JSON-serialisable: Object of type datetime is not JSON serializable"),
    ("unknown kind", {"kind": "nope"},
     "unknown kind 'nope'; create it with `reminders kinds set`"),
    ("unknown channel", {"channel": "fax"},
     "unknown channel 'fax'; expected one of webhook, email, sms"),
    ("webhook without an endpoint", {"to": "https://unregistered.example.com/x"},
     "no webhook endpoint registered for https://unregistered.example.com/x; "
     "register it with `reminders endpoints add URL --secret whsec_...`"),
    ("webhook without a URL", {"to": None},
     "webhook channel needs an http(s) URL to send to, got NULL"),
    ("webhook to a non-http URL", {"to": "ftp://hooks.example.com/x"},
     "webhook channel needs an http(s) URL to send to, got 'ftp://hooks.example.com/x'"),
    ("bad e-mail recipient", {"channel": "email", "to": None, "recipients": ["alice"]},
     "email: 'alice' is not an e-mail address"),
    ("bad e-mail to", {"channel": "email", "to": "alice@localhost"},
     "email: 'alice@localhost' is not an e-mail address"),
    ("bad phone", {"channel": "sms", "to": None, "recipients": ["0301234567"]},
     "sms: '0301234567' is not an E.164 phone number (+ and 8-15 digits)"),
    ("short phone", {"channel": "sms", "to": "+4912"},
     "sms: '+4912' is not an E.164 phone number (+ and 8-15 digits)"),
    ("neither at nor rule", {"at": None},
     "give exactly one of: an instant (at) or a recurrence (rrule, tz, start)"),
    ("bad tenant", {"tenant": "acme corp"},
     "tenant must be 1-200 letters, digits or _.:- , got 'acme corp'"),
    ("empty revision", {"revision": ""},
     "revision must be a non-empty string of at most 100 characters"),
    ("empty key", {"key": ""}, "key must be 1-200 characters"),
]


@pytest.mark.parametrize(("url", "message"), [
    ("https://hooks.example.com\x01.evil/x",
     "to: webhook URL: the host contains a control character (U+0001)"),
    ("https://hooks.example.com/a\tb", "to: webhook URL: the path contains a control character "
                                       "(U+0009)"),
    ("https://hooks.example.com/a b", "to: webhook URL: the path contains whitespace (U+0020)"),
])
def test_a_webhook_url_with_a_control_character_or_whitespace_is_refused(
        conn: db.Connection, url: str, message: str) -> None:
    register(conn, url)  # an endpoint row written before URLs were checked when registered
    before = counts(conn)
    with pytest.raises(InvalidInput) as err:
        schedule_webhook(conn, to=url)
    assert str(err.value) == message
    assert counts(conn) == before


@pytest.mark.parametrize(("change", "message"), [(c, m) for _, c, m in INVALID],
                         ids=[name for name, _, _ in INVALID])
def test_invalid_input_is_refused_and_writes_nothing(conn: db.Connection,
                                                     change: dict[str, Any],
                                                     message: str) -> None:
    register(conn)
    before = counts(conn)
    with pytest.raises(InvalidInput) as err:
        schedule_webhook(conn, **change)
    assert str(err.value) == message
    assert counts(conn) == before
    assert before["tenants"] == 0


def test_a_payload_of_exactly_the_limit_is_accepted(conn: db.Connection) -> None:
    register(conn)
    payload = {"x": "a" * (schedules.MAX_PAYLOAD_BYTES - 9)}
    result = schedule_webhook(conn, payload=payload)
    assert result.created is True
    assert conn.execute("select payload from schedules").fetchone() == {"payload": payload}


# ---------------------------------------------------------------- the caller's transaction


class Boom(Exception):
    pass


def test_a_rolled_back_booking_takes_its_reminders_with_it(conn: db.Connection) -> None:
    register(conn)
    before = counts(conn)
    with pytest.raises(Boom), conn.transaction():
        result = schedule_webhook(conn)
        assert len(result.deliveries) == 1
        assert counts(conn)["deliveries"] == 1  # visible inside the transaction...
        raise Boom("the booking failed")
    assert counts(conn) == before  # ...and gone with it


def test_nothing_is_committed_before_the_caller_commits(conn: db.Connection,
                                                        database_url: str) -> None:
    register(conn)
    with db.connect(database_url) as other:
        with conn.transaction():
            schedule_webhook(conn)
            assert counts(other)["deliveries"] == 0
            assert counts(other)["schedules"] == 0
        assert counts(other)["deliveries"] == 1
        assert counts(other)["schedules"] == 1


def test_a_refused_call_leaves_the_callers_transaction_usable(conn: db.Connection) -> None:
    register(conn)
    with conn.transaction():
        conn.execute("create table bookings (id int primary key)")
        conn.execute("insert into bookings values (1)")
        schedule_webhook(conn, key="good")
        with pytest.raises(InvalidInput):
            # refused after writing the tenant of the second call: its savepoint rolls back
            schedule_webhook(conn, key="bad", tenant="globex",
                             to="https://unregistered.example.com/x")
        schedule_webhook(conn, key="also-good", recipients=["bob"])
    assert conn.execute("select count(*) as n from bookings").fetchone() == {"n": 1}
    assert [r["id"] for r in conn.execute("select id from tenants order by id")] == ["acme"]
    assert [r["schedule_key"] for r in conn.execute(
        "select schedule_key from schedules order by id")] == ["good", "also-good"]
    assert counts(conn)["deliveries"] == 2


# ---------------------------------------------------------------- reschedule


def test_reschedule_to_a_new_time_suppresses_and_replaces(conn: db.Connection) -> None:
    register(conn)
    first = schedule_webhook(conn)
    old_key = first.deliveries[0].delivery_key
    new_at = T0 + timedelta(hours=2)
    moved = schedules.reschedule(conn, tenant="acme", key="k1", at=new_at,
                                 now=T0 + timedelta(minutes=1))
    new_key = f"schedule:{first.schedule_id}/1:20270301T110000Z:alice:webhook"
    assert moved.deliveries == [schedules.DeliveryRef("alice", new_key, new_at, "scheduled")]
    assert new_key != old_key
    rows = deliveries(conn)
    assert [(r["delivery_key"], r["generation"], r["due_at"], r["state"], r["reason"])
            for r in rows] == [
        (old_key, 0, T0 + timedelta(minutes=5), "suppressed", "rescheduled"),
        (new_key, 1, new_at, "scheduled", None)]
    row = conn.execute("select at, generation, revision from schedules").fetchone()
    assert row == {"at": new_at, "generation": 1, "revision": "1"}


def test_reschedule_twice_moves_through_generations(conn: db.Connection) -> None:
    register(conn)
    first = schedule_webhook(conn)
    schedules.reschedule(conn, tenant="acme", key="k1", at=T0 + timedelta(hours=1), now=T0)
    last = schedules.reschedule(conn, tenant="acme", key="k1", at=T0 + timedelta(hours=3),
                                now=T0)
    sid = first.schedule_id
    assert [d.delivery_key for d in last.deliveries] == [
        f"schedule:{sid}/2:20270301T120000Z:alice:webhook"]
    assert [(r["generation"], r["state"]) for r in deliveries(conn)] == [
        (0, "suppressed"), (1, "suppressed"), (2, "scheduled")]
    pending = conn.execute("select count(*) as n from deliveries where state = 'scheduled'")
    assert pending.fetchone() == {"n": 1}


def test_reschedule_to_a_new_revision_replaces_the_pending_delivery(
        conn: db.Connection) -> None:
    register(conn)
    first = schedule_webhook(conn, recipients=["alice", "bob"])
    bumped = schedules.reschedule(conn, tenant="acme", key="k1", revision="2",
                                  now=T0 + timedelta(minutes=1))
    sid, due = first.schedule_id, T0 + timedelta(minutes=5)
    assert sorted(bumped.deliveries, key=lambda d: d.recipient) == [
        schedules.DeliveryRef("alice", f"schedule:{sid}/1:20270301T090500Z:alice:webhook", due,
                              "scheduled"),
        schedules.DeliveryRef("bob", f"schedule:{sid}/1:20270301T090500Z:bob:webhook", due,
                              "scheduled")]
    old_keys = {d.delivery_key for d in first.deliveries}
    assert old_keys.isdisjoint(d.delivery_key for d in bumped.deliveries)
    rows = deliveries(conn)
    assert sorted((r["recipient"], r["generation"], r["occurrence_at"], r["revision"],
                   r["state"], r["reason"]) for r in rows) == [
        ("alice", 0, due, "1", "suppressed", "rescheduled"),
        ("alice", 1, due, "2", "scheduled", None),
        ("bob", 0, due, "1", "suppressed", "rescheduled"),
        ("bob", 1, due, "2", "scheduled", None)]


def test_a_revision_with_nothing_pending_resends_nothing(harness: Harness) -> None:
    h = harness
    url = h.receiver.hook_url("ok")
    register(h.conn, url, h.receiver.secret)
    first = schedule_webhook(h.conn, to=url, now=h.clock.now())
    h.clock.advance(timedelta(minutes=5))
    out = pipeline.run(h.rt)
    assert out["work"]["idle"] is True
    sent_key = first.deliveries[0].delivery_key
    assert [(r["delivery_key"], r["state"]) for r in deliveries(h.conn)] == [(sent_key, "sent")]
    before = counts(h.conn)
    bumped = schedules.reschedule(h.conn, tenant="acme", key="k1", revision="2",
                                  now=h.clock.now())
    assert bumped.deliveries == []
    assert counts(h.conn) == before
    assert [(r["delivery_key"], r["state"]) for r in deliveries(h.conn)] == [(sent_key, "sent")]
    row = h.conn.execute("select revision, generation, state from schedules").fetchone()
    assert row == {"revision": "2", "generation": 1, "state": "active"}
    assert h.receiver.stats()["effects"] == {sent_key: 1}


def test_a_stored_webhook_url_with_a_control_character_fails_when_sent(
        harness: Harness) -> None:
    # Rows written before URLs were checked: urlsplit would drop the tab and send to
    # 127.0.0.1 with the raw host in the Host header. The send refuses it: failed, nothing sent.
    h = harness
    url = h.receiver.hook_url("ok")
    register(h.conn, url, h.receiver.secret)
    first = schedule_webhook(h.conn, to=url, now=h.clock.now())
    stored = url.replace("127.0.0.1", "127.0.0.1\t", 1)
    for table, column in (("endpoints", "url"), ("schedules", "destination"),
                          ("deliveries", "destination")):
        h.conn.execute(f"update {table} set {column} = %s", (stored,))
    h.clock.advance(timedelta(minutes=5))
    out = pipeline.run(h.rt)
    assert out["work"]["idle"] is True
    key = first.deliveries[0].delivery_key
    assert [(r["delivery_key"], r["state"], r["reason"]) for r in deliveries(h.conn)] == [
        (key, "failed", "webhook URL: the host contains a control character (U+0009)")]
    assert h.receiver.stats()["requests"] == {}


def test_reschedule_refuses_bad_input_and_changes_nothing(conn: db.Connection) -> None:
    register(conn)
    schedule_webhook(conn)
    before, rows = counts(conn), deliveries(conn)
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({}, InvalidInput, "reschedule needs a new time (at), rule or revision"),
        ({"at": datetime(2027, 3, 2, 9, 0)}, InvalidInput,
         "at must carry a UTC offset or zone, got naive 2027-03-02T09:00:00"),
        ({"revision": ""}, InvalidInput,
         "revision must be a non-empty string of at most 100 characters"),
        ({"revision": "x" * 101}, InvalidInput,
         "revision must be a non-empty string of at most 100 characters"),
        ({"key": "nope", "revision": "2"}, NotFound,
         "no schedule with key 'nope' for tenant 'acme'"),
        ({"tenant": "globex", "revision": "2"}, NotFound,
         "no schedule with key 'k1' for tenant 'globex'"),
    ]
    for change, error, message in cases:
        args: dict[str, Any] = {"tenant": "acme", "key": "k1", "now": T0, **change}
        with pytest.raises(error) as err:
            schedules.reschedule(conn, **args)
        assert str(err.value) == message
    assert counts(conn) == before
    assert deliveries(conn) == rows


# ---------------------------------------------------------------- cancel


def test_cancel_suppresses_pending_and_a_second_cancel_is_refused(conn: db.Connection) -> None:
    register(conn)
    first = schedule_webhook(conn, recipients=["alice", "bob"])
    other = schedule_webhook(conn, key="k2")
    assert schedules.cancel(conn, tenant="acme", key="k1", now=T0 + timedelta(minutes=1)) == 2
    rows = {r["delivery_key"]: (r["state"], r["reason"]) for r in deliveries(conn)}
    assert rows == {
        **{d.delivery_key: ("suppressed", "cancelled") for d in first.deliveries},
        other.deliveries[0].delivery_key: ("scheduled", None)}
    states = {r["schedule_key"]: r["state"]
              for r in conn.execute("select schedule_key, state from schedules")}
    assert states == {"k1": "cancelled", "k2": "active"}
    before = counts(conn)
    with pytest.raises(InvalidInput) as err:
        schedules.cancel(conn, tenant="acme", key="k1", now=T0 + timedelta(minutes=2))
    assert str(err.value) == "schedule 'k1' is cancelled"
    with pytest.raises(InvalidInput) as err:
        schedules.reschedule(conn, tenant="acme", key="k1", at=T0 + timedelta(hours=1),
                             now=T0 + timedelta(minutes=2))
    assert str(err.value) == "schedule 'k1' is cancelled"
    assert counts(conn) == before


def test_cancel_of_an_unknown_key_is_not_found(conn: db.Connection) -> None:
    with pytest.raises(NotFound) as err:
        schedules.cancel(conn, tenant="acme", key="missing", now=T0)
    assert str(err.value) == "no schedule with key 'missing' for tenant 'acme'"


def test_cancel_inside_a_rolled_back_transaction_cancels_nothing(conn: db.Connection) -> None:
    register(conn)
    schedule_webhook(conn)
    with pytest.raises(Boom), conn.transaction():
        assert schedules.cancel(conn, tenant="acme", key="k1", now=T0) == 1
        raise Boom("undo")
    assert [(r["state"], r["reason"]) for r in deliveries(conn)] == [("scheduled", None)]
    assert conn.execute("select state from schedules").fetchone() == {"state": "active"}


# ---------------------------------------------------------------- opt out, opt in


def opt_outs(conn: db.Connection) -> list[tuple[str, str, str]]:
    return [(r["tenant"], r["recipient"], r["channel"]) for r in conn.execute(
        "select tenant, recipient, channel from opt_outs order by tenant, recipient, channel")]


def test_opt_out_then_opt_in_round_trip(conn: db.Connection) -> None:
    schedules.opt_out(conn, tenant="acme", recipient="bob", channel="webhook", now=T0)
    schedules.opt_out(conn, tenant="acme", recipient="bob", channel="webhook", now=T0)
    schedules.opt_out(conn, tenant="acme", recipient="bob", channel="sms", now=T0)
    assert opt_outs(conn) == [("acme", "bob", "sms"), ("acme", "bob", "webhook")]
    assert schedules.opt_in(conn, tenant="acme", recipient="bob", channel="webhook") is True
    assert opt_outs(conn) == [("acme", "bob", "sms")]
    assert schedules.opt_in(conn, tenant="acme", recipient="bob", channel="webhook") is False
    assert schedules.opt_in(conn, tenant="globex", recipient="bob", channel="sms") is False
    assert opt_outs(conn) == [("acme", "bob", "sms")]


def test_opt_out_leaves_pending_deliveries_for_the_recheck(conn: db.Connection) -> None:
    register(conn)
    schedule_webhook(conn)
    schedules.opt_out(conn, tenant="acme", recipient="alice", channel="webhook", now=T0)
    assert [(r["state"], r["reason"]) for r in deliveries(conn)] == [("scheduled", None)]


@pytest.mark.parametrize(("recipient", "channel", "message"), [
    ("", "webhook", "recipient must be a non-empty string"),
    ("bob", "fax", "unknown channel 'fax'; expected one of webhook, email, sms"),
])
def test_opt_out_refuses_bad_input(conn: db.Connection, recipient: str, channel: str,
                                   message: str) -> None:
    with pytest.raises(InvalidInput) as err:
        schedules.opt_out(conn, tenant="acme", recipient=recipient, channel=channel, now=T0)
    assert str(err.value) == message
    assert counts(conn)["opt_outs"] == 0 and counts(conn)["tenants"] == 0


def test_database_errors_surface_as_domain_errors(conn: db.Connection) -> None:
    # A check constraint the API does not pre-validate still comes back as InvalidInput.
    with pytest.raises(InvalidInput) as err:
        db.execute(conn, "endpoint_add", {"tenant": None, "url": "ftp://x", "now": T0,
                                          "ciphertext": b"c", "data_key": b"k", "key_id": "k"})
    assert str(err.value) == ('new row for relation "endpoints" violates check constraint '
                              '"endpoints_url_check" (endpoints_url_check)')
    assert not isinstance(err.value, psycopg.Error)
    assert type(err.value.__cause__) is psycopg.errors.CheckViolation


def test_a_replayed_call_answers_one_row_a_recipient_not_the_series_history(
        harness: Harness) -> None:
    """A long-running recurring schedule's replayed call answers what the first call did, its
    pending delivery for each recipient, however many occurrences it has sent since."""
    from reminders.recurrence import Recurrence

    h = harness
    url = h.receiver.hook_url("daily")
    register(h.conn, url, h.receiver.secret)
    start = h.clock.now()
    rec = Recurrence(rrule="FREQ=DAILY", tz="UTC", local_start=start.replace(tzinfo=None),
                     gap="shift", overlap="first")

    def call() -> schedules.ScheduleResult:
        return schedules.schedule(h.conn, tenant="acme", recipients=["ann", "bob"],
                                  channel="webhook", to=url, recurrence=rec, now=start,
                                  key="digest")

    first = call()
    for _ in range(6):  # six days: six occurrences sent each, the seventh pending
        pipeline.run(h.rt)
        h.clock.advance(timedelta(days=1))
    sent = h.conn.execute("select count(*) as n from deliveries where state = 'sent'"
                          ).fetchone()
    assert sent == {"n": 12}
    again = call()
    assert not again.created
    assert [d.recipient for d in again.deliveries] == ["ann", "bob"]
    assert [d.state for d in again.deliveries] == ["scheduled", "scheduled"]
    assert len(first.deliveries) == 2


@pytest.mark.parametrize(("payload", "why"), [
    ({"a": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]},
     "payload cannot be read back as JSON: it nests deeper than 32 levels"),
    ({"n": float("1e308") * 10}, "payload is not JSON-serialisable"),
])
def test_a_payload_no_reader_keeps_whole_is_refused_at_entry(
        conn: db.Connection, payload: dict[str, Any], why: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(why)):
        schedules.schedule(conn, tenant="acme", recipients=["a@example.com"], channel="email",
                           at=T0, now=T0, payload=payload)
