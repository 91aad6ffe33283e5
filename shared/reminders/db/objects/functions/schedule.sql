-- The SQL API (the calling login's tenant): schedule_for, the rule expanded by the scanner.
create or replace function schedule(
    key text, recipients text[], channel text, at timestamptz default null,
    rrule text default null, tz text default null, local_start timestamp default null,
    gap text default 'shift', overlap text default 'first', destination text default null,
    kind text default 'default', payload jsonb default '{}', revision text default '1')
returns table (schedule_id bigint, schedule_key text, created boolean, recipient text,
               delivery_key text, due_at timestamptz, state text)
language sql security definer set search_path from current as $$
    select * from schedule_for(my_tenant(), $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,
                               $13, null, false, now())
$$;

revoke all on function schedule(text, text[], text, timestamptz, text, text, timestamp, text, text,
    text, text, jsonb, text) from public;
grant execute on function schedule(text, text[], text, timestamptz, text, text, timestamp, text,
    text, text, text, jsonb, text) to reminders_client;
