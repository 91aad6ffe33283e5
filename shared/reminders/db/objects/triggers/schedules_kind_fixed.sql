-- The counts key on the schedule's kind, which nothing changes once a schedule exists.
create or replace trigger schedules_kind_fixed before update of kind on schedules
    for each row when (old.kind is distinct from new.kind)
    execute function schedules_kind_fixed();
