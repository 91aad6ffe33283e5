-- The SQL API (the calling login's tenant): delivery_state_for.
create or replace function delivery_state(key text)
returns table (delivery_key text, schedule_key text, recipient text, channel text,
               occurrence_at timestamptz, due_at timestamptz, revision text, state text,
               reason text, attempts_made integer, updated_at timestamptz)
language sql stable security definer set search_path from current as $$
    select * from delivery_state_for(my_tenant(), $1)
$$;

revoke all on function delivery_state(text) from public;
grant execute on function delivery_state(text) to reminders_client;
