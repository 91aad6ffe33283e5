-- The schedule, locked for the rest of the transaction: lock order everywhere is the
-- schedule (FOR NO KEY UPDATE), then its deliveries.
create or replace function lock_schedule(tenant text, key text) returns schedules
language plpgsql set search_path from current as $$
#variable_conflict use_variable
declare
    locked schedules;
begin
    perform check_tenant(tenant);
    select * into locked from schedules s where s.tenant = tenant and s.schedule_key = key
    for no key update;
    if not found then
        raise exception using errcode = 'RM404', message = format(
            'no schedule with key %s for tenant %L', coalesce(quote_literal(key), 'NULL'),
            tenant);
    end if;
    if locked.state = 'cancelled' then
        raise exception using errcode = 'RM409', message = format(
            'schedule %L is cancelled', key);
    end if;
    return locked;
end $$;

revoke all on function lock_schedule(text, text) from public;
