-- Python's json.dumps of one string (ensure_ascii: everything outside space..~ escaped,
-- characters beyond the BMP as UTF-16 surrogate pairs).
create or replace function python_json_string(t text) returns text
language sql immutable strict set search_path from current as $$
    select '"' || coalesce(string_agg(case
        when c = '\' then '\\'
        when c = '"' then '\"'
        when c = E'\n' then '\n'
        when c = E'\r' then '\r'
        when c = E'\t' then '\t'
        when c = E'\b' then '\b'
        when c = E'\f' then '\f'
        when ascii(c) between 32 and 126 then c
        when ascii(c) < 65536 then '\u' || lpad(to_hex(ascii(c)), 4, '0')
        else '\u' || to_hex(55296 + ((ascii(c) - 65536) >> 10))
             || '\u' || to_hex(56320 + ((ascii(c) - 65536) & 1023))
    end, '' order by n), '') || '"'
    from regexp_split_to_table(t, '') with ordinality as s(c, n)
$$;

revoke all on function python_json_string(text) from public;
