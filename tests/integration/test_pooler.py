"""Every session goes through PgBouncer in transaction mode, the local stand-in for RDS Proxy
(reminders.local.pooler): it refuses startup options as RDS Proxy does, and it resets every
server connection after each transaction, so nothing the service needs may live in a session.
These tests show the stand-in's strictness, then that the service lives within it: its
sessions take their defaults from role settings, its scanners take turns without a session
lock, and no function does anything that would pin an RDS Proxy connection."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from reminders import config, consumer, db, ops, redrive, scanner
from reminders.errors import ConfigError
from reminders.identity import Caller
from reminders.local.event_source import sqs_event
from tests.conftest import Harness, PgCluster, make_runtime
from tests.integration.pipeline_helpers import schedule_webhook, take_messages, tick
from tests.round_trips import count_pins, pins, traced_messages


def test_the_pooler_refuses_startup_options_as_rds_proxy_does(database_url: str) -> None:
    with pytest.raises(psycopg.OperationalError, match="unsupported startup parameter: options"):
        psycopg.connect(database_url, options="-c search_path=reminders").close()


def test_nothing_a_session_sets_carries_to_its_next_transaction(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("set statement_timeout = 1234")
        seen = [conn.execute("show statement_timeout").fetchone() for _ in range(5)]
        conn.execute("select pg_advisory_lock(77)")
        held = conn.execute("select count(*) from pg_locks where locktype = 'advisory'"
                            " and objid = 77").fetchone()
    assert ("1234ms",) not in seen, seen
    assert held == (0,), "a session advisory lock outlived its transaction"


def test_a_client_waits_for_a_server_connection_no_longer_than_the_proxy_s_borrow_timeout(
        pg_cluster: PgCluster) -> None:
    """RDS Proxy answers a client it cannot give a database connection within its borrow
    timeout (the stack's: consumer.DB_WAIT_SECONDS, which tests/infra checks against the
    template) with an error; the stand-in waits no longer. PgBouncer's admin console says
    what it enforces."""
    assert pg_cluster.pooler is not None, "the suite runs behind the pooler"
    admin_url = pg_cluster.pooler.url(pg_cluster.direct, "pgbouncer")
    with psycopg.connect(admin_url, autocommit=True) as admin:
        result = admin.pgconn.exec_(b"SHOW CONFIG")
        rows = {result.get_value(i, 0): result.get_value(i, 1) for i in range(result.ntuples)}
    assert rows[b"query_wait_timeout"] == str(consumer.DB_WAIT_SECONDS).encode()


def test_every_service_session_connects_through_it_with_its_login_s_settings(
        harness: Harness) -> None:
    """The service's sessions send no startup options (RDS Proxy refuses them): search_path
    and the timeouts are the login's role settings, written by the migrations."""
    conn = harness.rt.connection()
    row = conn.execute("select current_setting('search_path') as search_path,"
                       " current_setting('lock_timeout') as lock_timeout,"
                       " current_setting('statement_timeout') as statement_timeout").fetchone()
    assert row == {"search_path": "reminders", "lock_timeout": "5s",
                   "statement_timeout": "30s"}


def test_a_login_without_the_service_s_role_settings_is_refused_with_the_fix(
        pg_cluster: PgCluster, harness: Harness, database_url: str) -> None:
    login = f"bare_{id(harness)}"
    with db.connect(pg_cluster.direct) as admin:
        admin.execute(sql.SQL("create role {} login password 'pw'").format(
            sql.Identifier(login)))
    url = make_conninfo(database_url, user=login, password="pw")
    rt = make_runtime(url, _urls(harness), harness.endpoint, harness.clock)
    try:
        with pytest.raises(ConfigError, match="ALTER ROLE <login> IN DATABASE"):
            rt.connection()
    finally:
        rt.close()


def test_configured_timeouts_are_the_ones_the_login_runs_with(
        pg_cluster: PgCluster, database_url: str) -> None:
    with db.connect(_direct(pg_cluster, database_url)) as conn:
        db.configure_login(conn, db.SessionDefaults(schema="reminders", lock_timeout_ms=700,
                                                    statement_timeout_ms=9000))
    with db.connect(database_url) as conn:
        differ = db.check_session(conn, db.SessionDefaults(schema="reminders"))
        same = db.check_session(conn, db.SessionDefaults(
            schema="reminders", lock_timeout_ms=700, statement_timeout_ms=9000))
    assert differ == ["lock_timeout_ms is 700, configured 5000",
                      "statement_timeout_ms is 9000, configured 30000"]
    assert same == []


def _urls(h: Harness) -> config.QueueUrls:
    return config.QueueUrls(deliveries=h.rt.deliveries.url, dlq=h.rt.dlq.url,
                            parking=h.rt.parking.url)


@pytest.fixture
def paused_tick(harness: Harness) -> Iterator[tuple[threading.Event, threading.Event]]:
    """A scanner tick that holds the turn, paused at its first step (the reclaim), in a
    thread of its own."""
    reached, go = threading.Event(), threading.Event()
    first = make_runtime(harness.rt.settings.database_url, _urls(harness), harness.endpoint,
                         harness.clock)

    def hold(name: str) -> None:
        if name == "lease_reclaim_expired" and threading.current_thread() is worker:
            reached.set()
            assert go.wait(30)

    worker = threading.Thread(target=scanner.tick, args=(first,))
    db.before_statement = hold
    try:
        worker.start()
        assert reached.wait(30), "the first tick never reached its reclaim"
        yield reached, go
    finally:
        go.set()
        worker.join(30)
        db.before_statement = None
        first.close()


def test_a_second_scanner_skips_while_the_first_holds_the_turn(
        harness: Harness, paused_tick: tuple[threading.Event, threading.Event]) -> None:
    """The turn was a session advisory lock: behind a transaction pooler it ended with the
    statement that took it, and two scanners spent one in-flight budget at once."""
    schedule_webhook(harness, "turn-1")
    second = scanner.tick(harness.rt)
    assert second.skipped is not None and second.skipped.startswith(
        "another scanner is running"), second
    assert second.leased == 0
    _, go = paused_tick
    go.set()


def test_a_turn_left_by_a_scanner_that_died_expires(harness: Harness) -> None:
    conn = harness.rt.connection()
    now = harness.clock.now()
    taken = db.fetch_one(conn, "scanner_turn_take", {
        "holder": "00000000-0000-0000-0000-0000000000aa", "now": now,
        "until": now + timedelta(seconds=40)})
    assert taken is not None
    assert scanner.tick(harness.rt).skipped is not None
    harness.clock.advance(timedelta(seconds=41))
    assert scanner.tick(harness.rt).skipped is None


def test_the_pin_detector_finds_what_pins() -> None:
    found = pins([("Query", '"SET statement_timeout = 5"'),
                  ("Parse", '"_pg3_0" "select 1" 0'),
                  ("Parse", '"" "select pg_advisory_lock($1)" 1 NNNN'),
                  ("Parse", '"" "select pg_advisory_xact_lock($1)" 1 NNNN'),
                  ("Query", '"set local lock_timeout = 0"'),
                  ("Parse", '"" "select set_config(\'statement_timeout\', $1, true)" 1 NNNN'),
                  ("Query", '"create temp table x (a int)"'),
                  ("Query", '"LISTEN x"')])
    assert [f.split(":")[0] for f in found] == [
        "SET", "named prepared statement \"_pg3_0\"", "session advisory lock",
        "temporary object", "LISTEN"]


def _direct(pg_cluster: PgCluster, database_url: str) -> str:
    name = str(conninfo_to_dict(database_url)["dbname"])
    return make_conninfo(pg_cluster.direct, dbname=name)


def _prepare_one(conn: db.Connection) -> None:
    for _ in range(6):  # psycopg prepares a statement on its fifth run
        conn.execute("select 1 where %s", (True,))


def test_a_prepared_statement_does_not_survive_its_transaction(database_url: str) -> None:
    """Through RDS Proxy it would pin the connection; here it breaks, as in PgBouncer."""
    with db.connect(database_url, prepare=True) as conn, \
            pytest.raises(psycopg.errors.InvalidSqlStatementName):
        _prepare_one(conn)


def test_the_pin_detector_reads_a_real_trace(pg_cluster: PgCluster, database_url: str) -> None:
    with db.connect(_direct(pg_cluster, database_url), prepare=True) as conn:
        def work() -> None:
            _prepare_one(conn)
            conn.execute("set lock_timeout = '1s'")
        sent = traced_messages(conn, work)
    assert [f.split(":")[0] for f in pins(sent)] == [
        'named prepared statement "_pg3_0"', "SET"]


def _pins_of(rt: Any, work: Any) -> list[str]:
    return count_pins(rt.connection(), work)


def test_no_function_does_anything_that_pins_an_rds_proxy_connection(harness: Harness) -> None:
    """Scanner, consumer, redrive and the operations function, each on a runtime of its own,
    through a tick, a batch, a dead-lettered message and an operator's read and write."""
    h = harness
    for n in range(3):
        schedule_webhook(h, f"pin-{n}")
    urls = _urls(h)

    def runtime() -> Any:
        return make_runtime(h.rt.settings.database_url, urls, h.endpoint, h.clock)

    found: dict[str, list[str]] = {}
    scan, consume, dead, operate = runtime(), runtime(), runtime(), runtime()
    try:
        found["scanner"] = _pins_of(scan, lambda: scanner.tick(scan))
        messages = take_messages(h, n=3)
        assert len(messages) == 3
        event = sqs_event(messages, "arn:aws:sqs:us-east-1:123456789012:deliveries",
                          "us-east-1")
        found["consumer"] = _pins_of(consume, lambda: consumer.process_batch(event, consume))
        # A message of a lease that is no longer current reaches the redrive.
        tick(h)
        found["redrive"] = _pins_of(dead, lambda: redrive.process_batch(event, dead))
        caller = Caller(arn="arn:aws:iam::123456789012:user/ops", account="123456789012")
        now = h.clock.now()
        reads = [ops.Request(command="status", args={}, proof="", claimed_arn=None,
                             nonce="1" * 32),
                 ops.Request(command="show", args={"key": _a_key(h)}, proof="",
                             claimed_arn=None, nonce="2" * 32),
                 ops.Request(command="tenants pause",
                             args={"tenant": "acme", "reason": "pin check"}, proof="",
                             claimed_arn=None, nonce="3" * 32),
                 ops.Request(command="tenants resume",
                             args={"tenant": "acme", "reason": "pin check"}, proof="",
                             claimed_arn=None, nonce="4" * 32)]
        audience = "arn:aws:lambda:us-east-1:123456789012:function:Reminders-ops-write"

        def claim_and_run(request: ops.Request) -> Any:
            ops.claim_proof(operate.connection(), request, audience=audience, caller=caller,
                            now=now, signed_at=now)
            return ops.run(request, operate.connection(), now=now, caller=caller,
                           queue_counts=None)

        found["ops"] = _pins_of(operate, lambda: [claim_and_run(r) for r in reads])
    finally:
        for rt in (scan, consume, dead, operate):
            rt.close()
    assert found == {"scanner": [], "consumer": [], "redrive": [], "ops": []}


def _a_key(h: Harness) -> str:
    row = h.conn.execute("select delivery_key from deliveries order by id limit 1").fetchone()
    assert row is not None
    return str(row["delivery_key"])

