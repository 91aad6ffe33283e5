-- The SQL API (the calling login's tenant): trigger_for.
create or replace function trigger(key text)
returns table (recipient text, delivery_key text, due_at timestamptz, state text)
language sql security definer set search_path from current as $$
    select * from trigger_for(my_tenant(), $1, now())
$$;

revoke all on function trigger(text) from public;
grant execute on function trigger(text) to reminders_client;
