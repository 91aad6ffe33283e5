-- Per-tenant limits on what applications add (check_quota, called by schedule_for): pending
-- deliveries, and schedules created a minute. A tenant's own value, or the deployment's
-- default (tenant_defaults, one row) where it has none. The same row holds the statement
-- timeout of every application login grant_tenant maps (a role setting; the migrator
-- re-applies it to every mapped login, as it does the service login's).
create table tenant_defaults (
    only_row boolean primary key default true check (only_row),
    max_pending bigint not null default 1000000 check (max_pending >= 0),
    schedules_per_minute integer not null default 6000 check (schedules_per_minute >= 0),
    client_statement_timeout_ms integer not null default 30000
        check (client_statement_timeout_ms between 1 and 86400000)
);
insert into tenant_defaults default values;

alter table tenants
    add column max_pending bigint check (max_pending >= 0),
    add column schedules_per_minute integer check (schedules_per_minute >= 0);

-- The schedules a tenant created in the last minute, read as at most the limit's entries.
create index schedules_tenant_created on schedules (tenant, created_at);
