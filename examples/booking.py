"""A booking and its reminder in one transaction, from Python with plain psycopg: the SQL
functions, not the ``reminders`` package, so it reads like any other language's client.

    DATABASE_URL=postgresql://booking_app@host/appdb python examples/booking.py 42
"""

from __future__ import annotations

import json
import os
import sys

import psycopg


def book(conn: psycopg.Connection, booking: int) -> list[tuple[object, ...]]:
    with conn.transaction():
        conn.execute("create table if not exists bookings (id integer primary key,"
                     " guest text not null, starts_at timestamptz not null)")
        conn.execute("insert into bookings (id, guest, starts_at)"
                     " values (%s, 'alice@example.com', now() + interval '14 days')",
                     (booking,))
        return conn.execute(
            "select schedule_key, created, recipient, delivery_key, due_at, state"
            " from reminders.schedule(key => %s, recipients => %s, channel => 'email',"
            " at => now() + interval '13 days', payload => %s::jsonb)",
            (f"booking-{booking}", ["alice@example.com"], json.dumps({"booking": booking})),
        ).fetchall()


def main() -> int:
    booking = int(sys.argv[1]) if len(sys.argv) > 1 else 42
    with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
        for row in book(conn, booking):
            print(*row, sep="\t")
    return 0


if __name__ == "__main__":
    sys.exit(main())
