-- The SQL API (the calling login's tenant): opt_out_for.
create or replace function opt_out(recipient text, channel text) returns boolean
language sql security definer set search_path from current as $$
    select opt_out_for(my_tenant(), $1, $2, now())
$$;

revoke all on function opt_out(text, text) from public;
grant execute on function opt_out(text, text) to reminders_client;
