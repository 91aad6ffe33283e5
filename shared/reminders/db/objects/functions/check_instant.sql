-- An instant every component of the service represents: the years 1 to 9999 in UTC, as
-- Python's datetime (the scanner, the consumer, the command line) holds them. Postgres takes
-- 4713 BC to 294276 AD; an instant outside made every scanner pass that leased it raise after
-- its leases committed, and `reminders status` with it. RM400 naming the argument.
create or replace function check_instant(instant timestamptz, what text) returns timestamptz
language plpgsql immutable set search_path from current as $$
begin
    if instant is not null and (instant < '0001-01-01 00:00:00+00'
                                or instant >= '10000-01-01 00:00:00+00') then
        raise exception using errcode = 'RM400', message = format(
            '%s must be an instant in the years 1-9999 (UTC), got %s', what,
            to_char(instant at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z" BC'));
    end if;
    return instant;
end $$;

revoke all on function check_instant(timestamptz, text) from public;
