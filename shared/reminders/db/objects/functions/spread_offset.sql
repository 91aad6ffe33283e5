-- A delivery's place in its kind's spread: the first 60 bits of the MD5 of its delivery key,
-- modulo the spread in milliseconds. The key never changes (retries, dead-letter replays), so
-- neither does the place; over many keys the places are uniform over [0, spread). The Python
-- twin is reminders.windows.spread_offset.
create or replace function spread_offset(delivery_key text, spread interval) returns interval
language sql immutable set search_path from current as $$
    select case when spread is null then interval '0' else make_interval(secs => (
        ('x' || substr(md5(delivery_key), 1, 15))::bit(60)::bigint
        % greatest(1, (extract(epoch from spread) * 1000)::bigint)) / 1000.0) end
$$;

revoke all on function spread_offset(text, interval) from public;
