-- Send a schedule now (migration 0023): one delivery per recipient, due now, off the series
-- (origin 'trigger': the series' pending deliveries, its next occurrence and its end stay as
-- they were), each with its own stable key
-- schedule:{id}/{generation}:trigger:{now, UTC}:{recipient}:{channel}. Triggered again at the
-- same instant it makes nothing new. Refused for a cancelled, finished or paused schedule.
create or replace function trigger_for(tenant text, key text, now timestamptz default now())
returns table (recipient text, delivery_key text, due_at timestamptz, state text)
language plpgsql set search_path from current as $$
#variable_conflict use_variable
declare
    cur schedules;
begin
    cur := lock_schedule(tenant, key);
    if cur.state = 'ended' then
        raise exception using errcode = 'RM409', message = format(
            'schedule %L has finished: it has no next occurrence to send', key);
    end if;
    if cur.paused then
        raise exception using errcode = 'RM409', message = format(
            'schedule %L is paused: resume it first', key);
    end if;
    return query
    insert into deliveries as d (tenant, schedule_id, generation, recipient, channel,
                                 destination, delivery_key, occurrence_at, revision, due_at,
                                 state, origin, created_at, updated_at)
    select cur.tenant, cur.id, cur.generation, sr.recipient, cur.channel, sr.destination,
           'schedule:' || cur.id || '/' || cur.generation || ':trigger:'
               || to_char(now at time zone 'UTC', 'YYYYMMDD"T"HH24MISS"Z"')
               || ':' || sr.recipient || ':' || cur.channel,
           now, cur.revision, now, 'scheduled', 'trigger', now, now
    from schedule_recipients sr
    where sr.schedule_id = cur.id
    order by sr.recipient
    on conflict on constraint deliveries_delivery_key_key do nothing
    returning d.recipient, d.delivery_key, d.due_at, d.state;
end $$;

revoke all on function trigger_for(text, text, timestamptz) from public;
