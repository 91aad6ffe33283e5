-- due_queue (0013): a deleted due delivery's entry goes with it.
create or replace trigger due_queue_deleted after delete on deliveries
    referencing old table as old_rows for each statement
    execute function due_queue_deleted();
