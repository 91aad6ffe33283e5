-- The schedule of record. Forward-only: never edit a migration that has shipped; add the next.

create table tenants (
    id          text primary key check (id <> '' and length(id) <= 200),
    paused      boolean not null default false,
    created_at  timestamptz not null default now()
);

-- A named class of reminder and its policies.
create table kinds (
    name               text primary key check (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    stale_after        interval,              -- null: never stale
    max_attempts       integer not null default 8 check (max_attempts between 1 and 100),
    backoff_base       interval not null default '30 seconds',
    backoff_cap        interval not null default '1 hour',
    redrive_budget     integer not null default 3 check (redrive_budget between 0 and 100),
    updated_at         timestamptz not null default now()
);
insert into kinds (name, stale_after) values ('default', null);

-- Webhook endpoints and their Standard Webhooks signing secrets.
-- tenant null: the endpoint may be used by any tenant.
create table endpoints (
    id          bigint generated always as identity primary key,
    tenant      text references tenants (id),
    url         text not null check (url ~ '^https?://'),
    secret      text not null check (secret like 'whsec\_%'),
    created_at  timestamptz not null default now()
);
create unique index endpoints_tenant_url on endpoints (coalesce(tenant, ''), url);

-- What an application asked for. One-off (at) or recurring (rrule + tz + local_start).
create table schedules (
    id              bigint generated always as identity primary key,
    tenant          text not null references tenants (id),
    schedule_key    text not null check (schedule_key <> '' and length(schedule_key) <= 200),
    kind            text not null references kinds (name),
    channel         text not null check (channel in ('webhook', 'email', 'sms')),
    destination     text,                  -- shared destination (a webhook URL); null: per recipient
    payload         jsonb not null default '{}',
    revision        text not null default '1',
    generation      integer not null default 0,  -- bumped by every reschedule
    state           text not null default 'active' check (state in ('active', 'cancelled', 'ended')),
    at              timestamptz,
    rrule           text,
    tz              text,
    local_start     timestamp,
    gap_policy      text not null default 'shift' check (gap_policy in ('shift', 'skip')),
    overlap_policy  text not null default 'first' check (overlap_policy in ('first', 'later')),
    request_hash    text not null,         -- what the first call asked for (idempotent retries)
    created_at      timestamptz not null,
    updated_at      timestamptz not null,
    unique (tenant, schedule_key),
    check ((at is not null and rrule is null) or (at is null and rrule is not null and tz is not null
           and local_start is not null))
);

create table schedule_recipients (
    schedule_id  bigint not null references schedules (id),
    tenant       text not null references tenants (id),
    recipient    text not null check (recipient <> '' and length(recipient) <= 320),
    destination  text not null,
    primary key (schedule_id, recipient)
);

create table opt_outs (
    tenant      text not null references tenants (id),
    recipient   text not null,
    channel     text not null check (channel in ('webhook', 'email', 'sms')),
    created_at  timestamptz not null,
    primary key (tenant, recipient, channel)
);

-- One occurrence for one recipient on one channel.
create table deliveries (
    id                bigint generated always as identity primary key,
    tenant            text not null references tenants (id),
    schedule_id       bigint not null references schedules (id),
    generation        integer not null,
    recipient         text not null,
    channel           text not null,
    destination       text not null,
    delivery_key      text not null unique,
    occurrence_at     timestamptz not null,
    revision          text not null,
    due_at            timestamptz not null,
    state             text not null default 'scheduled' check (state in (
                          'scheduled', 'leased', 'retrying', 'sent', 'failed', 'suppressed',
                          'stale', 'unknown', 'dead')),
    reason            text,
    attempts_made     integer not null default 0,
    leases            integer not null default 0,  -- times the scanner leased it
    redrives          integer not null default 0,
    lease_token       uuid,
    lease_expires_at  timestamptz,
    created_at        timestamptz not null,
    updated_at        timestamptz not null,
    check ((state = 'leased') = (lease_token is not null and lease_expires_at is not null))
);
create index deliveries_due on deliveries (due_at) where state in ('scheduled', 'retrying');
create index deliveries_lease_expiry on deliveries (lease_expires_at) where state = 'leased';
create index deliveries_schedule on deliveries (schedule_id, recipient);
create index deliveries_tenant_state on deliveries (tenant, state);
-- Exactly one pending delivery per recipient per schedule.
create unique index deliveries_one_pending on deliveries (schedule_id, recipient)
    where state in ('scheduled', 'leased', 'retrying');

-- The ledger: one row per try, appended before the send and completed after it.
create table attempts (
    id            bigint generated always as identity primary key,
    tenant        text not null references tenants (id),
    delivery_id   bigint not null references deliveries (id),
    attempt_no    integer not null,
    lease_token   uuid not null,
    started_at    timestamptz not null,
    finished_at   timestamptz,
    outcome       text check (outcome in ('sent', 'transient', 'permanent', 'unknown')),
    status_code   integer,
    detail        text,
    retry_after   timestamptz,
    unique (delivery_id, attempt_no)
);
create index attempts_open on attempts (delivery_id) where finished_at is null;

-- Decisions that changed no attempt: re-check suppressions, redrive replays and drops.
create table delivery_events (
    id           bigint generated always as identity primary key,
    tenant       text not null references tenants (id),
    delivery_id  bigint not null references deliveries (id),
    at           timestamptz not null,
    actor        text not null check (actor in ('scanner', 'consumer', 'redrive', 'api', 'operator')),
    event        text not null,
    detail       text
);
create index delivery_events_delivery on delivery_events (delivery_id);
