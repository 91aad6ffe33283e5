-- The SQL API (the calling login's tenant): reschedule_for, a new rule expanded by the scanner.
create or replace function reschedule(
    key text, at timestamptz default null, rrule text default null, tz text default null,
    local_start timestamp default null, gap text default null, overlap text default null,
    revision text default null)
returns table (schedule_id bigint, schedule_key text, created boolean, recipient text,
               delivery_key text, due_at timestamptz, state text)
language sql security definer set search_path from current as $$
    select * from reschedule_for(my_tenant(), $1, $2, $3, $4, $5, $6, $7, $8, null, false,
                                 now())
$$;

revoke all on function reschedule(text, timestamptz, text, text, timestamp, text, text,
    text) from public;
grant execute on function reschedule(text, timestamptz, text, text, timestamp, text, text,
    text) to reminders_client;
