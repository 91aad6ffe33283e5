-- A send in flight is a fact of the delivery row, so Postgres's row lock orders every writer
-- that ends or takes over a lease (reclaim, replay, cancel, reschedule, a duplicate message).
-- Old code keeps working while this applies: every column is new, nullable or defaulted.

alter table deliveries
    -- The open attempt's number and the instant by which its send has ended, crashed or not.
    add column send_attempt integer,
    add column send_deadline timestamptz,
    -- The current lease's message reached a consumer (set before anything else is tried).
    add column received boolean not null default false,
    -- Leases whose message reached a consumer and ended before any send was tried: the
    -- poison-pill count. A lease nobody consumed (a consumer outage) never counts.
    add column empty_receives integer not null default 0,
    -- Attempts made before an operator's retry; the kind's budget counts the ones after it.
    add column attempts_base integer not null default 0,
    -- Cancelled or rescheduled while a send was in flight: why it must not be tried again.
    add column superseded text,
    -- Terminal, and its recurring series' next occurrence is not materialised yet.
    add column advance_series boolean not null default false,
    add constraint deliveries_send_in_flight check (
        (send_attempt is null) = (send_deadline is null)
        and (send_attempt is null or state = 'leased')
        and (superseded is null or send_attempt is not null));

-- A superseded delivery still finishing its send does not block its replacement.
drop index deliveries_one_pending;
create unique index deliveries_one_pending on deliveries (schedule_id, recipient)
    where state in ('scheduled', 'leased', 'retrying') and superseded is null;

-- Oldest due first, ties by id, read straight off the index.
drop index deliveries_due;
create index deliveries_due on deliveries (due_at, id) where state in ('scheduled', 'retrying');

-- An opt-out locks the recipient's pending deliveries, so it is ordered with attempt starts.
create index deliveries_pending_recipient on deliveries (tenant, recipient)
    where state in ('scheduled', 'leased', 'retrying');

-- The scanner's bounded pass over series waiting for their next occurrence.
create index deliveries_advance_series on deliveries (updated_at, id) where advance_series;
