-- Python's json.dumps(value, sort_keys=True, separators=(",", ":")) of a JSON value: keys in
-- code point order at every level.
create or replace function python_json(j jsonb) returns text
language plpgsql immutable set search_path from current as $$
begin
    if j is null then
        return 'null';
    end if;
    case jsonb_typeof(j)
        when 'object' then
            return '{' || coalesce((select string_agg(python_json_string(e.key) || ':'
                                                      || python_json(e.value), ','
                                                      order by e.key collate "C")
                                    from jsonb_each(j) as e), '') || '}';
        when 'array' then
            return '[' || coalesce((select string_agg(python_json(a.value), ',' order by a.n)
                                    from jsonb_array_elements(j) with ordinality as a(value, n)),
                                   '') || ']';
        when 'string' then
            return python_json_string(j #>> '{}');
        else  -- number, true, false, null: the same text
            return j::text;
    end case;
end $$;

revoke all on function python_json(jsonb) from public;
