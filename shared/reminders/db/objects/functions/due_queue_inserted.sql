-- due_queue (0013): every inserted delivery that is due gets its entry, held (0022) while its
-- schedule is paused.
create or replace function due_queue_inserted() returns trigger
language plpgsql set search_path from current as $$
begin
    insert into due_queue (id, tenant, state, due_at, held)
    select n.id, n.tenant, n.state, n.due_at, coalesce(s.paused, false)
    from new_rows n left join schedules s on s.id = n.schedule_id
    where n.state in ('scheduled', 'retrying');
    return null;
end $$;

revoke all on function due_queue_inserted() from public;
