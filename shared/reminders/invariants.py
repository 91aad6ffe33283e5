"""The invariants of ARCHITECTURE.md, checked from outside: SQL over the tables (``checks.sql``)
and, when given, a webhook receiver's counts per idempotency key. Nothing here asks the service
what it thinks happened.

:func:`violations` holds at any instant (a fault drill checks it after every scanner tick):

(a) no lease outlives its expiry by more than one scanner tick (60 s);
(b) no attempt is open (started, no outcome) unless it belongs to its delivery's current lease
    and that lease is live, with the same one-tick allowance as (a) for the reclaim to come;
(c) no delivery has more attempts in the ledger than its kind's ``max_attempts``;
(d) at a receiver that honours the key, at most one effect per delivery key. The local receiver
    deduplicates, so an effect here is a 2xx answer (what a receiver that ignores the key would
    have acted on). A second one is allowed only for a same-key resend the ledger shows: an
    attempt whose outcome is ``unknown``, or more than one attempt. Every request the receiver
    saw must also have its attempt in the ledger (the attempt is written before the send);
(f) the counts ``status`` and the console read (``delivery_counts``, kept by triggers) equal a
    count of the deliveries by tenant, kind, channel and state;
(g) every ``scheduled`` or ``retrying`` delivery has one ``due_queue`` row (migration 0013: a
    due entry, or a pending lease), with the row's state and due time, and no other delivery
    has one.

:func:`unsettled` is (e), for after recovery: every delivery due at or before ``now`` has an
outcome (sent, failed, suppressed, stale, unknown, dead) or is held by a live lease.

Each finding is one line naming the delivery key ((f): the tenant/kind/channel/state group;
(g): a key, or the id of an entry with no delivery).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from reminders import db
from reminders.clock import iso
from reminders.db.queries import CHECKS

TICK_SECONDS = 60  # the scanner's schedule: rate(1 minute)


@dataclass(frozen=True)
class Violation:
    rule: str          # a short name of the invariant broken
    delivery_key: str
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.delivery_key}: {self.detail}"


def check(conn: db.Connection, *, now: datetime,
          receiver_stats: Mapping[str, Any] | None = None) -> list[Violation]:
    """(a)-(d), (f) and (g) at ``now``, as structured findings."""
    found: list[Violation] = []
    params = {"now": now, "tick_seconds": TICK_SECONDS}
    for row in db.fetch_all(conn, "check_leases_past_expiry", params, source=CHECKS):
        found.append(Violation(
            "lease outlived its expiry", row["delivery_key"],
            f"leased until {iso(row['lease_expires_at'])}, still leased "
            f"{row['past_seconds']:.0f} s later (one tick allows {TICK_SECONDS} s)"))
    for row in db.fetch_all(conn, "check_open_attempts", params, source=CHECKS):
        if not row["same_lease"]:
            why = (f"the delivery is {row['state']}" if row["state"] != "leased"
                   else "the delivery is leased again under another token")
        else:
            why = f"its lease expired at {iso(row['lease_expires_at'])}"
        found.append(Violation(
            "open attempt without a live lease", row["delivery_key"],
            f"attempt {row['attempt_no']} started {iso(row['started_at'])} has no outcome "
            f"and {why}"))
    for row in db.fetch_all(conn, "check_attempts_over_budget", source=CHECKS):
        found.append(Violation(
            "attempts over budget", row["delivery_key"],
            f"{row['attempts']} attempts in the ledger; kind {row['kind']} allows "
            f"{row['max_attempts']}"))
    for row in db.fetch_all(conn, "check_delivery_counts", source=CHECKS):
        group = f"{row['tenant']}/{row['kind']}/{row['channel']}/{row['state']}"
        found.append(Violation(
            "counts differ from the rows", group,
            f"delivery_counts says {row['kept']}, the deliveries number {row['actual']}"))
    for row in db.fetch_all(conn, "check_due_queue", source=CHECKS):
        entry = ("none" if row["entry_state"] is None else
                 f"{row['entry_state']} due {_at(row['entry_due_at'])}"
                 + (", a pending lease" if row["pending"] else ""))
        found.append(Violation("due set differs from the rows", row["delivery_key"], (
            f"delivery {row['state'] or 'missing'} due {_at(row['due_at'])}; due_queue row: "
            f"{entry}")))
    if receiver_stats is not None:
        found += _receiver_findings(conn, receiver_stats)
    return found


def _at(value: datetime | None) -> str:
    return iso(value) if value is not None else "-"


def _receiver_findings(conn: db.Connection, stats: Mapping[str, Any]) -> list[Violation]:
    requests: Mapping[str, int] = stats.get("requests", {})
    answered_ok: Mapping[str, int] = stats.get("ok_answers", {})
    effects: Mapping[str, int] = stats.get("effects", {})
    keys = sorted(set(requests) | set(answered_ok) | set(effects))
    if not keys:
        return []
    ledger = {r["delivery_key"]: r for r in db.fetch_all(
        conn, "check_ledger_of_keys", {"keys": keys}, source=CHECKS)}
    found: list[Violation] = []
    for key in keys:
        row = ledger.get(key)
        seen = requests.get(key, 0)
        acted = max(answered_ok.get(key, 0), effects.get(key, 0))
        if row is None:
            found.append(Violation("effect without a delivery", key,
                                   f"the receiver saw {seen} request(s) for a key no delivery "
                                   "has"))
            continue
        attempts = int(row["attempts"])
        if seen > attempts:
            found.append(Violation(
                "send without its attempt", key,
                f"the receiver saw {seen} request(s), the ledger holds {attempts} attempt(s)"))
        if acted > 1 and attempts <= 1 and not row["any_unknown"]:
            found.append(Violation(
                "more than one effect", key,
                f"the receiver acted on it {acted} times; the ledger shows {attempts} attempt "
                "and no unknown outcome"))
    return found


def violations(conn: db.Connection, *, now: datetime,
               receiver_stats: Mapping[str, Any] | None = None) -> list[str]:
    """(a)-(d), (f) and (g) at ``now``: one readable line per violation, naming the delivery key
    (for (f), the group)."""
    return [str(v) for v in check(conn, now=now, receiver_stats=receiver_stats)]


def unsettled_findings(conn: db.Connection, now: datetime) -> list[Violation]:
    found = []
    for row in db.fetch_all(conn, "check_unsettled", {"now": now}, source=CHECKS):
        late = (now - row["due_at"]).total_seconds()
        held = (f"; its lease expired at {iso(row['lease_expires_at'])}"
                if row["state"] == "leased" else "")
        why = f" ({row['reason']})" if row["reason"] else ""
        found.append(Violation(
            "unsettled", row["delivery_key"],
            f"{row['state']}{why}, due {iso(row['due_at'])} ({late:.0f} s ago), has no outcome "
            f"and no live lease{held}"))
    return found


def unsettled(conn: db.Connection, now: datetime) -> list[str]:
    """(e): every delivery due at or before ``now`` that is neither terminal nor held by a live
    lease, one line each. Empty once the system has recovered."""
    return [str(v) for v in unsettled_findings(conn, now)]
