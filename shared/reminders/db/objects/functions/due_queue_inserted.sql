-- due_queue (0013): every inserted delivery that is due gets its entry.
create or replace function due_queue_inserted() returns trigger
language plpgsql set search_path from current as $$
begin
    insert into due_queue (id, tenant, state, due_at)
    select id, tenant, state, due_at from new_rows where state in ('scheduled', 'retrying');
    return null;
end $$;

revoke all on function due_queue_inserted() from public;
