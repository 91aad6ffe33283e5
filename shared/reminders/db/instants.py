"""Instants Python cannot hold, loaded one row at a time.

Postgres keeps timestamps from 4713 BC to 294276 AD and ``infinity``; Python's datetime holds
the years 1-9999, and psycopg refuses a row with anything else ("timestamp too large (after
year 10K)"), failing the whole result. The entry checks refuse such instants; a row written
before them, or by hand, still loads on the operator's connections as an
:class:`UnreadableInstant`: the nearest instant Python holds, carrying the text Postgres wrote,
which every text and JSON output shows instead. The consumer's and the redrive's re-check load
their rows the same way (one statement's cursor, never the whole connection) and park a row
holding such an instant with :func:`unreadable_reason`, so its batch goes on.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.abc import AdaptContext
from psycopg.types.datetime import TimestampLoader, TimestamptzLoader

FIRST = datetime.min.replace(tzinfo=UTC)
LAST = datetime.max.replace(tzinfo=UTC)


class UnreadableInstant(datetime):
    """An instant outside the years 1-9999: ``written`` is Postgres's own text for it."""

    written: str

    @classmethod
    def of(cls, written: str, *, zoned: bool = True) -> UnreadableInstant:
        near = FIRST if written.startswith("-") or written.endswith(" BC") else LAST
        value = cls(near.year, near.month, near.day, near.hour, near.minute, near.second,
                    near.microsecond, tzinfo=UTC if zoned else None)
        value.written = written
        return value


class _EveryInstant(TimestamptzLoader):
    def load(self, data: Any) -> datetime:
        try:
            loaded: datetime = super().load(data)
        except psycopg.DataError:
            return UnreadableInstant.of(bytes(data).decode("utf-8", "replace"))
        return loaded


class _EveryLocalInstant(TimestampLoader):
    """The same for ``timestamp`` (a schedule's local wall-clock start)."""

    def load(self, data: Any) -> datetime:
        try:
            loaded: datetime = super().load(data)
        except psycopg.DataError:
            return UnreadableInstant.of(bytes(data).decode("utf-8", "replace"), zoned=False)
        return loaded


def load_every_instant(context: AdaptContext) -> None:
    """Load the timestamptz and timestamp values (text results) of this connection, or of
    this one cursor, each on its own terms."""
    context.adapters.register_loader("timestamptz", _EveryInstant)
    context.adapters.register_loader("timestamp", _EveryLocalInstant)


def unreadable_reason(row: dict[str, Any]) -> str | None:
    """Why a row loaded by :func:`load_every_instant` cannot be acted on: its first column
    holding an instant Python cannot hold, named with what Postgres wrote; None for a row
    whose every instant loaded."""
    for column, value in row.items():
        if isinstance(value, UnreadableInstant):
            return (f"its {column} cannot be read back: {value.written} "
                    "(outside the years 1-9999)")
    return None
