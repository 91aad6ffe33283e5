-- The counts key on the schedule's kind, which nothing changes once a schedule exists (a
-- reschedule keeps it); a change would leave its deliveries counted under the old kind.
create or replace function schedules_kind_fixed() returns trigger
language plpgsql set search_path from current as $$
begin
    raise exception 'a schedule''s kind cannot change (schedule %: % to %)',
        new.id, old.kind, new.kind using errcode = 'RM400';
end $$;

revoke all on function schedules_kind_fixed() from public;
