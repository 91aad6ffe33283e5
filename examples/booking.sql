-- A booking and its reminder in one transaction, from psql (any client works the same way).
-- Run as an application login granted reminders_client and mapped to a tenant:
--   psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -v booking=42 -f examples/booking.sql
\set ON_ERROR_STOP on
\if :{?booking}
\else
\set booking 42
\endif

create table if not exists bookings (id integer primary key, guest text not null,
                                     starts_at timestamptz not null);

begin;
insert into bookings (id, guest, starts_at)
values (:booking, 'alice@example.com', now() + interval '14 days');
-- The reminder a day before; the key makes a retried transaction create nothing new.
select schedule_key, created, recipient, delivery_key, due_at, state
from reminders.schedule(key => 'booking-' || :booking,
                        recipients => array['alice@example.com'],
                        channel => 'email',
                        at => now() + interval '13 days',
                        payload => jsonb_build_object('booking', :booking));
commit;

-- What the application may read back: its own tenant's rows only.
select delivery_key, state, due_at from reminders.my_deliveries
where schedule_key = 'booking-' || :booking;
