-- Cancel a schedule; answers how many pending deliveries were suppressed (or superseded while
-- their send is in flight: what that send did then stands).
create or replace function cancel_for(tenant text, key text, now timestamptz default now())
returns integer
language plpgsql set search_path from current as $$
#variable_conflict use_variable
declare
    cur schedules;
    n integer;
begin
    cur := lock_schedule(tenant, key);
    update schedules s set state = 'cancelled', pending_first = false, updated_at = now
    where s.id = cur.id and s.state = 'active';
    select count(*) into n from supersede_pending(tenant, cur.id, 'cancelled', now);
    return n;
end $$;

revoke all on function cancel_for(text, text, timestamptz) from public;
