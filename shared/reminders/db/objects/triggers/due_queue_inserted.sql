-- due_queue (0013): an entry for every delivery inserted due.
create or replace trigger due_queue_inserted after insert on deliveries
    referencing new table as new_rows for each statement
    execute function due_queue_inserted();
