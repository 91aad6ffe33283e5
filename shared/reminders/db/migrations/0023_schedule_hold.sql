-- Schedules an operator (or the application) can hold: pause and resume one schedule, trigger
-- it now, backfill a window it missed.
--
-- A paused schedule's due deliveries keep their due_queue rows (every `scheduled` or
-- `retrying` delivery has one, as migration 0013 says), marked `held`: the entries the scanner
-- walks are the ones not held (the tenant-and-due index is rebuilt on that), so a held backlog
-- is never read by a tick; its oldest entry is one probe of the held index. A held entry has no
-- pending lease. The triggers on deliveries keep `held` equal to the schedule's `paused`.
--
-- Deliveries made by a trigger or a backfill are off the series (`origin`): they never count
-- as the recipient's one pending delivery of the series, never advance it, and never move
-- where it goes on from.

alter table schedules add column paused boolean not null default false;

alter table deliveries add column origin text not null default 'series'
    check (origin in ('series', 'trigger', 'backfill'));

alter table due_queue add column held boolean not null default false;
alter table due_queue add constraint due_queue_held_unleased check (not held or token is null);

drop index due_queue_tenant_due;
create index due_queue_tenant_due on due_queue (tenant, due_at, id)
    where token is null and not held;
create index due_queue_held on due_queue (due_at, id) where held;

drop index deliveries_one_pending;
create unique index deliveries_one_pending on deliveries (schedule_id, recipient)
    where state in ('scheduled', 'leased', 'retrying') and superseded is null
      and origin = 'series';

-- `schedules list --state paused`: paused schedules off their own index.
create index schedules_paused on schedules (tenant, schedule_key) where paused;
