-- Leases kept apart from the delivery row until a consumer takes them.
--
-- A lease used to be an update of the delivery row. `state` is in the predicates of the
-- partial indexes, so that update is never HOT: every lease wrote the row anew, an entry in 8 of
-- its 12 indexes and the counts trigger's upsert, about 950 bytes of WAL a row. Now every due
-- delivery has a narrow row in `due_queue`, kept by triggers on `deliveries`, and the scanner
-- leases by writing a token and an expiry on that narrow row: the delivery row is not written
-- until a consumer takes the lease (`deliveries_take_leases`), which it wrote anyway to mark
-- the message received. A `due_queue` row without a token is due (an entry); with one, it is a
-- pending lease (its message is on its way to a consumer).
--
-- What holds at every commit:
--   * a delivery in `scheduled` or `retrying` has exactly one `due_queue` row, with its tenant,
--     state and due time; no other delivery has one;
--   * a pending lease never has a send in flight (a send needs the row `leased`).
-- Every change of a due delivery's state or due time ends its pending lease (the trigger
-- clears the token, or deletes the row): a cancel, a reschedule or an operator's action is
-- never overridden by a lease taken before it, and the consumer holding that lease's message
-- finds no lease.
--
-- One row per due delivery, never deleted and inserted again while the delivery stays due, so
-- its row lock orders every writer: the scanner's lease, release and reclaim lock it (and
-- never the delivery row); the trigger updates or deletes it under the delivery row's lock; a
-- consumer locks the delivery row, then deletes it. A trigger that waits on a scanner's
-- uncommitted lease applies its change to the row the lease committed, and so ends that lease.

create table due_queue (
    id          bigint primary key,  -- deliveries.id
    tenant      text not null,
    state       text not null check (state in ('scheduled', 'retrying')),  -- the row's
    due_at      timestamptz not null,  -- the row's
    token       uuid,                  -- a pending lease's; null while due
    expires_at  timestamptz,
    check ((token is null) = (expires_at is null))
);
-- Due entries, per tenant: every read of them goes tenant by tenant (a pass's fair shares,
-- the lateness, the overdue count), so that no other index can serve it, whatever the
-- table's statistics say (a queue's statistics are often stale: it fills and drains between
-- two analyses).
create index due_queue_tenant_due on due_queue (tenant, due_at, id) where token is null;
-- Pending leases, by expiry: the reclaim reads its two ends; the in-flight count and the
-- lateness of leases not taken yet read it whole (never more than the in-flight budget). The
-- only index of pending leases, so stale statistics cannot steer the reclaim onto another.
create index due_queue_expiry on due_queue (expires_at) where token is not null;

create function due_queue_inserted() returns trigger
language plpgsql as $$
begin
    insert into due_queue (id, tenant, state, due_at)
    select id, tenant, state, due_at from new_rows where state in ('scheduled', 'retrying');
    return null;
end $$;

create function due_queue_changed() returns trigger
language plpgsql as $$
begin
    if new.state not in ('scheduled', 'retrying') then
        delete from due_queue where id = old.id;
    elsif old.state in ('scheduled', 'retrying') then  -- still due: any pending lease ends
        update due_queue set tenant = new.tenant, state = new.state, due_at = new.due_at,
                             token = null, expires_at = null
        where id = new.id;
    else  -- due again (released, reclaimed, retrying later): a new entry
        insert into due_queue (id, tenant, state, due_at)
        values (new.id, new.tenant, new.state, new.due_at)
        on conflict (id) do update set tenant = excluded.tenant, state = excluded.state,
                                       due_at = excluded.due_at, token = null,
                                       expires_at = null;
    end if;
    return null;
end $$;

create function due_queue_deleted() returns trigger
language plpgsql as $$
begin
    delete from due_queue q where q.id = any(array(
        select id from old_rows where state in ('scheduled', 'retrying')));
    return null;
end $$;

create function due_queue_truncated() returns trigger
language plpgsql as $$
begin
    truncate due_queue;
    return null;
end $$;

-- Created before the backfill, in the migration's transaction (as the counts' triggers).
create trigger due_queue_inserted after insert on deliveries
    referencing new table as new_rows for each statement
    execute function due_queue_inserted();
create trigger due_queue_changed after update of state, due_at on deliveries
    for each row
    when ((old.state is distinct from new.state or old.due_at is distinct from new.due_at)
          and (old.state in ('scheduled', 'retrying') or new.state in ('scheduled', 'retrying')))
    execute function due_queue_changed();
create trigger due_queue_deleted after delete on deliveries
    referencing old table as old_rows for each statement
    execute function due_queue_deleted();
create trigger due_queue_truncated after truncate on deliveries
    for each statement execute function due_queue_truncated();

insert into due_queue (id, tenant, state, due_at)
select id, tenant, state, due_at from deliveries where state in ('scheduled', 'retrying');

-- The scanner reads the due set from due_queue now. The deliveries' index on (tenant, due_at)
-- served only the scanner; the one on (due_at) stays for the operator's reads (status, the
-- console), which ask about rows, not leases.
drop index deliveries_tenant_due;
-- A queue's table churns: analysed and vacuumed after a few thousand changes, not a fraction
-- of its size.
alter table due_queue set (autovacuum_analyze_scale_factor = 0,
                           autovacuum_analyze_threshold = 5000,
                           autovacuum_vacuum_scale_factor = 0,
                           autovacuum_vacuum_threshold = 5000);
analyze due_queue;
