-- due_queue (0013): a deleted due delivery's entry goes with it.
create or replace function due_queue_deleted() returns trigger
language plpgsql set search_path from current as $$
begin
    delete from due_queue q where q.id = any(array(
        select id from old_rows where state in ('scheduled', 'retrying')));
    return null;
end $$;

revoke all on function due_queue_deleted() from public;
