-- due_queue (0013): emptied with the deliveries.
create or replace trigger due_queue_truncated after truncate on deliveries
    for each statement execute function due_queue_truncated();
