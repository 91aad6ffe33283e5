-- A payload every reader of the service can read back (reminders/payloads.py, the Python API's
-- check_payload): at most 32 levels of objects and arrays (payloads.MAX_DEPTH), and no number
-- that Python's JSON reader (psycopg's, in the consumer) cannot load: a fraction whose value
-- reads as infinity in a double (at or beyond 2^1024 - 2^970, where rounding reaches it), or
-- an integer of more than 4,300 digits (Python's int_max_str_digits). jsonb writes every
-- number back without an exponent (1e400 comes back as 401 digits, read as an integer), so the
-- rule is applied to jsonb's text of it, as the consumer reads it. Refused in the Python
-- API's words (RM400); the number is shown as jsonb writes it. Its work is bounded by the
-- payload's size, checked first (16 KB).
create or replace function check_payload(payload jsonb) returns jsonb
language plpgsql immutable set search_path from current as $$
declare
    max_depth constant integer := 32;
    too_deep boolean;
    bad text;
begin
    with recursive walk(v, depth) as (
        select payload, 1
        union all
        select c.value, w.depth + 1
        from walk w
        cross join lateral (
            select e.value from jsonb_each(case when jsonb_typeof(w.v) = 'object'
                                                then w.v end) e
            union all
            select a.value from jsonb_array_elements(case when jsonb_typeof(w.v) = 'array'
                                                          then w.v end) a
        ) c
        where jsonb_typeof(c.value) in ('object', 'array') and w.depth <= max_depth
    )
    select exists (select 1 from walk where depth > max_depth) into too_deep;
    if too_deep then
        raise exception using errcode = 'RM400', message = format(
            'payload cannot be read back as JSON: it nests deeper than %s levels', max_depth);
    end if;
    select n.t into bad
    from jsonb_path_query(payload, 'strict $.**') as j(v)
    cross join lateral (select j.v #>> '{}' as t) n
    where jsonb_typeof(j.v) = 'number'
      and case when strpos(n.t, '.') > 0
               then abs(n.t::numeric) >= power(2::numeric, 1024) - power(2::numeric, 970)
               else length(ltrim(n.t, '-')) > 4300 end
    limit 1;
    if bad is not null then
        raise exception using errcode = 'RM400', message = format(
            'payload cannot be read back as JSON: the number %s... is out of range',
            left(bad, 20));
    end if;
    return payload;
end $$;

revoke all on function check_payload(jsonb) from public;
