-- A rule recorded through SQL (the scanner expands it later) that can have no occurrence from
-- its local start, refused in the words of Recurrence.parse. SQL decides what UNTIL alone
-- decides: a date or a floating local time before the start, or a UTC instant more than two
-- days before it (no zone's offset reaches that far). Whether BY* parts, INTERVAL and the DST
-- policy leave an occurrence within the service's 400-year window is the expansion's alone: such
-- a rule is accepted, and the scanner ends its schedule when it finds none (a bounded batch of
-- first occurrences per tick).
create or replace function check_first_occurrence(rrule text, local_start timestamp)
returns void
language plpgsql immutable set search_path from current as $$
declare
    parts jsonb := check_rrule(rrule);
    until_text text := parts ->> 'UNTIL';
    m text[];
    until_at timestamp;
    text_shown text;
    none_left boolean := false;
begin
    if until_text is null then
        return;
    end if;
    -- check_rrule took it: a valid date, and time.
    m := regexp_match(until_text,
                      '^([0-9]{4})([0-9]{2})([0-9]{2})(?:T([0-9]{2})([0-9]{2})([0-9]{2})(Z)?)?$');
    until_at := make_timestamp(m[1]::integer, m[2]::integer, m[3]::integer,
                               coalesce(m[4], '0')::integer, coalesce(m[5], '0')::integer,
                               coalesce(m[6], '0')::integer);
    if m[4] is null then  -- a date: every slot on or before it
        none_left := until_at::date < local_start::date;
    elsif m[7] is null then  -- a floating local time
        none_left := until_at < local_start;
    else  -- a UTC instant: no wall time is two days from its instant
        none_left := until_at + interval '2 days' < local_start;
    end if;
    if none_left then
        text_shown := upper(regexp_replace(rrule, '^\s+|\s+$', '', 'g'));
        if text_shown like 'RRULE:%' then
            text_shown := regexp_replace(substr(text_shown, 7), '^\s+|\s+$', '', 'g');
        end if;
        raise exception using errcode = 'RM400', message = format(
            'rrule: %s produces no occurrence from local_start %s within 400 years (check '
            'UNTIL, COUNT and BY* parts)', python_repr(text_shown),
            to_char(local_start, 'YYYY-MM-DD"T"HH24:MI:SS'));
    end if;
end $$;

revoke all on function check_first_occurrence(text, timestamp) from public;
