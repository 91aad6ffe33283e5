-- Terminal deliveries, their attempts and events are removed once older than their kind's
-- retention, in bounded batches, so neither the tables nor the scanner's work grow with the
-- age of the deployment. What was removed is counted per day.
alter table kinds add column retention interval not null default '30 days'
    check (retention >= interval '1 hour');

create index deliveries_terminal_age on deliveries (updated_at, id)
    where state in ('sent', 'failed', 'suppressed', 'stale', 'unknown', 'dead')
      and not advance_series;

create table retention_totals (
    day         date primary key,
    deliveries  bigint not null default 0,
    attempts    bigint not null default 0,
    events      bigint not null default 0
);
