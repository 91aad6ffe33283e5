-- delivery_counts (0011): a statement's inserted deliveries added per group, in one upsert per
-- group, to this backend's own shard (see the table's migration).
create or replace function delivery_counts_inserted() returns trigger
language plpgsql set search_path from current as $$
begin
    insert into delivery_counts as c (tenant, kind, channel, state, shard, n)
    select x.tenant, s.kind, x.channel, x.state, pg_backend_pid(), sum(x.n)
    from (select tenant, schedule_id, channel, state, count(*) as n from new_rows
          group by tenant, schedule_id, channel, state) x
    join schedules s on s.id = x.schedule_id
    group by x.tenant, s.kind, x.channel, x.state
    order by x.tenant, s.kind, x.channel, x.state
    on conflict (tenant, kind, channel, state, shard) do update set n = c.n + excluded.n;
    return null;
end $$;

revoke all on function delivery_counts_inserted() from public;
