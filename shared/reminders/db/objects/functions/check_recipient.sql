-- One recipient: trimmed, and free of what a delivery key cannot carry unambiguously.
create or replace function check_recipient(recipient text) returns text
language plpgsql immutable set search_path from current as $$
begin
    if recipient is null or btrim(recipient) = '' then
        raise exception using errcode = 'RM400', message = 'recipient must be a non-empty string';
    end if;
    if length(recipient) > 320 then
        raise exception using errcode = 'RM400', message = format(
            'recipient %s... is longer than 320 characters', quote_literal(left(recipient, 40)));
    end if;
    if recipient ~ '[\n\r]' then
        raise exception using errcode = 'RM400', message = format(
            'recipient %s contains a line break', quote_literal(left(recipient, 40)));
    end if;
    if position(':' in recipient) > 0 then
        raise exception using errcode = 'RM400', message = format(
            'recipient %s contains '':'' (the delivery key''s separator)',
            quote_literal(left(recipient, 40)));
    end if;
    return btrim(recipient);
end $$;

revoke all on function check_recipient(text) from public;
