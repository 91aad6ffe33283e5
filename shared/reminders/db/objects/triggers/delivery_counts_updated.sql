-- delivery_counts (0011): a statement's updated deliveries, per group.
create or replace trigger delivery_counts_updated after update on deliveries
    referencing old table as old_rows new table as new_rows for each statement
    execute function delivery_counts_updated();
