-- A statement's change per group, without joining the statement's old rows to its new ones
-- (transition tables carry no statistics, and that join ran as a nested loop, quadratic in the
-- statement's rows): old rows count -1 and new rows +1 in their groups: a row whose counted columns did not change (a lease marked received, an attempt
-- started) adds -1 and +1 to one group, which cancel, and a group whose change sums to 0 is not
-- written, so such statements still make no upsert.
create or replace function delivery_counts_updated() returns trigger
language plpgsql set search_path from current as $$
begin
    insert into delivery_counts as c (tenant, kind, channel, state, shard, n)
    select x.tenant, s.kind, x.channel, x.state, pg_backend_pid(), sum(x.n)
    from (select v.tenant, v.schedule_id, v.channel, v.state, sum(v.n) as n
          from (select tenant, schedule_id, channel, state, -1 as n from old_rows
                union all
                select tenant, schedule_id, channel, state, 1 from new_rows) v
          group by v.tenant, v.schedule_id, v.channel, v.state
          having sum(v.n) <> 0) x
    join schedules s on s.id = x.schedule_id
    group by x.tenant, s.kind, x.channel, x.state
    having sum(x.n) <> 0
    order by x.tenant, s.kind, x.channel, x.state
    on conflict (tenant, kind, channel, state, shard) do update set n = c.n + excluded.n;
    return null;
end $$;

revoke all on function delivery_counts_updated() from public;
