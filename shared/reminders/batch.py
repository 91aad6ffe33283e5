"""What the consumer and redrive share: read an SQS batch (parse every body, load every row it
names in one round trip) and answer with a partial batch response."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reminders import db
from reminders.errors import InvalidInput
from reminders.observability import logger
from reminders.queue import LeaseMessage, parse_body


@dataclass(frozen=True)
class Batch:
    messages: dict[str, LeaseMessage | InvalidInput]  # by SQS message id
    rows: dict[int, db.Row]                           # by delivery id


def load_rows(conn: db.Connection, ids: list[int]) -> dict[int, db.Row]:
    """Everything the re-check needs for a whole batch, in one round trip."""
    if not ids:
        return {}
    return {int(r["id"]): r for r in db.fetch_all(conn, "recheck_load", {"ids": ids},
                                                     every_instant=True)}


def parse(event: dict[str, Any]) -> dict[str, LeaseMessage | InvalidInput]:
    """Every body of the batch, by SQS message id: a lease message, or why it is not one."""
    messages: dict[str, LeaseMessage | InvalidInput] = {}
    for record in event.get("Records", []):
        try:
            messages[record["messageId"]] = parse_body(record.get("body", ""))
        except InvalidInput as exc:
            messages[record["messageId"]] = exc
    return messages


def read(event: dict[str, Any], conn: db.Connection) -> Batch:
    messages = parse(event)
    ids = sorted({m.delivery_id for m in messages.values() if isinstance(m, LeaseMessage)})
    return Batch(messages, load_rows(conn, ids))


Record = dict[str, Any]  # one SQS record as Lambda delivers it


def partial_response(event: dict[str, Any], handle: Callable[[Record], Any]) -> dict[str, Any]:
    """Run ``handle`` per record; a record that raises fails alone, named in the answer's
    ``batchItemFailures`` (the event source mapping reports batch item failures), with its
    reason logged. Written here rather than taken from Powertools' batch utility, whose import
    brings every event source's data classes into the cold start."""
    failures: list[dict[str, str]] = []
    for record in event.get("Records", []):
        try:
            handle(record)
        except Exception as exc:  # noqa: BLE001 (one record's failure never fails the rest)
            logger.warning("record failed", extra={"message_id": record.get("messageId"),
                                                   "error_type": type(exc).__name__,
                                                   "error": str(exc)[:300]})
            failures.append({"itemIdentifier": str(record.get("messageId"))})
    return {"batchItemFailures": failures}
