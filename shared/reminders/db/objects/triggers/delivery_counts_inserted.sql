-- delivery_counts (0011), kept by the writes themselves: one upsert per group a statement
-- touched, with transition tables.
create or replace trigger delivery_counts_inserted after insert on deliveries
    referencing new table as new_rows for each statement
    execute function delivery_counts_inserted();
