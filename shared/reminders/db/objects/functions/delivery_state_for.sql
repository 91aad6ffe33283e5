-- One delivery's current state, by its delivery key (`key`).
create or replace function delivery_state_for(tenant text, key text)
returns table (delivery_key text, schedule_key text, recipient text, channel text,
               occurrence_at timestamptz, due_at timestamptz, revision text, state text,
               reason text, attempts_made integer, updated_at timestamptz)
language plpgsql stable set search_path from current as $$
#variable_conflict use_variable
begin
    perform check_tenant(tenant);
    return query
    select d.delivery_key, s.schedule_key, d.recipient, d.channel, d.occurrence_at, d.due_at,
           d.revision, d.state, d.reason, d.attempts_made, d.updated_at
    from deliveries d join schedules s on s.id = d.schedule_id
    where d.delivery_key = key and d.tenant = tenant;
    if not found then
        raise exception using errcode = 'RM404', message = format(
            'no delivery with key %s for tenant %L', coalesce(quote_literal(key), 'NULL'),
            tenant);
    end if;
end $$;

revoke all on function delivery_state_for(text, text) from public;
