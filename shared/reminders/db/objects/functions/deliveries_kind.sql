-- deliveries.kind (0020): a row inserted without it takes its schedule's kind (every insert
-- today: the SQL API's materialise() names no kind).
create or replace function deliveries_kind() returns trigger
language plpgsql set search_path from current as $$
begin
    select s.kind into new.kind from schedules s where s.id = new.schedule_id;
    return new;
end $$;

revoke all on function deliveries_kind() from public;
