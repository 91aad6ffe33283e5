"""The service's connections over months: a connection the proxy closed while idle, and a
password the secret rotated while a function stayed warm, cost no batch."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from psycopg import sql

from reminders import aws, consumer, runtime
from reminders.local import stack
from tests.conftest import Harness
from tests.integration.pipeline_helpers import (
    delivery,
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
    h.conn.execute("select pg_terminate_backend(%s)", (pid,))  # the proxy's idle timeout
    answer = consumer.process_batch(event_for(h, messages), h.rt)
    assert answer == {"batchItemFailures": []}
    assert delivery(h, key)["state"] == "sent"
    assert h.rt.connection().info.backend_pid != pid


@pytest.fixture
def password_role(pg_server: str, database_url: str) -> Iterator[tuple[str, str]]:
    """A role that must give its password (the test server trusts everyone else); and where the
    server's socket is (it listens on no TCP port)."""
    with psycopg.connect(pg_server, autocommit=True) as admin:
        hba = admin.execute("show hba_file").fetchone()[0]  # type: ignore[index]
        admin.execute("drop role if exists rotated")
        admin.execute("create role rotated login superuser password 'first'")
        with open(hba) as current:
            original = current.read()
        with open(hba, "w") as out:
            out.write("local all rotated scram-sha-256\n" + original)
        admin.execute("select pg_reload_conf()")
        socket_dir = str(psycopg.conninfo.conninfo_to_dict(pg_server)["host"])
        try:
            yield "rotated", socket_dir
        finally:
            with open(hba, "w") as out:
                out.write(original)
            admin.execute("select pg_reload_conf()")
            admin.execute(sql.SQL("reassign owned by rotated to current_user"))
            admin.execute("drop owned by rotated")
            admin.execute("drop role rotated")


def test_a_rotated_password_is_read_again_from_the_secret(
        harness: Harness, database_url: str, moto_endpoint: str,
        password_role: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    h = harness
    role, socket_dir = password_role
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    aws.client.cache_clear()
    sm = stack.aws_client("secretsmanager", moto_endpoint)
    arn = sm.create_secret(Name=f"db-{id(h)}", SecretString=json.dumps(
        {"username": role, "password": "first"}))["ARN"]
    name = psycopg.conninfo.conninfo_to_dict(database_url)["dbname"]
    env = {"REMINDERS_DB_HOST": socket_dir,
           "REMINDERS_DB_SECRET_ARN": arn, "REMINDERS_DB_NAME": str(name),
           "REMINDERS_DB_SSLMODE": "disable", "REMINDERS_DB_IDLE_CHECK_SECONDS": "0",
           **{k: v for k, v in stack.AWS_TEST_ENV.items()},
           "REMINDERS_QUEUE_URL": h.rt.deliveries.url, "REMINDERS_DLQ_URL": h.rt.dlq.url,
           "REMINDERS_PARKING_QUEUE_URL": h.rt.parking.url,
           "REMINDERS_WEBHOOK_ALLOW": "127.0.0.1/32"}
    warm = runtime.from_env(env, clock=h.clock)
    assert warm.database_url_source is not None
    first_pid = warm.connection().info.backend_pid
    (key,) = schedule_webhook(h, "rotated")
    tick(h)
    messages = take_messages(h)
    # The secret rotates: a new password in the database and in the secret; the warm
    # function's connection is gone (the proxy dropped it).
    h.conn.execute("alter role rotated password 'second'")
    sm.put_secret_value(SecretId=arn, SecretString=json.dumps(
        {"username": role, "password": "second"}))
    h.conn.execute("select pg_terminate_backend(%s)", (first_pid,))
    answer: Any = consumer.process_batch(event_for(h, messages), warm)
    assert answer == {"batchItemFailures": []}
    assert delivery(h, key)["state"] == "sent"
    assert "second" in warm.settings.database_url
    warm.close()
    aws.client.cache_clear()
