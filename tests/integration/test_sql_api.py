"""The SQL API alone, as an application in any language calls it: a plain psycopg connection
logged in as a login role granted ``reminders_client`` and mapped to a tenant with
``grant_tenant``. No Python API on the application's side; the service's side (scanner,
consumer) runs as it does in production."""

from __future__ import annotations

import itertools
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from reminders import db, scanner
from reminders.local import pipeline
from tests.conftest import T0, Harness, make_runtime
from tests.faults import waits_on_a_lock

_logins = itertools.count()
SCHEDULE_EMAIL = ("select * from reminders.schedule(key => %s, recipients => %s,"
                  " channel => 'email', at => %s)")


@dataclass
class Client:
    """One application: its login and a plain connection (autocommit off, like most
    drivers' default transactions)."""

    login: str
    url: str
    conn: psycopg.Connection[dict[str, Any]]

    def rows(self, query: str, params: Any = None) -> list[dict[str, Any]]:
        with self.conn.transaction():
            return self.conn.execute(query, params).fetchall()

    def refused(self, query: str, params: Any = None) -> psycopg.Error:
        with pytest.raises(psycopg.Error) as err, self.conn.transaction():
            self.conn.execute(query, params)
        return err.value


@pytest.fixture
def clients(database_url: str) -> Iterator[Callable[[str | None], Client]]:
    """Makes application logins: each granted reminders_client and mapped to a tenant (or to
    none), with a bookings table of its own in public."""
    made: list[Client] = []
    with db.connect(database_url) as admin:  # its search_path is the service's schema
        admin.execute("create table if not exists public.bookings (id int primary key,"
                      " who text)")

        def make(tenant: str | None) -> Client:
            login = f"app_{os.getpid()}_{next(_logins)}_{uuid.uuid4().hex[:6]}"
            role = sql.Identifier(login)
            admin.execute(sql.SQL("create role {} login password 'pw'").format(role))
            admin.execute(sql.SQL("grant reminders_client to {}").format(role))
            admin.execute(sql.SQL("grant select, insert on public.bookings to {}").format(role))
            if tenant is not None:
                admin.execute("select reminders.grant_tenant(%s, %s)", (login, tenant))
            url = make_conninfo(database_url, user=login, password="pw")
            # Named for the login: how another session finds its backend (the pooler's).
            conn = psycopg.connect(url, row_factory=dict_row, application_name=login)
            client = Client(login, url, conn)
            made.append(client)
            return client

        yield make
        for client in made:
            client.conn.close()
            role = sql.Identifier(client.login)
            admin.execute(sql.SQL("drop owned by {}").format(role))
            admin.execute(sql.SQL("drop role {}").format(role))


def sqlstate(err: psycopg.Error) -> tuple[str | None, str | None]:
    return err.sqlstate, err.diag.message_primary


def states(conn: db.Connection) -> list[tuple[str, str, str | None]]:
    return [(r["delivery_key"], r["state"], r["superseded"]) for r in conn.execute(
        "select delivery_key, state, superseded from deliveries order by id")]


# ---------------------------------------------------------------- schedule


def test_create_is_idempotent_on_the_key(clients: Callable[[str | None], Client],
                                         conn: db.Connection) -> None:
    acme = clients("acme")
    first = acme.rows(SCHEDULE_EMAIL, ("booking-1", ["alice@example.com", "bob@example.com"], T0))
    again = acme.rows(SCHEDULE_EMAIL, ("booking-1", ["alice@example.com", "bob@example.com"],
                                       T0))
    assert [(r["created"], r["recipient"], r["state"]) for r in first] == [
        (True, "alice@example.com", "scheduled"), (True, "bob@example.com", "scheduled")]
    assert [r["delivery_key"] for r in again] == [r["delivery_key"] for r in first]
    assert {r["created"] for r in again} == {False}
    assert first[0]["delivery_key"].startswith(f"schedule:{first[0]['schedule_id']}/0:")
    assert conn.execute("select count(*) as n from deliveries").fetchone() == {"n": 2}
    assert conn.execute("select tenant from schedules").fetchall() == [{"tenant": "acme"}]
    assert acme.rows("select delivery_key, state from reminders.my_deliveries"
                     " order by recipient") == [
        {"delivery_key": r["delivery_key"], "state": "scheduled"} for r in first]


def test_the_same_key_with_a_different_request_is_refused(
        clients: Callable[[str | None], Client], conn: db.Connection) -> None:
    acme = clients("acme")
    acme.rows(SCHEDULE_EMAIL, ("booking-1", ["alice@example.com"], T0))
    err = acme.refused(SCHEDULE_EMAIL, ("booking-1", ["alice@example.com"],
                                        T0 + timedelta(minutes=5)))
    assert sqlstate(err) == ("RM409", "key 'booking-1' was already used for a different "
                                      "request; use reschedule to change it, or a new key")
    assert conn.execute("select count(*) as n from deliveries").fetchone() == {"n": 1}


@pytest.mark.parametrize(("call", "message"), [
    ("select * from reminders.schedule(key => 'k', recipients => array['a@example.com'],"
     " channel => 'fax', at => now())",
     "unknown channel 'fax'; expected one of webhook, email, sms"),
    ("select * from reminders.schedule(key => 'k', recipients => array['a@example.com'],"
     " channel => 'email')",
     "give exactly one of: an instant (at) or a recurrence (rrule, tz, start)"),
    ("select * from reminders.schedule(key => 'k', recipients => array['a:b@example.com'],"
     " channel => 'email', at => now())",
     "recipient 'a:b@example.com' contains ':' (the delivery key's separator)"),
    ("select * from reminders.schedule(key => 'k', recipients => array['x@example.com'],"
     " channel => 'email', at => now(), payload => '[1]')",
     "payload must be a JSON object, got array"),
    ("select * from reminders.schedule(key => 'k', recipients => array['+4930123'],"
     " channel => 'sms', at => now())",
     "sms: '+4930123' is not an E.164 phone number (+ and 8-15 digits)"),
    ("select * from reminders.reschedule(key => 'k')",
     "reschedule needs a new time (at), rule or revision"),
])
def test_bad_input_is_refused_with_its_sqlstate(clients: Callable[[str | None], Client],
                                                conn: db.Connection, call: str,
                                                message: str) -> None:
    err = clients("acme").refused(call)
    assert sqlstate(err) == ("RM400", message)
    assert conn.execute("select count(*) as n from schedules").fetchone() == {"n": 0}


# ---------------------------------------------------------------- webhook URLs

SCHEDULE_WEBHOOK = ("select * from reminders.schedule(key => %s, recipients => %s,"
                    " channel => 'webhook', at => %s, destination => %s)")
HOOK = "https://hooks.example.com/reminders"


def register_endpoint(conn: db.Connection, url: str) -> None:
    """An endpoint row as the operator's tools wrote it before URLs were checked when
    registered (the check ran only at send time then)."""
    conn.execute("insert into endpoints (tenant, url, secret) values (null, %s, %s)",
                 (url, "whsec_" + "A" * 32))


@pytest.mark.parametrize(("url", "message"), [
    ("https://hooks.example.com/a\tb",
     "destination: webhook URL: the path contains a control character (U+0009)"),
    ("https://hooks.example.com/a b",
     "destination: webhook URL: the path contains whitespace (U+0020)"),
    ("https://hooks.example.com\x7f.evil/x",
     "destination: webhook URL: the host contains a control character (U+007F)"),
    ("https://hooks.example.com/x?a=\x85b",
     "destination: webhook URL: the query contains a control character (U+0085)"),
    ("https://hooks.example.com/x\u3000",
     "destination: webhook URL: the URL ends with whitespace (U+3000)"),
], ids=["tab", "space", "del", "nel", "ideographic-space"])
def test_a_webhook_url_with_a_control_character_or_whitespace_is_refused(
        clients: Callable[[str | None], Client], conn: db.Connection, url: str,
        message: str) -> None:
    register_endpoint(conn, url)
    err = clients("acme").refused(SCHEDULE_WEBHOOK, ("hook-1", ["alice"], T0, url))
    assert sqlstate(err) == ("RM400", message)
    assert conn.execute("select count(*) as n from schedules").fetchone() == {"n": 0}


def test_a_nul_in_a_webhook_url_never_reaches_the_sql_api(
        clients: Callable[[str | None], Client], conn: db.Connection) -> None:
    # Postgres text cannot hold U+0000: the driver refuses the parameter before sending it, and
    # a NUL made inside SQL is refused where it is made. No endpoint row can hold one either.
    acme = clients("acme")
    url = "https://hooks.example.com\x00.evil/x"
    with pytest.raises(psycopg.DataError, match="NUL"):
        acme.rows(SCHEDULE_WEBHOOK, ("hook-1", ["alice"], T0, url))
    err = acme.refused(SCHEDULE_WEBHOOK.replace("destination => %s",
                                                "destination => %s || chr(0) || '.evil/x'"),
                       ("hook-1", ["alice"], T0, "https://hooks.example.com"))
    assert sqlstate(err) == ("54000", "null character not permitted")
    assert conn.execute("select count(*) as n from schedules").fetchone() == {"n": 0}


def test_a_clean_registered_webhook_url_is_scheduled(
        clients: Callable[[str | None], Client], conn: db.Connection) -> None:
    register_endpoint(conn, HOOK)
    acme = clients("acme")
    (row,) = acme.rows(SCHEDULE_WEBHOOK, ("hook-1", ["alice"], T0, HOOK))
    assert (row["created"], row["recipient"], row["state"]) == (True, "alice", "scheduled")
    assert acme.rows("select destination from reminders.my_deliveries") == [
        {"destination": HOOK}]


def test_the_endpoint_check_probes_its_index_however_many_endpoints_there_are(
        clients: Callable[[str | None], Client], conn: db.Connection) -> None:
    """schedule_for finds the webhook's endpoint (the tenant's own, or a shared one) with
    probes of endpoints_tenant_url, as the consumer's re-check does: never a scan of every
    tenant's endpoints (50,000 rows read for 10 webhooks, before)."""
    conn.execute("insert into tenants (id) select 'other' || n from generate_series(1, 50) n"
                 " union all select 'acme'")
    conn.execute("insert into endpoints (tenant, url, secret)"
                 " select 'other' || (n % 50 + 1), 'https://h' || n || '.example/hook',"
                 " 'whsec_x' from generate_series(1, 5000) n")
    conn.execute("insert into endpoints (tenant, url, secret) values ('acme', %s, 'whsec_x')",
                 (HOOK,))
    conn.execute("analyze endpoints")
    acme = clients("acme")
    read = ("select seq_scan, idx_scan from pg_stat_xact_user_tables"
            " where schemaname = 'reminders' and relname = 'endpoints'")
    with acme.conn.transaction():
        (row,) = acme.conn.execute(SCHEDULE_WEBHOOK, ("hook-1", ["alice"], T0, HOOK)).fetchall()
        stats = acme.conn.execute(read).fetchone()
    assert row["state"] == "scheduled"
    assert stats is not None and stats["seq_scan"] == 0 and stats["idx_scan"] >= 1, stats
    # Another tenant's URL is still not this tenant's to send to.
    err = acme.refused(SCHEDULE_WEBHOOK, ("hook-2", ["alice"], T0, "https://h7.example/hook"))
    assert sqlstate(err)[0] == "RM400"


# The SQL check against the Python one, part by part: the same words for the same URL.
URL_SAMPLES = [
    " https://hooks.example.com/x", "https://hooks.example.com/x\n", "ht\ttps://h.example/x",
    "no\x01colon", "https://us\u00a0er:pw@hooks.example.com/x",
    "https://user@hooks.example\x9f.com/x", "https://hooks.example.com:44\x013/x",
    "https://[2001:db8::1\x0b]:443/x", "https://[2001:db8::1]:44\u20283/x",
    "https://hooks.example.com?q=\x1fa#f", "https://hooks.example.com/p#frag\u2009ment",
    "https://hooks.example.com/p#f?q\x7fz", "https://h.example/a?b\u1680c#d",
    "https://a@b@h.example\u205f:1/x", "mailto:someone\u202f@example.com",
    "https:/h.example/a\u2000b?q", "https://h.example:8443/\x1cz",
    "https://h.example/\u3000/x", "https://h.example/ok",
]


def test_the_sql_url_check_words_each_refusal_as_the_python_check(
        conn: db.Connection) -> None:
    from reminders.channels.addresses import check_url_characters
    from reminders.errors import InvalidInput

    for url in URL_SAMPLES:
        try:
            check_url_characters(url, "destination: webhook URL")
            expected: tuple[str | None, str | None] = (None, None)
        except InvalidInput as exc:
            expected = ("RM400", str(exc))
        try:
            with conn.transaction():
                conn.execute("select check_url_characters(%s, 'destination: webhook URL')",
                             (url,))
            got: tuple[str | None, str | None] = (None, None)
        except psycopg.Error as err:
            got = sqlstate(err)
        assert got == expected, repr(url)


def test_a_rolled_back_booking_leaves_no_reminder_and_no_message(
        clients: Callable[[str | None], Client], harness: Harness) -> None:
    acme = clients("acme")
    with pytest.raises(ZeroDivisionError), acme.conn.transaction():
        acme.conn.execute("insert into bookings values (1, 'alice')")
        acme.conn.execute(SCHEDULE_EMAIL, ("booking-1", ["alice@example.com"], T0))
        raise ZeroDivisionError("the booking failed")
    tick = scanner.tick(harness.rt)
    assert (tick.leased, tick.published) == (0, 0)
    assert harness.rt.deliveries.depth() == 0
    assert harness.conn.execute("select count(*) as n from schedules").fetchone() == {"n": 0}
    assert acme.rows("select count(*) as n from bookings") == [{"n": 0}]
    # The same transaction committed: the booking and its reminder, published by the tick.
    with acme.conn.transaction():
        acme.conn.execute("insert into bookings values (1, 'alice')")
        acme.conn.execute(SCHEDULE_EMAIL, ("booking-1", ["alice@example.com"], T0))
    tick = scanner.tick(harness.rt)
    assert (tick.leased, tick.published) == (1, 1)


def test_the_sql_url_check_refuses_the_same_characters_as_the_python_check(
        conn: db.Connection) -> None:
    # Every code point up to U+30FF (the last control or space character is U+3000), inside
    # a path: refused by the SQL check exactly when the Python check refuses it.
    import unicodedata

    conn.execute("begin")  # a temporary function lives as long as the pooler's transaction
    conn.execute("""
        create function pg_temp.refused(url text) returns boolean language plpgsql as $f$
        begin
            perform check_url_characters(url, 'u');
            return false;
        exception when sqlstate 'RM400' then
            return true;
        end $f$""")
    refused = [r["n"] for r in conn.execute(
        "select n from generate_series(1, 12543) n where n not between 55296 and 57343"
        " and pg_temp.refused('https://h.example/a' || chr(n) || 'b') order by n")]
    expected = [n for n in range(1, 12544) if not 0xD800 <= n <= 0xDFFF
                and (unicodedata.category(chr(n)) == "Cc" or chr(n).isspace())]
    assert refused == expected


# ---------------------------------------------------------------- recurring


def schedule_daily(client: Client, key: str, rrule: str = "FREQ=DAILY") -> list[dict[str, Any]]:
    return client.rows(
        "select * from reminders.schedule(key => %s, recipients => %s, channel => 'email',"
        " rrule => %s, tz => 'Europe/Berlin', local_start => '2027-03-01 10:00')",
        (key, ["alice@example.com", "bob@example.com"], rrule))


def test_a_recurring_schedule_is_materialised_by_the_next_tick_within_its_bound(
        clients: Callable[[str | None], Client], harness: Harness, database_url: str,
        queue_urls: Any) -> None:
    acme = clients("acme")
    answered = schedule_daily(acme, "digest-1")
    assert [(r["created"], r["recipient"], r["delivery_key"]) for r in answered] == [
        (True, "alice@example.com", None), (True, "bob@example.com", None)]
    schedule_daily(acme, "digest-2")
    schedule_daily(acme, "digest-3")
    # A rule the service cannot expand is refused at entry now; one recorded before that check
    # (or by hand) still ends its schedule alone, with the reason.
    schedule_daily(acme, "broken")
    harness.conn.execute("update schedules set rrule = 'FREQ=FORTNIGHTLY'"
                         " where schedule_key = 'broken'")
    assert acme.rows("select count(*) as n from reminders.my_schedules"
                     " where pending_first") == [{"n": 4}]
    rt = make_runtime(database_url, queue_urls, harness.endpoint, harness.clock,
                      first_batch=2)
    try:
        first = scanner.tick(rt)
        assert (first.first_materialised, first.first_failed) == (2, 0)
        second = scanner.tick(rt)
        assert (second.first_materialised, second.first_failed) == (1, 1)
        third = scanner.tick(rt)
        assert (third.first_materialised, third.first_failed) == (0, 0)
    finally:
        rt.close()
    rows = acme.rows("select schedule_key, recipient, due_at, state"
                     " from reminders.my_deliveries order by schedule_key, recipient")
    # 10:00 in Berlin on 1 March 2027 is 09:00 UTC: the clock's instant, due at once.
    assert [(r["schedule_key"], r["recipient"], r["due_at"]) for r in rows] == [
        (key, who, T0) for key in ("digest-1", "digest-2", "digest-3")
        for who in ("alice@example.com", "bob@example.com")]
    broken = acme.rows("select state, pending_first, problem from reminders.my_schedules"
                       " where schedule_key = 'broken'")
    assert broken[0]["state"] == "ended" and broken[0]["pending_first"] is False
    assert "FORTNIGHTLY" in broken[0]["problem"]
    # The same request again changes nothing; the answer now names the deliveries.
    again = schedule_daily(acme, "digest-1")
    assert [(r["created"], r["due_at"]) for r in again] == [(False, T0), (False, T0)]


# ---------------------------------------------------------------- in flight


def lease(conn: db.Connection, now: Any) -> list[db.Row]:
    return db.fetch_all(conn, "lease_due", {"now": now, "batch": 10, "share": 10,
                                            "lease_seconds": 300})


def start_send(conn: db.Connection, leased: db.Row, now: Any) -> None:
    """As a consumer: take the pending lease onto the row, then start the attempt."""
    assert db.execute(conn, "deliveries_take_leases", {
        "ids": [leased["id"]], "tokens": [leased["lease_token"]], "now": now}) == 1
    started = db.fetch_all(conn, "attempts_start", {
        "ids": [leased["id"]], "tokens": [leased["lease_token"]],
        "deadlines": [now + timedelta(seconds=30)], "now": now})
    assert len(started) == 1


def settle(conn: db.Connection, leased: db.Row, state: str, attempt_no: int | None,
           now: Any) -> list[db.Row]:
    return db.fetch_all(conn, "deliveries_settle", {
        "ids": [leased["id"]], "tokens": [leased["lease_token"]], "states": [state],
        "reasons": [None], "due_ats": [None], "attempt_nos": [attempt_no], "now": now})


def test_cancel_while_a_send_is_in_flight_lets_that_send_stand(
        clients: Callable[[str | None], Client], conn: db.Connection) -> None:
    acme = clients("acme")
    acme.rows(SCHEDULE_EMAIL, ("trip-1", ["alice@example.com"], T0))
    (leased,) = lease(conn, T0)
    start_send(conn, leased, T0)
    assert acme.rows("select reminders.cancel('trip-1') as n") == [{"n": 1}]
    ((key, state, superseded),) = states(conn)
    assert (state, superseded) == ("leased", "cancelled")  # the lease stays with its sender
    assert settle(conn, leased, "sent", 1, T0) == [{"id": leased["id"], "state": "sent"}]
    assert acme.rows("select state from reminders.delivery_state(%s)", (key,)) == [
        {"state": "sent"}]
    assert acme.rows("select state from reminders.my_schedules") == [{"state": "cancelled"}]
    err = acme.refused("select reminders.cancel('trip-1')")
    assert sqlstate(err) == ("RM409", "schedule 'trip-1' is cancelled")


def test_reschedule_of_a_leased_delivery_before_its_send_fences_the_lease_holder(
        clients: Callable[[str | None], Client], conn: db.Connection) -> None:
    acme = clients("acme")
    acme.rows(SCHEDULE_EMAIL, ("trip-1", ["alice@example.com"], T0))
    (leased,) = lease(conn, T0)
    later = T0 + timedelta(hours=2)
    moved = acme.rows("select * from reminders.reschedule(key => 'trip-1', at => %s)",
                      (later,))
    assert [(r["created"], r["due_at"], r["state"]) for r in moved] == [
        (False, later, "scheduled")]
    assert [s for _, s, _ in states(conn)] == ["suppressed", "scheduled"]
    # The old lease holder can neither start a send nor settle: its token is gone.
    assert db.fetch_all(conn, "attempts_start", {
        "ids": [leased["id"]], "tokens": [leased["lease_token"]],
        "deadlines": [T0 + timedelta(seconds=30)], "now": T0}) == []
    assert settle(conn, leased, "sent", None, T0) == []
    assert acme.rows("select delivery_key, state from reminders.my_deliveries"
                     " order by due_at") == [
        {"delivery_key": states(conn)[0][0], "state": "suppressed"},
        {"delivery_key": moved[0]["delivery_key"], "state": "scheduled"}]


def test_reschedule_while_a_send_is_in_flight_replaces_it_and_keeps_its_outcome(
        clients: Callable[[str | None], Client], conn: db.Connection) -> None:
    acme = clients("acme")
    acme.rows(SCHEDULE_EMAIL, ("trip-1", ["alice@example.com"], T0))
    (leased,) = lease(conn, T0)
    start_send(conn, leased, T0)
    moved = acme.rows("select * from reminders.reschedule(key => 'trip-1', revision => '2')")
    assert [r["state"] for r in moved] == ["scheduled"]
    assert [(s, sup) for _, s, sup in states(conn)] == [("leased", "rescheduled"),
                                                        ("scheduled", None)]
    # The send failed transiently: a superseded delivery is not retried, it is suppressed.
    assert settle(conn, leased, "retrying", 1, T0) == [
        {"id": leased["id"], "state": "suppressed"}]


# ---------------------------------------------------------------- opt-out


def test_opt_out_suppresses_at_the_recheck_and_opt_in_restores(
        clients: Callable[[str | None], Client], harness: Harness) -> None:
    acme = clients("acme")
    acme.rows(SCHEDULE_EMAIL, ("news-1", ["alice@example.com", "bob@example.com"], T0))
    assert acme.rows("select reminders.opt_out('alice@example.com', 'email') as added") == [
        {"added": True}]
    assert acme.rows("select reminders.opt_out('alice@example.com', 'email') as added") == [
        {"added": False}]
    assert acme.rows("select recipient, channel from reminders.my_opt_outs") == [
        {"recipient": "alice@example.com", "channel": "email"}]
    assert acme.rows("select reminders.opt_in('bob@example.com', 'email') as removed") == [
        {"removed": False}]
    out = pipeline.run(harness.rt)
    assert out["work"]["idle"] is True
    assert [(r["recipient"], r["state"]) for r in acme.rows(
        "select recipient, state from reminders.my_deliveries order by recipient")] == [
        ("alice@example.com", "suppressed"), ("bob@example.com", "sent")]
    assert acme.rows("select reason from reminders.my_deliveries where state = 'suppressed'"
                     ) == [{"reason": "opted out of email"}]


# ---------------------------------------------------------------- tenancy


def test_another_tenants_rows_are_invisible_and_untouchable(
        clients: Callable[[str | None], Client], conn: db.Connection) -> None:
    acme, globex = clients("acme"), clients("globex")
    (mine,) = acme.rows(SCHEDULE_EMAIL, ("booking-1", ["alice@example.com"], T0))
    acme.rows("select reminders.opt_out('carol@example.com', 'email')")
    key = mine["delivery_key"]
    for view in ("my_schedules", "my_deliveries", "my_opt_outs"):
        assert globex.rows(f"select * from reminders.{view}") == []
        assert acme.rows(f"select count(*) as n from reminders.{view}") == [{"n": 1}]
    not_found = [
        ("select reminders.cancel('booking-1')",
         "no schedule with key 'booking-1' for tenant 'globex'"),
        ("select * from reminders.reschedule(key => 'booking-1', at => now())",
         "no schedule with key 'booking-1' for tenant 'globex'"),
        (f"select * from reminders.delivery_state('{key}')",
         f"no delivery with key '{key}' for tenant 'globex'"),
    ]
    for call, message in not_found:
        assert sqlstate(globex.refused(call)) == ("RM404", message)
    # The same key in globex is globex's own schedule, not acme's.
    (theirs,) = globex.rows(SCHEDULE_EMAIL, ("booking-1", ["alice@example.com"], T0))
    assert theirs["created"] is True and theirs["schedule_id"] != mine["schedule_id"]
    refused = [
        "select * from reminders.deliveries",
        "select * from reminders.tenant_logins",
        "insert into reminders.opt_outs values ('acme', 'x', 'email', now())",
        f"update reminders.deliveries set state = 'sent' where delivery_key = '{key}'",
        "delete from reminders.schedules",
        "truncate reminders.deliveries",
        "create table reminders.mine (id int)",
        "drop view reminders.my_deliveries",
        "alter table reminders.deliveries disable row level security",
        "select * from reminders.cancel_for('acme', 'booking-1')",
        "select reminders.grant_tenant(current_user, 'acme')",
        "select * from reminders.schedule_for('acme', 'x', array['a@example.com'], 'email',"
        " at => now())",
    ]
    for statement in refused:
        err = globex.refused(statement)
        assert err.sqlstate in ("42501",), (statement, sqlstate(err))
    assert acme.rows("select state from reminders.delivery_state(%s)", (key,)) == [
        {"state": "scheduled"}]
    assert conn.execute("select tenant, schedule_key from schedules order by id").fetchall() == [
        {"tenant": "acme", "schedule_key": "booking-1"},
        {"tenant": "globex", "schedule_key": "booking-1"}]


def test_a_login_mapped_to_no_tenant_can_do_nothing(
        clients: Callable[[str | None], Client]) -> None:
    stranger = clients(None)
    err = stranger.refused(SCHEDULE_EMAIL, ("booking-1", ["alice@example.com"], T0))
    assert err.sqlstate == "RM403"
    assert stranger.login in (err.diag.message_primary or "")
    assert stranger.rows("select * from reminders.my_deliveries") == []


def test_set_role_does_not_change_the_tenant(clients: Callable[[str | None], Client],
                                              database_url: str) -> None:
    acme, globex = clients("acme"), clients("globex")
    with db.connect(database_url) as admin:  # a buggy deployment: globex's login may be acme
        admin.execute(sql.SQL("grant {} to {}").format(sql.Identifier(acme.login),
                                                       sql.Identifier(globex.login)))
    with globex.conn.transaction():
        globex.conn.execute(sql.SQL("set local role {}").format(sql.Identifier(acme.login)))
        globex.conn.execute(SCHEDULE_EMAIL, ("k", ["alice@example.com"], T0))
        assert globex.conn.execute("select schedule_key from reminders.my_schedules"
                                   ).fetchall() == [{"schedule_key": "k"}]
    assert acme.rows("select * from reminders.my_schedules") == []


def test_a_temporary_table_cannot_stand_in_for_the_tenant_map(
        clients: Callable[[str | None], Client], database_url: str) -> None:
    # In an application's own database PUBLIC usually keeps TEMPORARY. A temporary table named
    # like the service's tenant map must not decide the tenant of a security-definer call:
    # their search_path names pg_temp last, so the service's own table is found first.
    acme, globex = clients("acme"), clients("globex")
    acme.rows(SCHEDULE_EMAIL, ("booking-1", ["alice@example.com"], T0))
    with db.connect(database_url) as admin:
        name = admin.execute("select current_database() as d").fetchone()
        assert name is not None
        admin.execute(sql.SQL("grant temporary on database {} to {}").format(
            sql.Identifier(name["d"]), sql.Identifier(globex.login)))
    with globex.conn.transaction():
        globex.conn.execute("create temporary table tenant_logins (login text, tenant text)")
        globex.conn.execute("insert into tenant_logins values (session_user, 'acme')")
        assert globex.conn.execute("select reminders.my_tenant() as t").fetchone() == {
            "t": "globex"}
    err = globex.refused("select reminders.cancel('booking-1')")
    assert sqlstate(err) == ("RM404", "no schedule with key 'booking-1' for tenant 'globex'")
    assert acme.rows("select state from reminders.my_schedules") == [{"state": "active"}]


def test_cancel_locks_the_schedule_before_any_of_its_deliveries(
        clients: Callable[[str | None], Client], conn: db.Connection,
        database_url: str) -> None:
    """The lock order inside the function: while the schedule is held (as a series advance
    holds it), a cancel waits there, holding none of the schedule's deliveries."""
    acme = clients("acme")
    acme.rows(SCHEDULE_EMAIL, ("trip-1", ["alice@example.com", "bob@example.com"], T0))
    with db.connect(database_url) as holder, db.connect(database_url) as probe:
        with holder.transaction():
            holder.execute("select id from schedules where schedule_key = 'trip-1' for share")
            done: list[Any] = []
            worker = threading.Thread(
                target=lambda: done.append(acme.rows("select reminders.cancel('trip-1') as n")))
            worker.start()
            assert waits_on_a_lock(probe, acme.login, worker.is_alive)
            with probe.transaction():  # no delivery is held by the waiting cancel
                held = probe.execute("select id from deliveries for update nowait").fetchall()
                assert len(held) == 2
        worker.join(10)
    assert done == [[{"n": 2}]]


CLIENT_FUNCTIONS = ["cancel", "delivery_state", "my_tenant", "opt_in", "opt_out", "pause",
                    "reschedule", "resume", "schedule", "trigger"]
CLIENT_RELATIONS = ["my_deliveries", "my_opt_outs", "my_schedules"]


def test_a_tenant_login_can_execute_and_read_exactly_the_client_api(
        clients: Callable[[str | None], Client], conn: db.Connection) -> None:
    """What reminders_client's logins may execute and read in the service's schema: the
    client functions and views, and nothing a later migration adds (functions are PUBLIC's
    by default unless revoked)."""
    acme = clients("acme")
    executable = conn.execute(
        "select distinct p.proname as name from pg_proc p"
        " join pg_namespace n on n.oid = p.pronamespace"
        " where n.nspname = 'reminders' and has_function_privilege(%s, p.oid, 'execute')"
        " order by 1", (acme.login,)).fetchall()
    readable = conn.execute(
        "select c.relname as name from pg_class c join pg_namespace n on n.oid = c.relnamespace"
        " where n.nspname = 'reminders' and c.relkind in ('r', 'v', 'm', 'p')"
        " and has_table_privilege(%s, c.oid, 'select') order by 1", (acme.login,)).fetchall()
    assert [r["name"] for r in executable] == CLIENT_FUNCTIONS
    assert [r["name"] for r in readable] == CLIENT_RELATIONS


def test_a_function_a_later_migration_adds_is_nobody_s_by_default(conn: db.Connection) -> None:
    conn.execute("create function reminders.added_later() returns int language sql as 'select 1'")
    row = conn.execute("select has_function_privilege('reminders_client',"
                       " 'reminders.added_later()', 'execute') as client,"
                       " has_function_privilege('public', 'reminders.added_later()', 'execute')"
                       " as anyone").fetchone()
    assert row == {"client": False, "anyone": False}


def test_pause_resume_and_trigger_hold_only_the_caller_s_own_schedule(
        clients: Callable[[str | None], Client], conn: db.Connection) -> None:
    """The SQL API's pause, resume and trigger are tenant-scoped as cancel is: another
    tenant's schedule is not found; a paused schedule cannot be triggered; each answers
    whether it changed anything, and a trigger its own deliveries."""
    acme, globex = clients("acme"), clients("globex")
    acme.rows(SCHEDULE_EMAIL, ("booking-1", ["alice@example.com"], T0 + timedelta(days=3)))
    for call in ("select reminders.pause('booking-1')", "select reminders.resume('booking-1')",
                 "select * from reminders.trigger('booking-1')"):
        assert sqlstate(globex.refused(call)) == (
            "RM404", "no schedule with key 'booking-1' for tenant 'globex'")
    for statement in ("select reminders.hold_schedule('acme', 'booking-1', true)",
                      "select * from reminders.trigger_for('acme', 'booking-1')",
                      "select * from reminders.backfill_for('acme', 'booking-1', '{}')"):
        assert globex.refused(statement).sqlstate == "42501", statement
    assert conn.execute("select paused from schedules").fetchall() == [{"paused": False}]
    assert acme.rows("select reminders.pause('booking-1') as changed") == [{"changed": True}]
    assert acme.rows("select reminders.pause('booking-1') as changed") == [{"changed": False}]
    err = acme.refused("select * from reminders.trigger('booking-1')")
    assert sqlstate(err) == ("RM409", "schedule 'booking-1' is paused: resume it first")
    assert acme.rows("select reminders.resume('booking-1') as changed") == [{"changed": True}]
    (made,) = acme.rows("select * from reminders.trigger('booking-1')")
    assert ":trigger:" in made["delivery_key"] and made["state"] == "scheduled"
    assert conn.execute("select origin, count(*) as n from deliveries group by origin"
                        " order by origin").fetchall() == [
        {"origin": "series", "n": 1}, {"origin": "trigger", "n": 1}]
