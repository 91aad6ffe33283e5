-- delivery_counts (0011): a statement's deleted deliveries, per group.
create or replace trigger delivery_counts_deleted after delete on deliveries
    referencing old table as old_rows for each statement
    execute function delivery_counts_deleted();
