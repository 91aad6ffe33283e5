-- The first instant at or after `at` inside one of a kind's send windows (kinds.send_windows:
-- [{"days": [ISO weekdays], "start": "HH:MM", "end": "HH:MM"}], "24:00" for midnight; an end
-- at or before its start runs past midnight) read on the wall clock of `zone`. Each day's
-- window opens and closes at instants resolved as the schedule's occurrences are
-- (local_instant, its gap and overlap policy; a closing in a gap always shifts): an opening
-- skipped by the gap policy leaves that day's window out. Null windows: `at` itself; null: no
-- opening within eight days (every window's opening skipped). Reads at most 10 days x windows.
-- The Python twin for previews is reminders.windows.next_opening.
create or replace function send_window_due(at timestamptz, zone text, windows jsonb, gap text,
                                           overlap text)
returns timestamptz
language plpgsql stable set search_path from current as $$
declare
    first_day date := (at at time zone zone)::date - 1;
    day date;
    w jsonb;
    opens timestamptz;
    closes timestamptz;
    start_time interval;
    end_time interval;
    best timestamptz;
begin
    if windows is null or jsonb_array_length(windows) = 0 then
        return at;
    end if;
    for i in 0..9 loop
        day := first_day + i;
        for w in select * from jsonb_array_elements(windows) loop
            if not (w -> 'days') @> to_jsonb(extract(isodow from day)::integer) then
                continue;
            end if;
            start_time := (w ->> 'start')::interval;
            end_time := (w ->> 'end')::interval;
            if end_time <= start_time then
                end_time := end_time + interval '1 day';
            end if;
            opens := local_instant(day + start_time, zone, gap, overlap);
            if opens is null then
                continue;
            end if;
            closes := local_instant(day + end_time, zone, 'shift', overlap);
            if opens <= at and at < closes then
                return at;
            elsif opens > at and (best is null or opens < best) then
                best := opens;
            end if;
        end loop;
    end loop;
    return best;
end $$;

revoke all on function send_window_due(timestamptz, text, jsonb, text, text) from public;
