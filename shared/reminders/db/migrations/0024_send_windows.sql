-- Send windows, spreading and priorities, per kind.
-- send_windows: null (any time) or a JSON array of {"days": [1..7 ISO weekdays], "start":
-- "HH:MM", "end": "HH:MM"} read in the recipient's zone (send_window_due); spread: deliveries
-- due at one instant land over this long, each at an offset from its delivery key
-- (spread_offset); priority: 0-9, the scanner leases a tenant's higher priorities first.
alter table kinds add column send_windows jsonb
    check (send_windows is null or jsonb_typeof(send_windows) = 'array');
alter table kinds add column spread interval check (spread is null or spread > interval '0');
alter table kinds add column priority smallint not null default 5 check (priority between 0 and 9);

-- Why a delivery's due time is not its occurrence (held by its kind's send window, spread),
-- set once when it is materialised; null when it is due at its occurrence.
alter table deliveries add column held text;
-- The instant the window and spread set (null: its occurrence): what lateness is measured from.
alter table deliveries add column planned_at timestamptz;
-- The lateness histogram reads it beside the occurrence, index-only as before (0007).
create index deliveries_sent_planned on deliveries (updated_at) include (occurrence_at, planned_at)
    where state = 'sent';
drop index deliveries_sent_at;

-- The scanner reads a tenant's due entries highest priority first: one range per priority.
alter table due_queue add column priority smallint not null default 5;
-- Held entries (a paused schedule's, 0023) are not in it: a held backlog is never read.
create index due_queue_tenant_priority_due on due_queue (tenant, priority, due_at, id)
    where token is null and not held;
