-- The SQL API (the calling login's tenant): opt_in_for.
create or replace function opt_in(recipient text, channel text) returns boolean
language sql security definer set search_path from current as $$
    select opt_in_for(my_tenant(), $1, $2)
$$;

revoke all on function opt_in(text, text) from public;
grant execute on function opt_in(text, text) to reminders_client;
