-- One of the service's channels.
create or replace function check_channel(channel text) returns text
language plpgsql immutable set search_path from current as $$
begin
    if channel is null or channel not in ('webhook', 'email', 'sms') then
        raise exception using errcode = 'RM400', message = format(
            'unknown channel %s; expected one of webhook, email, sms',
            coalesce(quote_literal(channel), 'NULL'));
    end if;
    return channel;
end $$;

revoke all on function check_channel(text) from public;
