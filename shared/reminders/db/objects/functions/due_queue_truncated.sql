-- due_queue (0013): no deliveries, no entries.
create or replace function due_queue_truncated() returns trigger
language plpgsql set search_path from current as $$
begin
    truncate due_queue;
    return null;
end $$;

revoke all on function due_queue_truncated() from public;
