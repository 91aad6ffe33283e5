"""The application-facing API: schedule, reschedule, cancel, opt out and back in.

Every function takes the application's own psycopg connection and runs inside the caller's
transaction (as a savepoint), so a booking and its reminders commit or roll back together.

The rules are the SQL functions in ``db/objects/functions`` (``schedule_for``,
``reschedule_for``, ``cancel_for``, ``opt_out_for``, ``opt_in_for``), the same ones
applications in any language call through the client functions; this module converts Python
values, expands a recurring rule's first occurrence (which SQL cannot: RRULE in a zone under
the DST policy) and passes it along. Refused input raises :class:`InvalidInput` (SQLSTATE
RM400 or RM409), an unknown key :class:`NotFound` (RM404); nothing is written either way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from reminders import db
from reminders.channels.addresses import check_url_characters
from reminders.cli_format import duration
from reminders.clock import iso, require_aware
from reminders.errors import InvalidInput
from reminders.payloads import MAX_DEPTH, check_payload
from reminders.windows import check_windows

if TYPE_CHECKING:
    from reminders.recurrence import Recurrence

CHANNELS = ("webhook", "email", "sms")
MAX_PAYLOAD_BYTES = 16 * 1024  # of the payload's jsonb text; checked by schedule_for
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")  # an escaped NUL, not an escaped backslash
_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")


Plan = list[tuple[datetime, str, str | None]]  # per recipient: occurrence, state, reason


@dataclass(frozen=True)
class DeliveryRef:
    recipient: str
    delivery_key: str
    due_at: datetime
    state: str


@dataclass(frozen=True)
class ScheduleResult:
    tenant: str
    schedule_key: str
    schedule_id: int
    created: bool
    deliveries: list[DeliveryRef]

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "tenant": self.tenant,
            "schedule_key": self.schedule_key,
            "created": self.created,
            "deliveries": [
                {"recipient": d.recipient, "delivery_key": d.delivery_key,
                 "due_at": iso(d.due_at), "state": d.state}
                for d in self.deliveries
            ],
        }
        if len(self.deliveries) == 1:
            out["delivery_key"] = self.deliveries[0].delivery_key
        return out


# ---------------------------------------------------------------- conversion


def validate_tenant(tenant: str) -> str:
    """For the operator's tenant commands (pause, resume), which are not SQL functions."""
    if not isinstance(tenant, str) or not _TENANT.match(tenant):
        raise InvalidInput(f"tenant must be 1-200 letters, digits or _.:- , got {tenant!r}")
    return tenant


def validate_payload(payload: Any) -> str:
    """The payload as JSON text; what only Python can get wrong (its type, a value JSON cannot
    carry) is refused here, the rest (its size) by the SQL function."""
    if payload is None:
        payload = {}
    if not isinstance(payload, dict):
        raise InvalidInput(f"payload must be a JSON object, got {type(payload).__name__}")
    try:
        text = json.dumps(payload, separators=(",", ":"), sort_keys=True, allow_nan=False)
    except RecursionError:
        raise InvalidInput(f"payload nests deeper than {MAX_DEPTH} levels") from None
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"payload is not JSON-serialisable: {exc}") from None
    if _JSON_NUL.search(text):  # Postgres's jsonb cannot hold a NUL character
        raise InvalidInput("payload contains a NUL character (\\u0000), which cannot be stored")
    try:
        check_payload(text)
    except ValueError as exc:
        raise InvalidInput(f"payload cannot be read back as JSON: {exc}") from None
    return text


RECIPIENT_FORBIDDEN = {"\x00": "a NUL byte", "\n": "a line break", "\r": "a line break",
                       ":": "':' (the delivery key's separator)"}


def validate_recipient_text(recipient: str) -> str:
    """The command line's early check, so its message can name the flag; the API's own check
    is the SQL function's (``check_recipient``)."""
    for ch, what in RECIPIENT_FORBIDDEN.items():
        if ch in recipient:
            raise InvalidInput(f"recipient {recipient[:40]!r} contains {what}")
    return recipient


def _texts(values: Iterable[str] | str, what: str) -> list[str]:
    if isinstance(values, str):
        values = [values]
    out = list(values)
    for value in out:
        if not isinstance(value, str):
            raise InvalidInput(f"{what} must be a non-empty string")
        if "\x00" in value:  # a text argument cannot carry it to Postgres
            raise InvalidInput(f"{what} {value[:40]!r} contains a NUL byte")
    return out


def _rule(recurrence: Recurrence | None) -> dict[str, Any]:
    if recurrence is None:
        return {"rrule": None, "tz": None, "local_start": None, "gap": None, "overlap": None}
    return {"rrule": recurrence.rrule, "tz": recurrence.tz,
            "local_start": recurrence.local_start, "gap": recurrence.gap,
            "overlap": recurrence.overlap}


def _first(recurrence: Recurrence | None, now: datetime, *,
           inclusive: bool) -> datetime | None:
    if recurrence is None:
        return None
    from reminders.recurrence import first_due

    first = first_due(recurrence, now, inclusive=inclusive)
    return first.utc if first is not None else None


def _result(tenant: str, rows: list[db.Row]) -> ScheduleResult:
    """The SQL API's answer: a row per delivery, and one per recipient without one yet."""
    if not rows:
        raise AssertionError("the SQL API answers at least one row per schedule")
    refs = [DeliveryRef(r["recipient"], r["delivery_key"], r["due_at"], r["state"])
            for r in rows if r["delivery_key"] is not None]
    return ScheduleResult(tenant, rows[0]["schedule_key"], int(rows[0]["schedule_id"]),
                          bool(rows[0]["created"]), refs)


# ---------------------------------------------------------------- the API


def schedule(conn: db.Connection, *, tenant: str, recipients: Iterable[str], channel: str,
             now: datetime, at: datetime | None = None, recurrence: Recurrence | None = None,
             to: str | None = None, kind: str = "default", payload: dict[str, Any] | None = None,
             revision: str = "1", key: str | None = None,
             tz: str | None = None) -> ScheduleResult:
    """Schedule one logical reminder for one or many recipients (``schedule_for``).

    ``tz``: a one-off's recipient zone, in which its kind's send windows are read (a recurring
    schedule's is its rule's zone); UTC if not given.

    Idempotent on ``key``: calling again with the same key and the same request returns the
    existing deliveries and creates nothing; the same key with a different request is refused.
    A recurring schedule's first occurrence is expanded here and materialised at once.
    """
    if at is not None:
        at = require_aware(at, "at").astimezone(UTC)
    payload_json = validate_payload(payload)
    rule = _rule(recurrence)
    if tz is not None:
        if recurrence is not None:
            raise InvalidInput("tz: a recurring schedule's zone is its recurrence's")
        from reminders import timezones

        try:
            timezones.zone(tz)
        except InvalidInput as exc:
            raise InvalidInput(f"tz: {exc}") from None
        rule["tz"] = tz
    people = _texts(recipients, "recipient")
    if channel == "webhook" and isinstance(to, str):
        check_url_characters(to, "to: webhook URL")
    with db.transaction(conn):
        rows = db.fetch_all(conn, "api_schedule", {
            "tenant": tenant, "key": key, "recipients": people, "channel": channel, "at": at,
            **rule, "destination": to, "kind": kind, "payload": payload_json,
            "revision": revision, "first_at": _first(recurrence, now, inclusive=True),
            "expanded": recurrence is not None, "now": now})
    return _result(tenant, rows)


def insert_deliveries(conn: db.Connection, *, tenant: str, schedule_id: int,
                      recipients: Sequence[str], plan: Plan, now: datetime) -> list[DeliveryRef]:
    """One delivery per (recipient, planned occurrence), in one statement (``materialise``:
    the delivery key is made there)."""
    if not plan:
        return []
    inserted = db.fetch_all(conn, "deliveries_materialise", {
        "schedule_id": schedule_id, "tenant": tenant, "now": now,
        "recipients": list(recipients),
        "occurrences": [p[0] for p in plan],
        "states": [p[1] for p in plan],
        "reasons": [p[2] for p in plan],
    })
    return [DeliveryRef(r["recipient"], r["delivery_key"], r["due_at"], r["state"])
            for r in inserted]


def reschedule(conn: db.Connection, *, tenant: str, key: str, now: datetime,
               at: datetime | None = None, revision: str | None = None,
               recurrence: Recurrence | None = None) -> ScheduleResult:
    """Move a schedule to a new time, a new rule or a new content revision
    (``reschedule_for``).

    Pending deliveries are suppressed (reason ``rescheduled``) and replaced, in a new
    generation, so a message already in flight for the old one is dropped on re-check.
    A revision bump with nothing pending changes the record only: nothing is resent. The same
    request again changes nothing (``created`` false, the current deliveries).
    """
    if at is not None:
        at = require_aware(at, "at").astimezone(UTC)
    with db.transaction(conn):
        rows = db.fetch_all(conn, "api_reschedule", {
            "tenant": tenant, "key": key, "at": at, **_rule(recurrence), "revision": revision,
            "first_at": _first(recurrence, now, inclusive=False),
            "expanded": recurrence is not None, "now": now})
        if not rows:
            found = db.fetch_one(conn, "schedule_get", {"tenant": tenant, "schedule_key": key})
            assert found is not None
            return ScheduleResult(tenant, key, int(found["id"]), False, [])
    return _result(tenant, rows)


def cancel(conn: db.Connection, *, tenant: str, key: str, now: datetime) -> int:
    """Cancel a schedule (``cancel_for``); return how many pending deliveries were
    suppressed."""
    with db.transaction(conn):
        row = db.fetch_one(conn, "api_cancel", {"tenant": tenant, "key": key, "now": now})
    assert row is not None
    return int(row["suppressed"])


def opt_out(conn: db.Connection, *, tenant: str, recipient: str, channel: str,
            now: datetime) -> None:
    """Stop sending to a recipient on a channel (``opt_out_for``). Pending deliveries stay;
    each is suppressed when it comes due, so opting back in before then restores it."""
    (person,) = _texts([recipient], "recipient")
    with db.transaction(conn):
        db.fetch_one(conn, "api_opt_out", {"tenant": tenant, "recipient": person,
                                           "channel": channel, "now": now})


def opt_in(conn: db.Connection, *, tenant: str, recipient: str, channel: str) -> bool:
    """Undo an opt-out (``opt_in_for``); return whether there was one."""
    (person,) = _texts([recipient], "recipient")
    with db.transaction(conn):
        row = db.fetch_one(conn, "api_opt_in", {"tenant": tenant, "recipient": person,
                                                "channel": channel})
    assert row is not None
    return bool(row["removed"])


def set_tenant_paused(conn: db.Connection, *, tenant: str, paused: bool) -> None:
    """Pause a tenant (its deliveries wait, nothing is lost) or resume it."""
    validate_tenant(tenant)
    with db.transaction(conn):
        db.execute(conn, "tenant_ensure", {"tenant": tenant})
        db.execute(conn, "tenant_set_paused", {"tenant": tenant, "paused": paused})


class _Keep:
    def __repr__(self) -> str:
        return "KEEP"


KEEP = _Keep()  # "leave as it is" for set_kind's stale_after, where None means "never stale"


def set_kind(conn: db.Connection, *, name: str, now: datetime,
             stale_after: timedelta | _Keep | None = KEEP, max_attempts: int | None = None,
             redrive_budget: int | None = None, backoff_base: timedelta | None = None,
             backoff_cap: timedelta | None = None, retention: timedelta | None = None,
             send_windows: Sequence[Any] | _Keep | None = KEEP,
             spread: timedelta | _Keep | None = KEEP, priority: int | None = None) -> db.Row:
    """Create or change a kind of reminder; what is not given keeps its value (or default).

    ``send_windows``: window strings (``"Mon-Fri 08:00-18:00"``) read in the recipient's zone,
    None or ``[]`` for any time; ``spread``: how long deliveries due at one instant are spread
    over (None: not spread); ``priority``: 0-9 (default 5), leased highest first within a
    tenant's share. They apply to deliveries materialised after the change (``windows.py``).
    """
    if not re.match(r"^[a-z0-9][a-z0-9_.-]{0,62}$", name or ""):
        raise InvalidInput(f"kind name must be 1-63 of a-z 0-9 _ . - , got {name!r}")
    if max_attempts is not None and not 1 <= max_attempts <= 100:
        raise InvalidInput(f"max attempts must be between 1 and 100, got {max_attempts}")
    if redrive_budget is not None and not 0 <= redrive_budget <= 100:
        raise InvalidInput(f"redrive budget must be between 0 and 100, got {redrive_budget}")
    if retention is not None and retention < timedelta(hours=1):
        raise InvalidInput(f"retention must be at least an hour, got {duration(retention)}")
    for label, value in (("stale after", stale_after), ("backoff base", backoff_base),
                         ("backoff cap", backoff_cap)):
        if isinstance(value, timedelta) and value <= timedelta(0):
            raise InvalidInput(f"{label} must be positive, got {duration(value)}")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)
                                 or not 0 <= priority <= 9):
        raise InvalidInput(f"priority must be a whole number from 0 to 9, got {priority!r}")
    if isinstance(spread, timedelta) and not timedelta(seconds=1) <= spread <= timedelta(days=1):
        raise InvalidInput(f"spread must be from 1s to 1d, got {duration(spread)}")
    windows = (None if isinstance(send_windows, _Keep) or not send_windows
               else check_windows(send_windows))
    if backoff_base and backoff_cap and backoff_base > backoff_cap:
        raise InvalidInput(f"backoff base {duration(backoff_base)} is above the cap "
                           f"{duration(backoff_cap)}")
    row = db.fetch_one(conn, "kind_upsert", {
        "name": name, "stale_after": None if isinstance(stale_after, _Keep) else stale_after,
        "stale_after_given": not isinstance(stale_after, _Keep), "max_attempts": max_attempts,
        "redrive_budget": redrive_budget, "backoff_base": backoff_base,
        "backoff_cap": backoff_cap, "retention": retention, "now": now,
        "send_windows": json.dumps(windows) if windows else None,
        "send_windows_given": not isinstance(send_windows, _Keep),
        "spread": None if isinstance(spread, _Keep) else spread,
        "spread_given": not isinstance(spread, _Keep), "priority": priority})
    assert row is not None
    return row
