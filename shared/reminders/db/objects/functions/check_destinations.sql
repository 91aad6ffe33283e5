-- Where each recipient's delivery goes: the shared destination (a webhook URL, its characters
-- checked first, or one address for a single recipient) or the recipient's own address.
create or replace function check_destinations(channel text, recipients text[],
                                              destination text)
returns text[]
language plpgsql immutable set search_path from current as $$
declare
    addresses text[];
    address text;
begin
    if channel = 'webhook' then
        if destination is not null then
            perform check_url_characters(destination, 'destination: webhook URL');
        end if;
        if destination is null or destination !~ '^https?://[^\s/]+' then
            raise exception using errcode = 'RM400', message = format(
                'webhook channel needs an http(s) URL to send to, got %s',
                coalesce(quote_literal(destination), 'NULL'));
        end if;
        return array_fill(destination, array[cardinality(recipients)]);
    end if;
    if destination is not null and cardinality(recipients) > 1 then
        raise exception using errcode = 'RM400', message = format(
            '%s: with several recipients each recipient is its own address; do not pass a '
            'single destination', channel);
    end if;
    addresses := case when destination is not null then array[destination] else recipients end;
    foreach address in array addresses loop
        if channel = 'email' and address !~ '^[^@\s]+@[^@\s]+\.[^@\s]+$' then
            raise exception using errcode = 'RM400', message = format(
                'email: %s is not an e-mail address', quote_literal(address));
        end if;
        if channel = 'sms' and address !~ '^\+[1-9][0-9]{7,14}$' then
            raise exception using errcode = 'RM400', message = format(
                'sms: %s is not an E.164 phone number (+ and 8-15 digits)',
                quote_literal(address));
        end if;
    end loop;
    return addresses;
end $$;

revoke all on function check_destinations(text, text[], text) from public;
