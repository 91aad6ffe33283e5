-- deliveries.kind (0020): a row trigger only for rows that name none (the WHEN clause is
-- evaluated without calling the function).
create or replace trigger deliveries_kind before insert on deliveries
    for each row when (new.kind is null)
    execute function deliveries_kind();
