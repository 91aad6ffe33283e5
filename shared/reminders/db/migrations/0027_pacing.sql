-- Pacing: each channel's and each webhook endpoint's send rate, shared by every consumer.
-- channel_rates: one row per paced key ('email', 'sms', 'webhook <url>'): the rate (sends a
-- second) and burst an operator set (source 'set') or the consumer took from the SES account
-- (source 'account'); factor and throttled_at are the AIMD state: a provider's throttle halves
-- the factor (at most once a second), and it climbs back by recover_per_second, so the rate in
-- force is rate * least(1, factor + seconds since throttled_at * recover_per_second).
create table channel_rates (
    key text primary key check (key ~ '^(email|sms|webhook .+)$'),
    rate double precision not null check (rate > 0 and rate <= 100000),
    burst double precision not null check (burst >= 1 and burst <= 1000000),
    shards integer not null check (shards between 1 and 64),
    source text not null check (source in ('set', 'account')),
    factor double precision not null default 1 check (factor > 0 and factor <= 1),
    throttled_at timestamptz,
    throttles bigint not null default 0,
    updated_at timestamptz not null
);
-- The bucket, in shards: a consumer takes a batch's tokens from one shard it can lock at once
-- (SKIP LOCKED), never waiting behind another consumer. Each shard refills at rate / shards up
-- to burst / shards, so the shards together never give more than the rate plus the burst in
-- any window. reserved_until: the next free slot of this shard for a delivery that found no
-- token (released due at its slot, so a backlog comes back spread at the rate). used and
-- used_before count the sends granted in the minute starting at minute and the one before.
create table rate_shards (
    key text not null references channel_rates (key) on delete cascade,
    shard integer not null,
    tokens double precision not null,
    refilled_at timestamptz not null,
    reserved_until timestamptz not null,
    minute timestamptz not null,
    used bigint not null default 0,
    used_before bigint not null default 0,
    primary key (key, shard)
);
-- Throttles a delivery's provider answered: such a retry spends no attempt of the kind's
-- budget (attempts_base moves with it) up to a limit, after which it counts like any other.
alter table deliveries add column throttles integer not null default 0;
-- `channels set` is an operator action on a channel.
alter table operator_actions drop constraint operator_actions_object_check;
alter table operator_actions add constraint operator_actions_object_check
    check (object in ('tenant', 'endpoint', 'kind', 'schedule', 'deliveries', 'channel'));
