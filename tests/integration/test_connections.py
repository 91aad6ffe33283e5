"""The service's connections over months: a connection the proxy closed while idle, one
dropped between two batches however recently it was used, and a password the secret rotated
while a function stayed warm, cost no batch; a drop once a batch may have written fails it
safely, never replaying what may have committed."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from psycopg import sql

from reminders import aws, config, consumer, db, redrive, runtime, scanner
from reminders.errors import DatabaseUnavailable
from reminders.local import stack
from tests.aws_principals import make_roles
from tests.conftest import Harness, PgCluster
from tests.faults import drop
from tests.integration.pipeline_helpers import (
    attempts,
    delivery,
    effects,
    event_for,
    schedule_webhook,
    take_messages,
    tick,
)


def test_a_connection_closed_while_idle_costs_no_batch(harness: Harness) -> None:
    h = harness
    h.rt.settings = replace(h.rt.settings,
                            limits=replace(h.rt.settings.limits, idle_check_seconds=0))
    (key,) = schedule_webhook(h, "idle")
    tick(h)
    messages = take_messages(h)
    pid = h.rt.connection().info.backend_pid
    drop(h.rt.connection())  # the proxy's idle client timeout
    answer = consumer.process_batch(event_for(h, messages), h.rt)
    assert answer == {"batchItemFailures": []}
    assert delivery(h, key)["state"] == "sent"
    assert h.rt.connection().info.backend_pid != pid


def _warm(h: Harness) -> int:
    """The runtime's connection as a warm function keeps it, well inside the idle window (no
    ping before the next batch): its backend's pid."""
    h.rt.settings = replace(h.rt.settings,
                            limits=replace(h.rt.settings.limits, idle_check_seconds=3600))
    return h.rt.connection().info.backend_pid


def test_a_connection_dropped_within_the_idle_window_costs_no_consumer_batch(
        harness: Harness) -> None:
    h = harness
    keys = schedule_webhook(h, "dropped", recipients=[f"r{i}" for i in range(10)])
    tick(h)
    messages = take_messages(h)
    assert len(messages) == 10
    pid = _warm(h)
    drop(h.rt.connection())
    answer = consumer.process_batch(event_for(h, messages), h.rt)
    assert answer == {"batchItemFailures": []}
    assert {k: delivery(h, k)["state"] for k in keys} == {k: "sent" for k in keys}
    assert effects(h) == {k: 1 for k in keys}
    assert h.rt.connection().info.backend_pid != pid


def test_a_connection_dropped_within_the_idle_window_costs_no_scanner_tick(
        harness: Harness) -> None:
    h = harness
    keys = schedule_webhook(h, "tick", recipients=["amy", "ben"])
    pid = _warm(h)
    drop(h.rt.connection())
    summary = scanner.tick(h.rt)
    assert (summary.leased, summary.published, summary.skipped) == (2, 2, None)
    assert len(take_messages(h)) == 2
    assert all(delivery(h, k)["state"] == "scheduled" for k in keys)  # leases pending
    assert h.rt.connection().info.backend_pid != pid  # the dropped one was replaced


def test_a_connection_dropped_within_the_idle_window_costs_no_redrive_batch(
        harness: Harness) -> None:
    h = harness
    (key,) = schedule_webhook(h, "redrive")
    tick(h)
    messages = take_messages(h)  # dead-lettered, as maxReceiveCount failures would
    pid = _warm(h)
    drop(h.rt.connection())
    answer = redrive.process_batch(event_for(h, messages), h.rt)
    assert answer == {"batchItemFailures": []}
    row = delivery(h, key)
    assert (row["state"], row["redrives"]) == ("scheduled", 1)  # replayed: due again
    assert h.rt.connection().info.backend_pid != pid  # the dropped one was replaced


def _drop_before(h: Harness, statement: str) -> Callable[[str], None]:
    """A hook that drops the runtime's connection just before its first ``statement``: after
    the batch took the connection, so only the statement finds it gone."""

    def hook(name: str) -> None:
        if name == statement:
            db.before_statement = None
            conn = h.rt._conn
            assert conn is not None
            drop(conn)

    return hook


@pytest.mark.parametrize("where", ["scanner", "redrive"])
def test_a_drop_found_by_the_first_statement_before_any_write_costs_nothing(
        harness: Harness, where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    h = harness
    (key,) = schedule_webhook(h, f"first-{where}")
    pid = _warm(h)
    if where == "scanner":
        monkeypatch.setattr(db, "before_statement", _drop_before(h, "scanner_turn_take"))
        summary = scanner.tick(h.rt)
        assert (summary.leased, summary.published) == (1, 1)
    else:
        tick(h)
        messages = take_messages(h)
        monkeypatch.setattr(db, "before_statement", _drop_before(h, "recheck_load"))
        assert redrive.process_batch(event_for(h, messages), h.rt) == {"batchItemFailures": []}
        assert delivery(h, key)["redrives"] == 1
    assert db.before_statement is None  # the hook ran: the drop happened
    assert h.rt.connection().info.backend_pid != pid


def test_a_drop_once_the_consumer_may_have_written_fails_the_batch_and_replays_nothing(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch's first write is marking its leases received, and a drop on it may come after
    it committed; a drop after the sends, before their outcomes are recorded, leaves sends
    that happened. Neither is run again on a new connection: the messages come back, and the
    rows say what happened (a send in flight is never started twice)."""
    h = harness
    first = schedule_webhook(h, "first-write", recipients=["amy", "ben"])
    tick(h)
    messages = take_messages(h)
    _warm(h)
    monkeypatch.setattr(db, "before_statement", _drop_before(h, "deliveries_take_leases"))
    with pytest.raises(DatabaseUnavailable):  # nothing done: an invocation error
        consumer.process_batch(event_for(h, messages), h.rt)
    assert db.before_statement is None
    assert effects(h) == {} and all(attempts(h, k) == [] for k in first)

    later = schedule_webhook(h, "mid-batch", recipients=["cy", "di"])
    tick(h)
    messages = take_messages(h)
    monkeypatch.setattr(db, "before_statement", _drop_before(h, "attempts_finish"))
    answer = consumer.process_batch(event_for(h, messages), h.rt)
    assert db.before_statement is None
    assert sorted(f["itemIdentifier"] for f in answer["batchItemFailures"]) == sorted(
        m["MessageId"] for m in messages)  # all come back: their outcomes are not recorded
    assert effects(h) == {k: 1 for k in later}
    for key in later:  # one attempt each, still open: the outcome was not written twice
        (attempt,) = attempts(h, key)
        assert attempt["outcome"] is None
        assert delivery(h, key)["send_attempt"] is not None
    # Redelivered, the messages find their sends in flight and start nothing.
    assert consumer.process_batch(event_for(h, messages), h.rt) == {"batchItemFailures": []}
    assert effects(h) == {k: 1 for k in later}
    assert all(len(attempts(h, k)) == 1 for k in later)


@pytest.fixture
def password_role(pg_cluster: PgCluster, database_url: str) -> Iterator[tuple[str, str, int]]:
    """A role that gives its password, as every login does through the pooler (only the
    embedded server's own superuser is trusted), with the service's role settings in the
    test's database; and where the pooler listens."""
    params = psycopg.conninfo.conninfo_to_dict(database_url)
    direct = psycopg.conninfo.make_conninfo(pg_cluster.direct, dbname=str(params["dbname"]))
    with db.connect(pg_cluster.direct) as admin:
        admin.execute("drop role if exists rotated")
        admin.execute("create role rotated login superuser password 'first'")
    with db.connect(direct) as in_db:
        db.configure_login(in_db, db.SessionDefaults(schema="reminders"), "rotated")
    try:
        yield "rotated", str(params["host"]), int(str(params["port"]))
    finally:
        with db.connect(direct) as in_db:
            in_db.execute(sql.SQL("reassign owned by rotated to current_user"))
            in_db.execute("drop owned by rotated")
        with db.connect(pg_cluster.direct) as admin:
            admin.execute("drop role rotated")


def test_a_rotated_password_is_read_again_from_the_secret(
        harness: Harness, database_url: str, moto_endpoint: str,
        password_role: tuple[str, str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    h = harness
    role, host, port = password_role
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    aws.client.cache_clear()
    sm = stack.aws_client("secretsmanager", moto_endpoint)
    arn = sm.create_secret(Name=f"db-{id(h)}", SecretString=json.dumps(
        {"username": role, "password": "first"}))["ARN"]
    name = psycopg.conninfo.conninfo_to_dict(database_url)["dbname"]
    # The warm function is the consumer, as Lambda runs it: its role's credentials in the
    # environment, its role granted the template's read of the application's secret (here).
    urls = config.QueueUrls(h.rt.deliveries.url, h.rt.dlq.url, h.rt.parking.url)
    consumer_role = make_roles(moto_endpoint, urls, ("consumer",), app_secret=arn)["consumer"]
    for variable, value in stack.credentials_env(consumer_role.credentials).items():
        monkeypatch.setenv(variable, value)
    env = {"REMINDERS_DB_HOST": host, "REMINDERS_DB_PORT": str(port),
           "REMINDERS_DB_SECRET_ARN": arn, "REMINDERS_DB_NAME": str(name),
           "REMINDERS_DB_SSLMODE": "disable", "REMINDERS_DB_IDLE_CHECK_SECONDS": "0",
           **{k: v for k, v in stack.AWS_TEST_ENV.items()},
           "REMINDERS_QUEUE_URL": h.rt.deliveries.url, "REMINDERS_DLQ_URL": h.rt.dlq.url,
           "REMINDERS_PARKING_QUEUE_URL": h.rt.parking.url,
           "REMINDERS_WEBHOOK_ALLOW": "127.0.0.1/32"}
    warm = runtime.from_env(env, clock=h.clock)
    assert warm.database_url_source is not None
    warm.connection()
    (key,) = schedule_webhook(h, "rotated")
    tick(h)
    messages = take_messages(h)
    # The secret rotates: a new password in the database and in the secret; the warm
    # function's connection is gone (the proxy dropped it).
    h.conn.execute("alter role rotated password 'second'")
    sm.put_secret_value(SecretId=arn, SecretString=json.dumps(
        {"username": role, "password": "second"}))
    drop(warm.connection())
    answer: Any = consumer.process_batch(event_for(h, messages), warm)
    assert answer == {"batchItemFailures": []}
    assert delivery(h, key)["state"] == "sent"
    assert "second" in warm.settings.database_url
    warm.close()
    aws.client.cache_clear()


def test_a_connection_dropped_inside_a_pipelined_batch_says_so_once(
        harness: Harness, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The batch's own error is reported; psycopg's second line about the pipeline it could
    not close ("error ignored terminating <psycopg.Pipeline [BAD]>") is not."""
    h = harness
    schedule_webhook(h, "pipelined")
    tick(h)
    messages = take_messages(h)
    _warm(h)
    monkeypatch.setattr(db, "before_statement", _drop_before(h, "recheck_load"))
    with caplog.at_level("WARNING"), pytest.raises(DatabaseUnavailable):
        consumer.process_batch(event_for(h, messages), h.rt)
    assert db.before_statement is None  # the drop happened inside the pipeline
    assert [r.getMessage() for r in caplog.records if r.name == "psycopg"] == []
