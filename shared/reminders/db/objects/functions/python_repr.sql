-- Python's repr() of a string, as the Python API's messages quote what they refuse: single
-- quotes, or double quotes when the text holds a single quote and no double one; backslash,
-- the quote and the common control characters escaped.
create or replace function python_repr(t text) returns text
language sql immutable strict set search_path from current as $$
    select q || replace(replace(replace(replace(replace(
               replace(t, '\', '\\'), q, '\' || q), E'\n', '\n'), E'\r', '\r'), E'\t', '\t'),
               E'\x0b', '\x0b') || q
    from (select case when strpos(t, '''') > 0 and strpos(t, '"') = 0 then '"' else '''' end
          as q) quote
$$;

revoke all on function python_repr(text) from public;
