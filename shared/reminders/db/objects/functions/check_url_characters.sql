-- `url` unchanged, or RM400 naming `what`, the part of the URL and the code point of the first
-- control character (Cc: C0, DEL, C1) or whitespace (Python's str.isspace) in it. The parts
-- are read as RFC 3986 lays a URL out: scheme, then // and the authority (credentials, host,
-- port), path, query, fragment. (U+0000 cannot be in a text value at all.)
create or replace function check_url_characters(url text, what text) returns text
language plpgsql immutable set search_path from current as $$
declare
    bad text := substring(url from '[\u0001-\u001f\u007f-\u009f\u0020\u00a0\u1680'
                                   '\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]');
    pos integer;
    code text;
    kind text;
    part text;
    place text;
    colon integer;
    start integer;
    authority integer;
    stop integer;
    found_at integer;
    at_sign integer;
    host integer;
    bracket integer;
    port integer;
    hash_mark integer;
    question integer;
    mark text;
begin
    if bad is null then
        return url;
    end if;
    -- The first occurrence of the leftmost offending character is that character.
    pos := strpos(url, bad);
    code := upper(to_hex(ascii(bad)));
    code := 'U+' || case when length(code) < 4 then lpad(code, 4, '0') else code end;
    kind := case when ascii(bad) <= 31 or ascii(bad) between 127 and 159
                 then 'a control character' else 'whitespace' end;
    if pos = 1 then
        place := 'the URL begins with';
    elsif pos = length(url) then
        place := 'the URL ends with';
    else
        colon := strpos(url, ':');
        if colon = 0 then
            part := 'URL';
        elsif pos < colon then
            part := 'scheme';
        else
            start := colon + 1;
            if substr(url, start, 2) = '//' then
                authority := start + 2;
                stop := length(url) + 1;
                foreach mark in array array['/', '?', '#'] loop
                    found_at := strpos(substr(url, authority), mark);
                    if found_at > 0 and authority + found_at - 1 < stop then
                        stop := authority + found_at - 1;
                    end if;
                end loop;
                if pos < stop then
                    -- The last @ of the authority ends the credentials.
                    at_sign := strpos(reverse(substr(url, authority, stop - authority)), '@');
                    at_sign := case when at_sign = 0 then 0 else stop - at_sign end;
                    if at_sign > 0 and pos < at_sign then
                        part := 'credentials';
                    else
                        host := greatest(authority, at_sign + 1);
                        bracket := 0;
                        if substr(url, host, 1) = '[' then
                            found_at := strpos(substr(url, host, stop - host), ']');
                            bracket := case when found_at = 0 then 0
                                            else host + found_at - 1 end;
                        end if;
                        found_at := greatest(host, bracket);
                        port := strpos(reverse(substr(url, found_at, stop - found_at)), ':');
                        port := case when port = 0 then 0 else stop - port end;
                        part := case when port > 0 and port < pos then 'port' else 'host' end;
                    end if;
                end if;
                start := stop;
            end if;
            if part is null then
                found_at := strpos(substr(url, start), '#');
                hash_mark := case when found_at = 0 then 0 else start + found_at - 1 end;
                found_at := strpos(substr(url, start), '?');
                question := case when found_at = 0 then 0 else start + found_at - 1 end;
                if hash_mark > 0 and hash_mark < pos then
                    part := 'fragment';
                elsif question > 0 and question < pos
                        and (hash_mark = 0 or question < hash_mark) then
                    part := 'query';
                else
                    part := 'path';
                end if;
            end if;
        end if;
        place := format('the %s %s', part,
                        case when part = 'credentials' then 'contain' else 'contains' end);
    end if;
    raise exception using errcode = 'RM400', message = format(
        '%s: %s %s (%s)', what, place, kind, code);
end $$;

revoke all on function check_url_characters(text, text) from public;
