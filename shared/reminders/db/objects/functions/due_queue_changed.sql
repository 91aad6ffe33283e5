-- due_queue (0013): a due delivery's state or due time changed. Any pending lease ends. An entry
-- made again is held (0023) while its schedule is paused, with its kind's priority (0024).
create or replace function due_queue_changed() returns trigger
language plpgsql set search_path from current as $$
begin
    if new.state not in ('scheduled', 'retrying') then
        delete from due_queue where id = old.id;
    elsif old.state in ('scheduled', 'retrying') then  -- still due: any pending lease ends
        update due_queue set tenant = new.tenant, state = new.state, due_at = new.due_at,
                             token = null, expires_at = null
        where id = new.id;
    else  -- due again (released, reclaimed, retrying later): a new entry
        insert into due_queue (id, tenant, state, due_at, held, priority)
        values (new.id, new.tenant, new.state, new.due_at,
                coalesce((select s.paused from schedules s where s.id = new.schedule_id), false),
                coalesce((select k.priority from kinds k where k.name = new.kind), 5))
        on conflict (id) do update set tenant = excluded.tenant, state = excluded.state,
                                       priority = excluded.priority,
                                       due_at = excluded.due_at, token = null,
                                       expires_at = null, held = excluded.held;
    end if;
    return null;
end $$;

revoke all on function due_queue_changed() from public;
