-- delivery_counts (0011): nothing left to count.
create or replace function delivery_counts_truncated() returns trigger
language plpgsql set search_path from current as $$
begin
    delete from delivery_counts;
    return null;
end $$;

revoke all on function delivery_counts_truncated() from public;
