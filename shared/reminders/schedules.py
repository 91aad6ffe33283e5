"""The application-facing API: schedule, reschedule, cancel, opt out and back in.

Every function takes the application's own psycopg connection and runs inside the caller's
transaction (as a savepoint), so a booking and its reminders commit or roll back together.
Invalid input raises :class:`InvalidInput` before anything is written.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from reminders import db
from reminders.clock import iso, require_aware
from reminders.errors import InvalidInput, NotFound

if TYPE_CHECKING:
    from reminders.recurrence import Recurrence

CHANNELS = ("webhook", "email", "sms")
MAX_PAYLOAD_BYTES = 16 * 1024
MAX_RECIPIENTS = 50_000
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_PHONE = re.compile(r"^\+[1-9][0-9]{7,14}$")
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


def delivery_key(schedule_id: int, generation: int, occurrence: datetime, recipient: str,
                 channel: str) -> str:
    """The stable key of one occurrence for one recipient on one channel. It never changes
    across retries, the DLQ and redrive; a reschedule starts a new generation, so new keys."""
    stamp = occurrence.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"schedule:{schedule_id}/{generation}:{stamp}:{recipient}:{channel}"


# ---------------------------------------------------------------- validation


def validate_tenant(tenant: str) -> str:
    if not isinstance(tenant, str) or not _TENANT.match(tenant):
        raise InvalidInput(f"tenant must be 1-200 letters, digits or _.:- , got {tenant!r}")
    return tenant


def validate_channel(channel: str) -> str:
    if channel not in CHANNELS:
        raise InvalidInput(f"unknown channel {channel!r}; expected one of {', '.join(CHANNELS)}")
    return channel


def validate_payload(payload: Any) -> str:
    if payload is None:
        payload = {}
    if not isinstance(payload, dict):
        raise InvalidInput(f"payload must be a JSON object, got {type(payload).__name__}")
    try:
        text = json.dumps(payload, separators=(",", ":"), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"payload is not JSON-serialisable: {exc}") from None
    if _JSON_NUL.search(text):  # Postgres's jsonb cannot hold a NUL character
        raise InvalidInput("payload contains a NUL character (\\u0000), which cannot be stored")
    size = len(text.encode())
    if size > MAX_PAYLOAD_BYTES:
        raise InvalidInput(f"payload is {size} bytes; the limit is {MAX_PAYLOAD_BYTES}")
    return text


def validate_recipients(recipients: Iterable[str]) -> list[str]:
    if isinstance(recipients, str):
        recipients = [recipients]
    seen: dict[str, None] = {}
    for r in recipients:
        if not isinstance(r, str) or not r.strip():
            raise InvalidInput("recipient must be a non-empty string")
        if len(r) > 320:
            raise InvalidInput(f"recipient {r[:40]!r}... is longer than 320 characters")
        validate_recipient_text(r)
        seen.setdefault(r.strip(), None)
    if not seen:
        raise InvalidInput("at least one recipient is required")
    if len(seen) > MAX_RECIPIENTS:
        raise InvalidInput(f"{len(seen)} recipients in one call; the limit is {MAX_RECIPIENTS}")
    return list(seen)


RECIPIENT_FORBIDDEN = {"\x00": "a NUL byte", "\n": "a line break", "\r": "a line break",
                       ":": "':' (the delivery key's separator)"}


def validate_recipient_text(recipient: str) -> str:
    """Refuse what a delivery key or a text column cannot carry unambiguously."""
    for ch, what in RECIPIENT_FORBIDDEN.items():
        if ch in recipient:
            raise InvalidInput(f"recipient {recipient[:40]!r} contains {what}")
    return recipient


def destinations_for(channel: str, recipients: Sequence[str], to: str | None) -> list[str]:
    """Where each recipient's delivery goes: the shared ``to`` or the recipient's address."""
    if channel == "webhook":
        if not to or not re.match(r"^https?://[^\s/]+", to):
            raise InvalidInput(f"webhook channel needs an http(s) URL to send to, got {to!r}")
        return [to] * len(recipients)
    if to is not None and len(recipients) > 1:
        raise InvalidInput(f"{channel}: with several recipients each recipient is its own address;"
                           " do not pass a single destination")
    addresses = [to] if to is not None else list(recipients)
    pattern, what = (_EMAIL, "an e-mail address") if channel == "email" else (
        _PHONE, "an E.164 phone number (+ and 8-15 digits)")
    for address in addresses:
        if not pattern.match(address):
            raise InvalidInput(f"{channel}: {address!r} is not {what}")
    return addresses


def _request_hash(**fields: Any) -> str:
    text = json.dumps(fields, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------- the API


def schedule(conn: db.Connection, *, tenant: str, recipients: Iterable[str], channel: str,
             now: datetime, at: datetime | None = None, recurrence: Recurrence | None = None,
             to: str | None = None, kind: str = "default", payload: dict[str, Any] | None = None,
             revision: str = "1", key: str | None = None) -> ScheduleResult:
    """Schedule one logical reminder for one or many recipients.

    Idempotent on ``key``: calling again with the same key and the same request returns the
    existing deliveries and creates nothing; the same key with a different request is refused.
    """
    validate_tenant(tenant)
    validate_channel(channel)
    people = validate_recipients(recipients)
    destinations = destinations_for(channel, people, to)
    payload_json = validate_payload(payload)
    if not isinstance(revision, str) or not revision or len(revision) > 100:
        raise InvalidInput("revision must be a non-empty string of at most 100 characters")
    if (at is None) == (recurrence is None):
        raise InvalidInput("give exactly one of: an instant (at) or a recurrence "
                           "(rrule, tz, start)")
    if at is not None:
        at = require_aware(at, "at").astimezone(UTC)
    schedule_key = key if key is not None else f"auto-{uuid.uuid4()}"
    if not schedule_key or len(schedule_key) > 200:
        raise InvalidInput("key must be 1-200 characters")
    rec_fields: dict[str, Any] = {"rrule": None, "tz": None, "local_start": None,
                                  "gap": "shift", "overlap": "first"}
    if recurrence is not None:
        rec_fields = {"rrule": recurrence.rrule, "tz": recurrence.tz,
                      "local_start": recurrence.local_start, "gap": recurrence.gap,
                      "overlap": recurrence.overlap}
    request_hash = _request_hash(recipients=people, channel=channel, to=to, kind=kind,
                                 payload=payload_json, revision=revision, at=at, **rec_fields)
    with db.transaction(conn):
        if db.fetch_one(conn, "kind_get", {"name": kind}) is None:
            raise InvalidInput(f"unknown kind {kind!r}; create it with `reminders kinds set`")
        db.execute(conn, "tenant_ensure", {"tenant": tenant})
        if channel == "webhook" and db.fetch_one(
                conn, "endpoint_find", {"url": to, "tenant": tenant}) is None:
            raise InvalidInput(f"no webhook endpoint registered for {to}; "
                               "register it with `reminders endpoints add URL --secret whsec_...`")
        row = db.fetch_one(conn, "schedule_insert", {
            "tenant": tenant, "schedule_key": schedule_key, "kind": kind, "channel": channel,
            "destination": to if channel == "webhook" else None, "payload": payload_json,
            "revision": revision, "at": at, "request_hash": request_hash, "now": now,
            **rec_fields})
        if row is None:
            return _existing(conn, tenant, schedule_key, request_hash)
        schedule_id, generation = int(row["id"]), int(row["generation"])
        db.execute(conn, "recipients_insert", {"schedule_id": schedule_id, "tenant": tenant,
                                               "recipients": people,
                                               "destinations": destinations})
        if recurrence is not None:
            from reminders.series import first_due

            first = first_due(recurrence, now)
            plan: Plan = [(first.utc, "scheduled", None)] * len(people) if first else []
        else:
            assert at is not None
            plan = [(at, "scheduled", None)] * len(people)
        chosen = slice(0, len(plan))  # nobody, when the rule has no occurrence left
        refs = insert_deliveries(conn, tenant=tenant, schedule_id=schedule_id,
                                 generation=generation, channel=channel,
                                 recipients=people[chosen], destinations=destinations[chosen],
                                 plan=plan, now=now)
        if not refs:  # a rule whose occurrences are all in the past
            db.execute(conn, "schedule_end", {"id": schedule_id, "tenant": tenant, "now": now})
    return ScheduleResult(tenant, schedule_key, schedule_id, True, refs)


def insert_deliveries(conn: db.Connection, *, tenant: str, schedule_id: int, generation: int,
                      channel: str, recipients: Sequence[str], destinations: Sequence[str],
                      plan: Plan, now: datetime) -> list[DeliveryRef]:
    """Insert one delivery per (recipient, planned occurrence) in one statement."""
    rows = [(r, d, p) for r, d, p in zip(recipients, destinations, plan, strict=True)]
    if not rows:
        return []
    inserted = db.fetch_all(conn, "deliveries_insert", {
        "schedule_id": schedule_id, "tenant": tenant, "now": now,
        "recipients": [r for r, _, _ in rows],
        "destinations": [d for _, d, _ in rows],
        "keys": [delivery_key(schedule_id, generation, p[0], r, channel) for r, _, p in rows],
        "occurrences": [p[0] for _, _, p in rows],
        "states": [p[1] for _, _, p in rows],
        "reasons": [p[2] for _, _, p in rows],
    })
    return [DeliveryRef(r["recipient"], r["delivery_key"], r["due_at"], r["state"])
            for r in inserted]


def _existing(conn: db.Connection, tenant: str, schedule_key: str,
              request_hash: str) -> ScheduleResult:
    row = db.fetch_one(conn, "schedule_get", {"tenant": tenant, "schedule_key": schedule_key})
    if row is None:  # the conflicting insert was rolled back meanwhile
        raise InvalidInput(f"key {schedule_key!r} is being created concurrently; retry")
    if row["request_hash"] != request_hash:
        raise InvalidInput(f"key {schedule_key!r} was already used for a different request; "
                           "use reschedule to change it, or a new key")
    rows = db.fetch_all(conn, "deliveries_of_schedule_generation", {
        "schedule_id": row["id"], "tenant": tenant, "generation": row["generation"]})
    refs = [DeliveryRef(r["recipient"], r["delivery_key"], r["due_at"], r["state"]) for r in rows]
    return ScheduleResult(tenant, schedule_key, int(row["id"]), False, refs)


def _lock(conn: db.Connection, tenant: str, key: str) -> db.Row:
    row = db.fetch_one(conn, "schedule_lock", {"tenant": tenant, "schedule_key": key})
    if row is None:
        raise NotFound(f"no schedule with key {key!r} for tenant {tenant!r}")
    if row["state"] == "cancelled":
        raise InvalidInput(f"schedule {key!r} is cancelled")
    return row


# What a reschedule may change, as (request field, schedule column).
_RESCHEDULED_FIELDS = (("at", "at"), ("rrule", "rrule"), ("tz", "tz"),
                       ("local_start", "local_start"), ("gap", "gap_policy"),
                       ("overlap", "overlap_policy"), ("revision", "revision"))


def reschedule(conn: db.Connection, *, tenant: str, key: str, now: datetime,
               at: datetime | None = None, revision: str | None = None,
               recurrence: Recurrence | None = None) -> ScheduleResult:
    """Move a schedule to a new time, a new rule or a new content revision.

    Pending deliveries are suppressed (reason ``rescheduled``) and replaced, in a new
    generation, so a message already in flight for the old one is dropped on re-check.
    A revision bump with nothing pending changes the record only: nothing is resent. The same
    request again changes nothing (``created`` false, the current deliveries).
    """
    validate_tenant(tenant)
    if at is None and revision is None and recurrence is None:
        raise InvalidInput("reschedule needs a new time (at), rule or revision")
    if at is not None:
        at = require_aware(at, "at").astimezone(UTC)
    if revision is not None and (not revision or len(revision) > 100):
        raise InvalidInput("revision must be a non-empty string of at most 100 characters")
    with db.transaction(conn):
        current = _lock(conn, tenant, key)
        is_recurring = current["rrule"] is not None
        if at is not None and is_recurring:
            raise InvalidInput(f"schedule {key!r} recurs; give a new rule, not an instant")
        if recurrence is not None and not is_recurring:
            raise InvalidInput(f"schedule {key!r} is one-off; give a new instant, not a rule")
        rec = recurrence
        fields = {"at": at if at is not None else current["at"],
                  "rrule": rec.rrule if rec else current["rrule"],
                  "tz": rec.tz if rec else current["tz"],
                  "local_start": rec.local_start if rec else current["local_start"],
                  "gap": rec.gap if rec else current["gap_policy"],
                  "overlap": rec.overlap if rec else current["overlap_policy"],
                  "revision": revision if revision is not None else current["revision"]}
        if current["state"] == "active" and all(
                fields[name] == current[column] for name, column in _RESCHEDULED_FIELDS):
            # The same request again (a retry): nothing changes, nothing is sent again.
            rows = db.fetch_all(conn, "deliveries_of_schedule_generation", {
                "schedule_id": current["id"], "tenant": tenant,
                "generation": current["generation"]})
            return ScheduleResult(tenant, key, int(current["id"]), False, [
                DeliveryRef(r["recipient"], r["delivery_key"], r["due_at"], r["state"])
                for r in rows])
        superseded = db.fetch_all(conn, "deliveries_supersede_pending", {
            "schedule_id": current["id"], "tenant": tenant, "reason": "rescheduled", "now": now})
        pending = {r["recipient"]: r["occurrence_at"] for r in superseded}
        updated = db.fetch_one(conn, "schedule_update", {
            "id": current["id"], "tenant": tenant, "now": now,
            "revive": at is not None or rec is not None, **fields})
        assert updated is not None
        generation = int(updated["generation"])
        everyone = db.fetch_all(conn, "recipients_of_schedule",
                                {"schedule_id": current["id"], "tenant": tenant})
        if at is not None:  # a new instant: everybody gets it
            chosen = everyone
            plan: Plan = [(at, "scheduled", None)] * len(chosen)
        elif rec is not None:  # a new rule: every recipient's series restarts from now
            from reminders.series import first_due

            first = first_due(rec, now, inclusive=False)
            chosen = everyone if first else []
            plan = [(first.utc, "scheduled", None)] * len(chosen) if first else []
        else:  # a new revision: the pending ones, same instant, new content
            chosen = [r for r in everyone if r["recipient"] in pending]
            plan = [(pending[r["recipient"]], "scheduled", None) for r in chosen]
        refs = insert_deliveries(conn, tenant=tenant, schedule_id=int(current["id"]),
                                 generation=generation, channel=current["channel"],
                                 recipients=[r["recipient"] for r in chosen],
                                 destinations=[r["destination"] for r in chosen],
                                 plan=plan, now=now)
        if rec is not None and not refs:  # the new rule has nothing left to deliver
            db.execute(conn, "schedule_end", {"id": current["id"], "tenant": tenant, "now": now})
    return ScheduleResult(tenant, key, int(current["id"]), False, refs)


def cancel(conn: db.Connection, *, tenant: str, key: str, now: datetime) -> int:
    """Cancel a schedule; return how many pending deliveries were suppressed."""
    validate_tenant(tenant)
    with db.transaction(conn):
        current = _lock(conn, tenant, key)
        db.execute(conn, "schedule_cancel", {"id": current["id"], "tenant": tenant, "now": now})
        suppressed = db.fetch_all(conn, "deliveries_supersede_pending", {
            "schedule_id": current["id"], "tenant": tenant, "reason": "cancelled", "now": now})
    return len(suppressed)


def opt_out(conn: db.Connection, *, tenant: str, recipient: str, channel: str,
            now: datetime) -> None:
    """Stop sending to a recipient on a channel. Pending deliveries stay; each is suppressed
    when it comes due, so opting back in before then restores it."""
    validate_tenant(tenant)
    validate_channel(channel)
    (person,) = validate_recipients([recipient])
    with db.transaction(conn):
        db.execute(conn, "tenant_ensure", {"tenant": tenant})
        db.execute(conn, "opt_out_add", {"tenant": tenant, "recipient": person,
                                         "channel": channel, "now": now})
        # Ordered with attempt starts: one in progress commits first; a later one sees this.
        db.execute(conn, "deliveries_lock_recipient", {"tenant": tenant, "recipient": person,
                                                       "channel": channel})


def opt_in(conn: db.Connection, *, tenant: str, recipient: str, channel: str) -> bool:
    """Undo an opt-out; return whether there was one."""
    validate_tenant(tenant)
    validate_channel(channel)
    (recipient,) = validate_recipients([recipient])
    with db.transaction(conn):
        return db.execute(conn, "opt_out_remove", {"tenant": tenant, "recipient": recipient,
                                                   "channel": channel}) > 0


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
             backoff_cap: timedelta | None = None, retention: timedelta | None = None) -> db.Row:
    """Create or change a kind of reminder; what is not given keeps its value (or default)."""
    if not re.match(r"^[a-z0-9][a-z0-9_.-]{0,62}$", name or ""):
        raise InvalidInput(f"kind name must be 1-63 of a-z 0-9 _ . - , got {name!r}")
    if max_attempts is not None and not 1 <= max_attempts <= 100:
        raise InvalidInput(f"max attempts must be between 1 and 100, got {max_attempts}")
    if redrive_budget is not None and not 0 <= redrive_budget <= 100:
        raise InvalidInput(f"redrive budget must be between 0 and 100, got {redrive_budget}")
    if retention is not None and retention < timedelta(hours=1):
        raise InvalidInput(f"retention must be at least an hour, got {retention}")
    for label, value in (("stale after", stale_after), ("backoff base", backoff_base),
                         ("backoff cap", backoff_cap)):
        if isinstance(value, timedelta) and value <= timedelta(0):
            raise InvalidInput(f"{label} must be positive, got {value}")
    if backoff_base and backoff_cap and backoff_base > backoff_cap:
        raise InvalidInput(f"backoff base {backoff_base} is above the cap {backoff_cap}")
    row = db.fetch_one(conn, "kind_upsert", {
        "name": name, "stale_after": None if isinstance(stale_after, _Keep) else stale_after,
        "stale_after_given": not isinstance(stale_after, _Keep), "max_attempts": max_attempts,
        "redrive_budget": redrive_budget, "backoff_base": backoff_base,
        "backoff_cap": backoff_cap, "retention": retention, "now": now})
    assert row is not None
    return row
