-- A zone the service can expand a rule in (time_zones: the tzdata wheel's names), or RM400 in
-- the Python API's words (reminders/timezones.py zone(), under Recurrence's "tz: "), with the
-- right spelling suggested for a wrong capitalisation.
create or replace function check_zone(tz text) returns text
language plpgsql stable set search_path from current as $$
declare
    suggestion text;
begin
    if tz is null then
        raise exception using errcode = 'RM400',
            message = 'tz: must be an IANA zone name, got None';
    end if;
    if exists (select 1 from time_zones z where z.name = tz) then
        return tz;
    end if;
    select z.name into suggestion from time_zones z where lower(z.name) = lower(tz)
    order by z.name limit 1;
    raise exception using errcode = 'RM400', message = format(
        'tz: unknown time zone %s%s', python_repr(tz),
        case when suggestion is not null and suggestion <> tz
             then format(' (did you mean %s?)', python_repr(suggestion)) else '' end);
end $$;

revoke all on function check_zone(text) from public;
