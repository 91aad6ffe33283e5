-- Python's str() of a datetime: microseconds only when there are any.
create or replace function python_timestamp(t timestamp) returns text
language sql immutable strict set search_path from current as $$
    select to_char(t, 'YYYY-MM-DD HH24:MI:SS')
           || case when extract(microseconds from t)::bigint % 1000000 <> 0
                   then to_char(t, '.US') else '' end
$$;

revoke all on function python_timestamp(timestamp) from public;
