-- An RRULE as the service reads it (reminders/recurrence.py, _parse_rule): the same grammar,
-- the same bounds, checked in the same order, refused (RM400) with the same message. Answers
-- its parts, upper case ({"FREQ": "WEEKLY", "BYDAY": "MO"}). What only the expansion can tell
-- (a rule with no occurrence in the service's 400-year window) is check_first_occurrence's,
-- as far as SQL can decide it.
create or replace function check_rrule(rrule text) returns jsonb
language plpgsql immutable set search_path from current as $$
declare
    supported constant text[] := array['FREQ', 'INTERVAL', 'COUNT', 'UNTIL', 'WKST', 'BYMONTH',
                                       'BYMONTHDAY', 'BYDAY', 'BYHOUR', 'BYMINUTE', 'BYSETPOS'];
    unsupported constant text[] := array['BYSECOND', 'BYYEARDAY', 'BYWEEKNO', 'BYEASTER'];
    day_names constant text[] := array['MO', 'TU', 'WE', 'TH', 'FR', 'SA', 'SU'];
    month_days constant integer[] := array[31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    source text;
    upper_text text;
    parts jsonb := '{}';
    piece text;
    name text;
    value text;
    freq text;
    raw text;
    token text;
    m text[];
    n integer;
    within_month boolean;
    max_ordinal integer;
    counts jsonb := '{}';  -- distinct values of each BY* list (for BYSETPOS's bound)
    list_name text;
    low integer;
    high integer;
    negative boolean;
    seen integer[];
    most integer;
    days integer;
    times integer;
    possible boolean;
    year integer;
    month integer;
    day integer;
begin
    source := regexp_replace(rrule, '^\s+|\s+$', '', 'g');
    upper_text := upper(source);
    if strpos(upper_text, 'DTSTART') > 0 then
        raise exception using errcode = 'RM400', message = format(
            'rrule: DTSTART must not appear in the rule text (%s); pass the start as '
            'local_start', python_repr(source));
    end if;
    if source ~ '[\n\r]' then
        raise exception using errcode = 'RM400', message = format(
            'rrule: must be a single RRULE line, got %s', python_repr(source));
    end if;
    if upper_text like 'RRULE:%' then
        upper_text := regexp_replace(substr(upper_text, 7), '^\s+|\s+$', '', 'g');
    end if;
    if strpos(upper_text, ':') > 0 then
        raise exception using errcode = 'RM400', message = format(
            'rrule: only an RRULE value is accepted, got %s', python_repr(source));
    end if;
    if upper_text = '' then
        raise exception using errcode = 'RM400', message = 'rrule: must not be empty';
    end if;

    foreach piece in array string_to_array(upper_text, ';') loop
        piece := regexp_replace(piece, '^\s+|\s+$', '', 'g');
        continue when piece = '';
        m := regexp_match(piece, '^([A-Z][A-Z0-9-]*)=(.*)$');
        if m is null then
            raise exception using errcode = 'RM400', message = format(
                'rrule: part %s is not NAME=VALUE', python_repr(piece));
        end if;
        name := m[1];
        value := regexp_replace(m[2], '^\s+|\s+$', '', 'g');
        if name = any(unsupported) then
            raise exception using errcode = 'RM400', message = format(
                'rrule: %s is not supported (supported: %s)', name,
                array_to_string(supported, ', '));
        end if;
        if not name = any(supported) then
            raise exception using errcode = 'RM400', message = format(
                'rrule: unknown part %s (supported: %s)', python_repr(name),
                array_to_string(supported, ', '));
        end if;
        if parts ? name then
            raise exception using errcode = 'RM400', message = format(
                'rrule: %s is given more than once', name);
        end if;
        if value = '' then
            raise exception using errcode = 'RM400', message = format(
                'rrule: %s has no value', name);
        end if;
        parts := parts || jsonb_build_object(name, value);
    end loop;

    if not parts ? 'FREQ' then
        raise exception using errcode = 'RM400', message = format(
            'rrule: FREQ is required, got %s', python_repr(source));
    end if;
    freq := parts ->> 'FREQ';
    if freq in ('HOURLY', 'MINUTELY', 'SECONDLY') then
        raise exception using errcode = 'RM400', message = format(
            'rrule: FREQ=%s is not supported; the smallest frequency is DAILY', freq);
    end if;
    if freq not in ('YEARLY', 'MONTHLY', 'WEEKLY', 'DAILY') then
        raise exception using errcode = 'RM400', message = format(
            'rrule: FREQ=%s is not one of DAILY, WEEKLY, MONTHLY, YEARLY', freq);
    end if;
    if parts ? 'COUNT' and parts ? 'UNTIL' then
        raise exception using errcode = 'RM400',
            message = 'rrule: COUNT and UNTIL must not both be given (RFC 5545)';
    end if;

    foreach list_name in array array['INTERVAL', 'COUNT'] loop
        continue when not parts ? list_name;
        raw := parts ->> list_name;
        high := case list_name when 'INTERVAL' then 1000 else 10000 end;
        if raw !~ '^[+-]?[0-9]{1,6}$' or raw::integer not between 1 and high then
            raise exception using errcode = 'RM400', message = format(
                'rrule: %s=%s must be a whole number from 1 to %s', list_name, raw, high);
        end if;
    end loop;

    if parts ? 'UNTIL' then
        raw := parts ->> 'UNTIL';
        m := regexp_match(raw, '^([0-9]{4})([0-9]{2})([0-9]{2})(?:T([0-9]{2})([0-9]{2})([0-9]{2})(Z)?)?$');
        if m is null then
            raise exception using errcode = 'RM400', message = format(
                'rrule: UNTIL=%s must be YYYYMMDD, YYYYMMDDTHHMMSS or YYYYMMDDTHHMMSSZ', raw);
        end if;
        year := m[1]::integer; month := m[2]::integer; day := m[3]::integer;
        -- Python's date() and datetime(), in their order and words.
        value := case
            when year < 1 then format('year %s is out of range', year)
            when month not between 1 and 12 then 'month must be in 1..12'
            when day < 1 or day > extract(day from (make_date(year, month, 1)
                                                    + interval '1 month - 1 day'))
                then 'day is out of range for month'
            when m[4] is not null and m[4]::integer > 23 then 'hour must be in 0..23'
            when m[4] is not null and m[5]::integer > 59 then 'minute must be in 0..59'
            when m[4] is not null and m[6]::integer > 59 then 'second must be in 0..59'
        end;
        if value is not null then
            raise exception using errcode = 'RM400', message = format(
                'rrule: UNTIL=%s is not a valid date-time: %s', raw, value);
        end if;
    end if;

    if parts ? 'WKST' and not (parts ->> 'WKST') = any(day_names) then
        raise exception using errcode = 'RM400', message = format(
            'rrule: WKST=%s must be one of %s', parts ->> 'WKST', array_to_string(day_names, ', '));
    end if;

    foreach list_name in array array['BYMONTH', 'BYMONTHDAY', 'BYHOUR', 'BYMINUTE',
                                     'BYSETPOS'] loop
        continue when not parts ? list_name;
        raw := parts ->> list_name;
        low := case when list_name in ('BYHOUR', 'BYMINUTE') then 0 else 1 end;
        high := case list_name when 'BYMONTH' then 12 when 'BYMONTHDAY' then 31
                               when 'BYHOUR' then 23 when 'BYMINUTE' then 59 else 366 end;
        negative := list_name in ('BYMONTHDAY', 'BYSETPOS');
        seen := '{}';
        foreach token in array string_to_array(raw, ',') loop
            token := regexp_replace(token, '^\s+|\s+$', '', 'g');
            n := case when token ~ '^[+-]?[0-9]{1,6}$' then token::integer end;
            if n is null or (case when negative then abs(n) else n end) not between low and high
            then
                raise exception using errcode = 'RM400', message = format(
                    'rrule: %s=%s has %s; allowed values are %s..%s%s', list_name, raw,
                    python_repr(token), low, high,
                    case when negative then format(' or -%s..-%s', high, low) else '' end);
            end if;
            if not n = any(seen) then
                seen := seen || n;
            end if;
        end loop;
        counts := counts || jsonb_build_object(list_name, to_jsonb(seen));
    end loop;

    if parts ? 'BYDAY' then
        raw := parts ->> 'BYDAY';
        within_month := freq = 'MONTHLY' or (freq = 'YEARLY' and parts ? 'BYMONTH');
        max_ordinal := case when within_month then 5 else 53 end;
        foreach token in array string_to_array(raw, ',') loop
            token := regexp_replace(token, '^\s+|\s+$', '', 'g');
            m := regexp_match(token, '^([+-]?[0-9]{1,2})?(MO|TU|WE|TH|FR|SA|SU)$');
            if m is null then
                raise exception using errcode = 'RM400', message = format(
                    'rrule: BYDAY=%s has %s; expected e.g. MO, 1MO or -1FR', raw,
                    python_repr(token));
            end if;
            continue when m[1] is null;
            if freq not in ('MONTHLY', 'YEARLY') then
                raise exception using errcode = 'RM400', message = format(
                    'rrule: BYDAY=%s has ordinal %s, allowed only with MONTHLY or YEARLY', raw,
                    python_repr(token));
            end if;
            if m[1]::integer = 0 or abs(m[1]::integer) > max_ordinal then
                raise exception using errcode = 'RM400', message = format(
                    'rrule: BYDAY=%s has %s; the ordinal must be 1..%s or -%s..-1 here', raw,
                    python_repr(token), max_ordinal, max_ordinal);
            end if;
        end loop;
    end if;

    if parts ? 'BYMONTHDAY' and freq = 'WEEKLY' then
        raise exception using errcode = 'RM400',
            message = 'rrule: BYMONTHDAY must not be used with FREQ=WEEKLY (RFC 5545)';
    end if;
    if parts ? 'BYSETPOS' and not parts ?| array['BYMONTH', 'BYMONTHDAY', 'BYDAY', 'BYHOUR',
                                                 'BYMINUTE'] then
        raise exception using errcode = 'RM400',
            message = 'rrule: BYSETPOS needs another BY* part to select from (RFC 5545)';
    end if;
    if parts ? 'BYSETPOS' then
        times := coalesce(jsonb_array_length(counts -> 'BYHOUR'), 1)
                 * coalesce(jsonb_array_length(counts -> 'BYMINUTE'), 1);
        if freq = 'DAILY' then
            days := 1;
        elsif not parts ?| array['BYMONTHDAY', 'BYDAY'] then
            days := case when freq = 'YEARLY'
                         then coalesce(jsonb_array_length(counts -> 'BYMONTH'), 1) else 1 end;
        else
            days := case freq when 'WEEKLY' then 7 when 'MONTHLY' then 31 else 366 end;
        end if;
        most := days * times;
        if not exists (select 1 from jsonb_array_elements_text(counts -> 'BYSETPOS') p
                       where abs(p::integer) <= most) then
            raise exception using errcode = 'RM400', message = format(
                'rrule: BYSETPOS=%s never selects anything: each %s has at most %s '
                'candidate(s)', parts ->> 'BYSETPOS',
                case freq when 'YEARLY' then 'year' when 'MONTHLY' then 'month'
                          when 'WEEKLY' then 'week' else 'day' end, most);
        end if;
    end if;
    if parts ? 'BYMONTH' and parts ? 'BYMONTHDAY' then
        select exists (
            select 1 from jsonb_array_elements_text(counts -> 'BYMONTH') mo
            cross join jsonb_array_elements_text(counts -> 'BYMONTHDAY') d
            where abs(d::integer) <= month_days[mo::integer]) into possible;
        if not possible then
            raise exception using errcode = 'RM400', message = format(
                'rrule: BYMONTHDAY=%s never occurs in BYMONTH=%s', parts ->> 'BYMONTHDAY',
                parts ->> 'BYMONTH');
        end if;
    end if;
    return parts;
end $$;

revoke all on function check_rrule(text) from public;
