-- A content revision: what the application bumps when the thing reminded of changes.
create or replace function check_revision(revision text) returns text
language plpgsql immutable set search_path from current as $$
begin
    if revision is null or revision = '' or length(revision) > 100 then
        raise exception using errcode = 'RM400',
            message = 'revision must be a non-empty string of at most 100 characters';
    end if;
    return revision;
end $$;

revoke all on function check_revision(text) from public;
