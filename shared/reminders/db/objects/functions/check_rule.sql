-- A rule is checked here for its shape only; its meaning (RRULE, zone, DST policy) is the
-- service's to expand: a rule it cannot expand ends the schedule with the reason in `problem`.
create or replace function check_rule(rrule text, tz text, local_start timestamp, gap text, overlap text)
returns void
language plpgsql immutable set search_path from current as $$
begin
    if rrule is null or rrule !~ '^[A-Za-z]' or length(rrule) > 1000 then
        raise exception using errcode = 'RM400', message =
            'rrule must be an RFC 5545 rule such as FREQ=WEEKLY;BYDAY=MO (at most 1000 characters)';
    end if;
    if tz is null or tz = '' or length(tz) > 64 then
        raise exception using errcode = 'RM400',
            message = 'tz must be an IANA time zone name such as Europe/Berlin';
    end if;
    if local_start is null or local_start not between '1900-01-01' and '9000-01-01' then
        raise exception using errcode = 'RM400', message =
            'local_start must be the local wall-clock start (timestamp without time zone)';
    end if;
    if gap is null or gap not in ('shift', 'skip') then
        raise exception using errcode = 'RM400', message = format(
            'gap must be shift or skip, got %s', coalesce(quote_literal(gap), 'NULL'));
    end if;
    if overlap is null or overlap not in ('first', 'later') then
        raise exception using errcode = 'RM400', message = format(
            'overlap must be first or later, got %s', coalesce(quote_literal(overlap), 'NULL'));
    end if;
end $$;

revoke all on function check_rule(text, text, timestamp, text, text) from public;
