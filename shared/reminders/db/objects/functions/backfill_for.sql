-- Materialise occurrences a window missed (migration 0023), off the series (origin
-- 'backfill'), each with its occurrence's own key. An occurrence that exists for the recipient
-- in any state and any generation is never made again; the schedule is locked first, so two
-- backfills at once make each occurrence once. Due now: its staleness window counts from now
-- (the consumer measures a backfilled delivery's window from when it was made).
create or replace function backfill_for(tenant text, key text, occurrences timestamptz[],
                             now timestamptz default now())
returns table (recipient text, delivery_key text, occurrence_at timestamptz, due_at timestamptz,
               state text)
language plpgsql set search_path from current as $$
#variable_conflict use_variable
declare
    cur schedules;
begin
    cur := lock_schedule(tenant, key);
    return query
    insert into deliveries as d (tenant, schedule_id, generation, recipient, channel,
                                 destination, delivery_key, occurrence_at, revision, due_at,
                                 state, origin, created_at, updated_at)
    select cur.tenant, cur.id, cur.generation, sr.recipient, cur.channel, sr.destination,
           'schedule:' || cur.id || '/' || cur.generation || ':'
               || to_char(o.at at time zone 'UTC', 'YYYYMMDD"T"HH24MISS"Z"')
               || ':' || sr.recipient || ':' || cur.channel,
           o.at, cur.revision, now, 'scheduled', 'backfill', now, now
    from schedule_recipients sr
    cross join (select distinct u.at from unnest(occurrences) as u(at)) o
    where sr.schedule_id = cur.id
      and not exists (select 1 from deliveries e
                      where e.schedule_id = cur.id and e.recipient = sr.recipient
                        and e.occurrence_at = o.at and e.origin <> 'trigger')
    order by o.at, sr.recipient
    on conflict on constraint deliveries_delivery_key_key do nothing
    returning d.recipient, d.delivery_key, d.occurrence_at, d.due_at, d.state;
end $$;

revoke all on function backfill_for(text, text, timestamptz[], timestamptz) from public;
