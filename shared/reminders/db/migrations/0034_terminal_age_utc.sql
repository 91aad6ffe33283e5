-- The retention purge's per-kind range (migration 0020) on the engine the stack deploys,
-- Postgres 17. Written as row comparisons on (kind, updated_at) it read every entry of a kind
-- kept longer, since 17 does not end an index range on a row comparison's later column
-- (18 does); written as a plain equality on the kind and a bound on updated_at, the planner
-- took the last-change index (deliveries_browse_updated, migration 0025) at a million terminal
-- rows and read every one of them older than the shortest retention (1,000,028 rows, 71,107
-- buffers, to purge ten). The purge bounds the instant as UTC wall time, an expression only
-- this index holds: no other index can serve its range, and this one ends the range where the
-- kind's retention does.
drop index deliveries_terminal_kind_age;
create index deliveries_terminal_kind_age on deliveries (kind, (updated_at at time zone 'UTC'), id)
    where state in ('sent', 'failed', 'suppressed', 'stale', 'unknown', 'dead')
      and not advance_series;
