"""A delivery's page beyond what `reminders show --json` says: its payload (pretty, with a
bounded preview), and the request a webhook send made, rebuilt from what the ledger records
(the ledger does not keep requests byte for byte; the page says which parts are rebuilt)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from reminders.channels.base import Message
from reminders.channels.signing import HEADER_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP, message_id
from reminders.channels.webhook import USER_AGENT, webhook_body

PREVIEW_CHARS = 2000


def payload_view(payload: Any) -> dict[str, Any]:
    """The payload as indented JSON, its first ``PREVIEW_CHARS`` characters, and whether that
    is all of it. An empty payload is said in words, never ``{}``."""
    if payload in (None, {}, []):
        return {"empty": True, "text": "", "preview": "", "truncated": False}
    text = json.dumps(payload, indent=2, ensure_ascii=False, sort_keys=True)
    return {"empty": False, "text": text, "preview": text[:PREVIEW_CHARS],
            "truncated": len(text) > PREVIEW_CHARS, "chars": len(text)}


def webhook_requests(d: dict[str, Any], payload: Any) -> list[dict[str, Any]]:
    """For each attempt of a webhook delivery, the request as the channel built it: method,
    URL, headers (the signature never: it is made from the endpoint's secret) and body. The
    timestamp header is the send's own second, which the ledger does not record: the
    attempt's start is shown in its place, and said so."""
    if d["channel"] != "webhook":
        return []
    from urllib.parse import urlsplit

    target = urlsplit(d["destination"])
    requests = []
    for a in d["attempts"]:
        occurrence = datetime.fromisoformat(d["occurrence_at"].replace("Z", "+00:00"))
        body = webhook_body(Message(
            delivery_key=d["delivery_key"], tenant=d["tenant"], kind=d["kind"],
            recipient=d["recipient"], destination=d["destination"], payload=payload,
            revision=d["revision"], occurrence_at=occurrence, attempt=a["attempt_no"],
            secrets=()))
        started = datetime.fromisoformat(a["started_at"].replace("Z", "+00:00"))
        ident = message_id(d["delivery_key"])
        headers = [("Host", target.netloc), ("Content-Type", "application/json"),
                   ("User-Agent", USER_AGENT), ("Idempotency-Key", ident), (HEADER_ID, ident),
                   (HEADER_TIMESTAMP, f"{int(started.timestamp())} (the attempt's start; "
                    "the send's own second is not recorded)"),
                   (HEADER_SIGNATURE, "v1,… (made from the endpoint's secret: never shown)")]
        path = (target.path or "/") + (f"?{target.query}" if target.query else "")
        requests.append({"attempt_no": a["attempt_no"], "line": f"POST {path} HTTP/1.1",
                         "headers": headers, "body": json.dumps(
                             json.loads(body), indent=2, ensure_ascii=False)})
    return requests


def timeline(d: dict[str, Any]) -> list[dict[str, Any]]:
    """Events and the operator actions on its tenant, endpoint, kind and schedule, by time."""
    items = [{"at": e["at"], "actor": e["actor"], "who": e.get("who") or "",
              "event": e["event"], "detail": e.get("detail") or "", "kind": "event"}
             for e in d["events"]]
    items += [{"at": a["at"], "actor": "operator", "who": a["who"] or "",
               "event": f"{a['action']} {a['object']} {a['name']}",
               "detail": a["reason"] or "no reason given", "kind": "action"}
              for a in d.get("operator_actions", [])]
    return sorted(items, key=lambda t: t["at"])
