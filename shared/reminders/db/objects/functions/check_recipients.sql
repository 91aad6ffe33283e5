-- The recipients of one call: each checked, duplicates dropped (first one kept), bounded.
create or replace function check_recipients(recipients text[]) returns text[]
language plpgsql immutable set search_path from current as $$
declare
    people text[];
begin
    select coalesce(array_agg(r order by first_at), '{}') into people
    from (select check_recipient(x) as r, min(n) as first_at
          from unnest(recipients) with ordinality as u(x, n) group by 1) d;
    if cardinality(people) = 0 then
        raise exception using errcode = 'RM400', message = 'at least one recipient is required';
    end if;
    if cardinality(people) > 50000 then
        raise exception using errcode = 'RM400', message = format(
            '%s recipients in one call; the limit is 50000', cardinality(people));
    end if;
    return people;
end $$;

revoke all on function check_recipients(text[]) from public;
