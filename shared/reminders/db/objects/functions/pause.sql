-- The SQL API (the calling login's tenant): hold_schedule. True when it changed.
create or replace function pause(key text) returns boolean
language sql security definer set search_path from current as $$
    select hold_schedule(my_tenant(), $1, true, now())
$$;

revoke all on function pause(text) from public;
grant execute on function pause(text) to reminders_client;
