"""Instants Python cannot hold, loaded one row at a time.

Postgres keeps timestamps from 4713 BC to 294276 AD and ``infinity``; Python's datetime holds
the years 1-9999, and psycopg refuses a row with anything else ("timestamp too large (after
year 10K)"), failing the whole result. The entry checks refuse such instants; a row written
before them, or by hand, still loads on the operator's connections as an
:class:`UnreadableInstant`: the nearest instant Python holds, carrying the text Postgres wrote,
which every text and JSON output shows instead.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.types.datetime import TimestamptzLoader

FIRST = datetime.min.replace(tzinfo=UTC)
LAST = datetime.max.replace(tzinfo=UTC)


class UnreadableInstant(datetime):
    """An instant outside the years 1-9999: ``written`` is Postgres's own text for it."""

    written: str

    @classmethod
    def of(cls, written: str) -> UnreadableInstant:
        near = FIRST if written.startswith("-") or written.endswith(" BC") else LAST
        value = cls(near.year, near.month, near.day, near.hour, near.minute, near.second,
                    near.microsecond, tzinfo=UTC)
        value.written = written
        return value


class _EveryInstant(TimestamptzLoader):
    def load(self, data: Any) -> datetime:
        try:
            loaded: datetime = super().load(data)
        except psycopg.DataError:
            return UnreadableInstant.of(bytes(data).decode("utf-8", "replace"))
        return loaded


def load_every_instant(conn: psycopg.Connection[Any]) -> None:
    """Load this connection's timestamptz values (text results) each on its own terms."""
    conn.adapters.register_loader("timestamptz", _EveryInstant)
