"""One tenant's input can never delay, drop or block another's: what the SQL API refuses by
size before it reads an element, and the statement timeout every application login carries.
Each through a real ``reminders_client`` login mapped with ``grant_tenant``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from reminders import db
from tests.conftest import PgCluster
from tests.integration.test_sql_api import Client, clients, sqlstate

__all__ = ["clients"]  # the fixture, used by name below

SCHEDULE = ("select * from reminders.schedule(key => %s, recipients => %s,"
            " channel => 'email', at => '2027-03-01 09:00Z', payload => %s::jsonb)")


def _track_function_calls(pg_cluster: PgCluster, database_url: str) -> None:
    """Sessions of this database from now on count their calls of PL/pgSQL functions
    (``pg_stat_xact_user_functions``), a superuser setting written on the server itself."""
    name = str(conninfo_to_dict(database_url)["dbname"])
    with db.connect(db.with_database(pg_cluster.direct, name)) as admin:
        admin.execute(sql.SQL("alter database {} set track_functions = 'pl'").format(
            sql.Identifier(name)))


def _calls_while_refused(client: Client, query: str, params: Any) -> tuple[psycopg.Error,
                                                                           dict[str, int]]:
    """The refusal of one call, and the calls of the service's functions it made (counted in
    its own transaction: a savepoint takes the refusal, the counters stay)."""
    with client.conn.transaction():
        with pytest.raises(psycopg.Error) as err, client.conn.transaction():
            client.conn.execute(query, params)
        calls = {r["funcname"]: int(r["calls"]) for r in client.conn.execute(
            "select funcname, calls from pg_stat_xact_user_functions"
            " where schemaname = 'reminders'")}
    return err.value, calls


def test_a_300_000_element_recipients_array_is_refused_by_its_length_before_any_is_read(
        clients: Callable[[str | None], Client], pg_cluster: PgCluster,
        database_url: str) -> None:
    """Before, every element went through check_recipient (300,000 calls) and duplicates
    were dropped before the count was compared with the limit."""
    _track_function_calls(pg_cluster, database_url)
    acme = clients("acme")
    people = [f"p{i}@example.com" for i in range(300_000)]
    err, calls = _calls_while_refused(acme, SCHEDULE, ("big", people, "{}"))
    assert calls.get("check_recipient", 0) == 0, calls
    assert calls.get("check_destinations", 0) == 0, calls
    assert sqlstate(err) == ("RM400", "recipients: 300000 elements in one call; the limit is "
                                      "50000")
    # Duplicates count too: the limit is on what the caller sends.
    err, _ = _calls_while_refused(acme, SCHEDULE, ("dup", ["a@example.com"] * 50_001, "{}"))
    assert sqlstate(err) == ("RM400", "recipients: 50001 elements in one call; the limit is "
                                      "50000")
    assert acme.rows("select count(*) as n from reminders.my_schedules") == [{"n": 0}]


def test_a_300_000_element_payload_array_is_refused_by_its_size_before_any_is_read(
        clients: Callable[[str | None], Client], pg_cluster: PgCluster,
        database_url: str) -> None:
    """The payload's size was measured as its JSON text (every element written out) and the
    recipients were all checked first."""
    _track_function_calls(pg_cluster, database_url)
    acme = clients("acme")
    payload = '{"items": [' + ",".join(["1"] * 300_000) + "]}"
    err, calls = _calls_while_refused(acme, SCHEDULE, ("big", ["a@example.com"], payload))
    assert calls.get("check_payload", 0) == 0 and calls.get("check_recipient", 0) == 0, calls
    state, message = sqlstate(err)
    assert state == "RM400"
    assert message is not None and message.startswith("payload is ") and message.endswith(
        " bytes as stored; the limit is 16384 bytes of JSON text"), message
