-- The SQL API (the calling login's tenant): hold_schedule. True when it changed.
create or replace function resume(key text) returns boolean
language sql security definer set search_path from current as $$
    select hold_schedule(my_tenant(), $1, false, now())
$$;

revoke all on function resume(text) from public;
grant execute on function resume(text) to reminders_client;
