-- A recurrence as the service will expand it (reminders/recurrence.py Recurrence): the rule's
-- grammar (check_rrule), a zone of the service's tzdata (check_zone), a local start in whole
-- seconds of the years 1900-2999 and the DST policy, in that order and in the same words. What
-- the rule yields is the expansion's (the scanner's, for a rule recorded through SQL):
-- check_first_occurrence refuses what SQL can tell yields nothing.
create or replace function check_rule(rrule text, tz text, local_start timestamp, gap text,
                                      overlap text)
returns void
language plpgsql stable set search_path from current as $$
declare
    shown text;
begin
    if rrule is null then
        raise exception using errcode = 'RM400', message = 'rrule: must be a string, got None';
    end if;
    if length(rrule) > 1000 then
        raise exception using errcode = 'RM400',
            message = 'rrule: must be at most 1000 characters';
    end if;
    perform check_rrule(rrule);
    perform check_zone(tz);
    if local_start is null then
        raise exception using errcode = 'RM400',
            message = 'local_start: must be a naive local datetime, got None';
    end if;
    shown := python_repr(to_char(local_start, 'YYYY-MM-DD"T"HH24:MI:SS')
                         || case when extract(microseconds from local_start)::bigint % 1000000
                                      <> 0 then to_char(local_start, '.US') else '' end);
    if extract(microseconds from local_start)::bigint % 1000000 <> 0 then
        raise exception using errcode = 'RM400', message = format(
            'local_start: must be whole seconds, got %s', shown);
    end if;
    if local_start < '1900-01-01' or local_start >= '3000-01-01' then
        raise exception using errcode = 'RM400', message = format(
            'local_start: year must be 1900..2999, got %s', shown);
    end if;
    if gap is null or gap not in ('shift', 'skip') then
        raise exception using errcode = 'RM400', message = format(
            'gap: must be ''shift'' or ''skip'', got %s', coalesce(python_repr(gap), 'None'));
    end if;
    if overlap is null or overlap not in ('first', 'later') then
        raise exception using errcode = 'RM400', message = format(
            'overlap: must be ''first'' or ''later'', got %s',
            coalesce(python_repr(overlap), 'None'));
    end if;
end $$;

revoke all on function check_rule(text, text, timestamp, text, text) from public;
