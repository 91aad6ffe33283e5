-- The SQL API (the calling login's tenant): cancel_for.
create or replace function cancel(key text) returns integer
language sql security definer set search_path from current as $$
    select cancel_for(my_tenant(), $1, now())
$$;

revoke all on function cancel(text) from public;
grant execute on function cancel(text) to reminders_client;
