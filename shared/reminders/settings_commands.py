"""The operator's settings, as the command line and the console both change them: kinds and
their policies, opt-outs, and endpoints (removed, or a secret rotation finished; a secret is
only ever typed into the command line, never into a page).

Each takes a connection and plain values (the caller parses its own flags or form fields with
the same parsers) and returns what ``--json`` prints; each change commits with its operator
action (who, via what, why); a repeat that changes nothing records nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from reminders import db
from reminders.errors import NotFound


def kind_json(row: dict[str, Any]) -> dict[str, Any]:
    from reminders import cli_windows

    return {"name": row["name"],
            "stale_after_seconds": row["stale_after"].total_seconds()
            if row["stale_after"] is not None else None,
            "max_attempts": row["max_attempts"], "redrive_budget": row["redrive_budget"],
            "backoff_base_seconds": row["backoff_base"].total_seconds(),
            "backoff_cap_seconds": row["backoff_cap"].total_seconds(),
            "retention_seconds": row["retention"].total_seconds(), **cli_windows.kind_json(row)}


def kinds(conn: db.Connection) -> list[dict[str, Any]]:
    """Every kind and its policies, as ``reminders kinds list --json``."""
    return [kind_json(r) for r in db.fetch_all(conn, "kinds_list")]


def set_kind(conn: db.Connection, *, name: str, now: datetime, who: str | None, via: str,
             reason: str | None, **options: Any) -> dict[str, Any]:
    """Create or change a kind (``schedules.set_kind``'s options; what is not given is kept);
    recorded when something changed."""
    from reminders import operator, schedules

    with db.transaction(conn):
        before = db.fetch_one(conn, "kind_get", {"name": name})
        row = schedules.set_kind(conn, name=name, now=now, **options)
        changed = before is None or kind_json(before) != kind_json(row)
        if changed:
            operator.record_action(conn, action="set", obj="kind", name=row["name"],
                                   tenant=None, reason=reason, now=now, who=who, via=via)
    return {**kind_json(row), "changed": changed}


def set_opt_out(conn: db.Connection, *, tenant: str, recipient: str, channel: str,
                opted_out: bool, now: datetime, who: str | None, via: str,
                reason: str | None, field: str = "--recipient") -> dict[str, Any]:
    """Opt a recipient out of a channel (pending deliveries stay; each is suppressed when due)
    or back in; recorded on the tenant when something changed."""
    from reminders import operator, schedules
    from reminders.operator_commands import plain_text

    plain_text(recipient, field)
    person = recipient.strip()
    with db.transaction(conn):
        if opted_out:
            before = db.fetch_one(conn, "opt_out_get", {
                "tenant": tenant, "recipient": person, "channel": channel})
            schedules.opt_out(conn, tenant=tenant, recipient=recipient, channel=channel,
                              now=now)
            changed = before is None
        else:
            changed = schedules.opt_in(conn, tenant=tenant, recipient=recipient,
                                       channel=channel)
        if changed:
            verb = "opted out" if opted_out else "opted in"
            operator.record_action(conn, action=f"{verb} {person} on {channel}", obj="tenant",
                                   name=tenant, tenant=tenant, reason=reason, now=now,
                                   who=who, via=via,
                                   detail={"recipient": person, "channel": channel})
    return {"tenant": tenant, "recipient": recipient, "channel": channel,
            "opted_out": opted_out, "changed": changed}


def remove_endpoint(conn: db.Connection, *, url: str, tenant: str | None, now: datetime,
                    who: str | None, via: str, reason: str | None) -> dict[str, Any]:
    """One endpoint, by URL and tenant (None: the shared one). Deliveries already scheduled
    to a removed URL fail when they come due (no endpoint)."""
    from reminders import operator

    with db.transaction(conn):
        row = db.fetch_one(conn, "endpoint_remove", {"url": url, "tenant": tenant})
        if row is not None:
            operator.record_action(conn, action="removed", obj="endpoint", name=url,
                                   tenant=tenant, reason=reason, now=now, who=who, via=via)
    if row is None:
        whose = f"tenant {tenant}" if tenant else "every tenant (no --tenant)"
        raise NotFound(f"no endpoint {url} registered for {whose}")
    return dict(row)


def finish_rotation(conn: db.Connection, *, url: str, tenant: str | None, now: datetime,
                    who: str | None, via: str, reason: str | None) -> dict[str, Any]:
    """End an endpoint's secret rotation now: it signs with the new secret only."""
    from reminders import endpoints, operator

    with db.transaction(conn):
        row = endpoints.finish(conn, tenant=tenant, url=url, now=now)
        operator.record_action(conn, action="finished the secret rotation of",
                               obj="endpoint", name=url, tenant=tenant, reason=reason,
                               now=now, who=who, via=via)
    return dict(row)
