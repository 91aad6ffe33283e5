-- Keeps deliveries.kind (migration 0018): a row inserted without it takes its schedule's
-- kind (every insert today: the SQL API's materialise() names no kind). A row trigger, only
-- for rows that name none (the WHEN clause is evaluated without calling the function).
create function deliveries_kind() returns trigger
language plpgsql as $$
begin
    select s.kind into new.kind from schedules s where s.id = new.schedule_id;
    return new;
end $$;

create trigger deliveries_kind before insert on deliveries
    for each row when (new.kind is null)
    execute function deliveries_kind();
