-- A schedule with nothing pending whose rule has ended.
create or replace function end_schedule(tenant text, schedule_id bigint, now timestamptz) returns void
language sql set search_path from current as $$
    update schedules set state = 'ended', updated_at = $3
    where id = $2 and tenant = $1 and state = 'active'
      and not exists (select 1 from deliveries d where d.schedule_id = $2
                      and d.state in ('scheduled', 'leased', 'retrying'));
$$;

revoke all on function end_schedule(text, bigint, timestamptz) from public;
