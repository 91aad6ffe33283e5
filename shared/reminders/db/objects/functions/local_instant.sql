-- A local wall-clock time in a zone as an instant, under a schedule's DST policy, as
-- recurrence.py resolves an occurrence: a time in a spring-forward gap is read with the offset
-- in force before the gap, i.e. moved forward by the gap's length ('shift'), or does not exist
-- ('skip': null); a time that occurs twice is the first ('first') or the second ('later').
-- The two candidate offsets are those a day either side (zones do not change twice in two days).
create or replace function local_instant(local timestamp, zone text, gap text, overlap text)
returns timestamptz
language plpgsql stable set search_path from current as $$
declare
    naive timestamptz := local at time zone 'UTC';
    off_before interval := ((naive - interval '1 day') at time zone zone)
                           - ((naive - interval '1 day') at time zone 'UTC');
    off_after interval := ((naive + interval '1 day') at time zone zone)
                          - ((naive + interval '1 day') at time zone 'UTC');
    a timestamptz := naive - off_before;
    b timestamptz := naive - off_after;
    a_real boolean := (a at time zone zone) = local;
    b_real boolean := (b at time zone zone) = local;
begin
    if a_real and b_real then
        return case when overlap = 'later' then greatest(a, b) else least(a, b) end;
    elsif a_real then
        return a;
    elsif b_real then
        return b;
    elsif gap = 'skip' then
        return null;
    end if;
    return a;  -- the offset before the gap: the wall time moved forward by the gap's length
end $$;

revoke all on function local_instant(timestamp, text, text, text) from public;
