"""Schedules created before migration 0009 hold a request hash computed by the Python API;
the same request retried after the upgrade, through either API, returns the existing schedule,
and a different request with that key is still refused."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from reminders import db, schedules
from reminders.errors import InvalidInput
from reminders.recurrence import Recurrence
from tests.conftest import T0
from tests.integration.test_schedule_api import URL, register


def python_request_hash(*, recipients: list[str], channel: str, to: str | None, kind: str,
                        payload: dict[str, Any] | None, revision: str,
                        at: datetime | None = None,
                        recurrence: Recurrence | None = None) -> str:
    """The hash exactly as ``schedules.schedule`` computed it before 0009 (its
    ``_request_hash``, with the payload as ``validate_payload``'s JSON text)."""
    payload_json = json.dumps(payload or {}, separators=(",", ":"), sort_keys=True,
                              allow_nan=False)
    rec_fields: dict[str, Any] = {"rrule": None, "tz": None, "local_start": None,
                                  "gap": "shift", "overlap": "first"}
    if recurrence is not None:
        rec_fields = {"rrule": recurrence.rrule, "tz": recurrence.tz,
                      "local_start": recurrence.local_start, "gap": recurrence.gap,
                      "overlap": recurrence.overlap}
    fields = {"recipients": recipients, "channel": channel, "to": to, "kind": kind,
              "payload": payload_json, "revision": revision,
              "at": at.astimezone(UTC) if at is not None else None, **rec_fields}
    text = json.dumps(fields, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


PAYLOAD = {"zeta": 1, "alpha": {"b": [1, 2.5, "x"], "a": None}, "Ärger": "naïve \"q\" \\ 😀",
           "tab": "a\tb\nc", "é": True, "10": 100.0, "9": -0.25, "z": "\x7f"}

REQUESTS: dict[str, dict[str, Any]] = {
    "webhook, many recipients, odd payload": {
        "recipients": ["zoe", "alice", "mallory"], "channel": "webhook", "to": URL,
        "kind": "default", "payload": PAYLOAD, "revision": "7",
        "at": T0 + timedelta(minutes=5, microseconds=120)},
    "e-mail to one address": {
        "recipients": ["alice"], "channel": "email", "to": "alice@example.com",
        "kind": "default", "payload": None, "revision": "1", "at": T0 + timedelta(days=2)},
    "recurring": {
        "recipients": ["+4915112345678"], "channel": "sms", "to": None, "kind": "default",
        "payload": {"text": "Wochenbericht"}, "revision": "1",
        "recurrence": Recurrence("FREQ=WEEKLY;BYDAY=MO", "Europe/Berlin",
                                 datetime(2027, 3, 1, 9, 0), "skip", "later")},
}


def written_before_0009(conn: db.Connection, key: str, request: dict[str, Any]) -> int:
    """The schedule as the Python API wrote it before 0009: the same row, the old hash."""
    created = schedules.schedule(conn, tenant="acme", key=key, now=T0, **request)
    assert created.created
    conn.execute("update schedules set request_hash = %s where id = %s",
                 (python_request_hash(**request), created.schedule_id))
    return created.schedule_id


@pytest.mark.parametrize("name", list(REQUESTS))
def test_an_old_key_retried_with_the_same_request_returns_the_schedule(
        conn: db.Connection, name: str) -> None:
    register(conn)
    request = REQUESTS[name]
    schedule_id = written_before_0009(conn, "old-1", request)
    count = conn.execute("select count(*) as n from deliveries").fetchone()

    again = schedules.schedule(conn, tenant="acme", key="old-1", now=T0 + timedelta(hours=1),
                               **request)

    assert (again.schedule_id, again.created) == (schedule_id, False)
    assert conn.execute("select count(*) as n from deliveries").fetchone() == count


def test_an_old_key_retried_through_the_sql_functions_returns_the_schedule(
        conn: db.Connection) -> None:
    register(conn)
    request = REQUESTS["webhook, many recipients, odd payload"]
    schedule_id = written_before_0009(conn, "old-1", request)

    rows = conn.execute(
        "select * from schedule_for(tenant => 'acme', key => 'old-1', recipients => %s,"
        " channel => 'webhook', at => %s, destination => %s, payload => %s::jsonb,"
        " revision => '7')",
        (request["recipients"], request["at"], URL, json.dumps(PAYLOAD))).fetchall()

    assert {(r["schedule_id"], r["created"]) for r in rows} == {(schedule_id, False)}


@pytest.mark.parametrize("change", [
    {"revision": "8"}, {"recipients": ["alice", "zoe", "mallory"]},
    {"payload": {**PAYLOAD, "zeta": 2}}, {"at": T0 + timedelta(minutes=6)}])
def test_an_old_key_with_a_different_request_is_still_refused(
        conn: db.Connection, change: dict[str, Any]) -> None:
    register(conn)
    request = REQUESTS["webhook, many recipients, odd payload"]
    written_before_0009(conn, "old-1", request)

    with pytest.raises(InvalidInput, match="already used for a different request"):
        schedules.schedule(conn, tenant="acme", key="old-1", now=T0, **{**request, **change})
