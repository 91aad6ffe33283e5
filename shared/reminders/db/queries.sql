-- Every runtime statement, as named blocks. Parameters are psycopg named placeholders.
-- Tenancy: every statement is scoped to one tenant (or to ids that a tenant-scoped statement
-- handed out), except those marked CROSS-TENANT, which say why.

-- name: migrations_applied
select version from schema_migrations order by version;

-- name: migration_record
insert into schema_migrations (version, name) values (%(version)s, %(name)s);

-- ---------------------------------------------------------------- kinds, endpoints, tenants

-- name: kind_get
select name, stale_after, max_attempts, backoff_base, backoff_cap, redrive_budget
from kinds where name = %(name)s;

-- name: kind_upsert
insert into kinds (name, stale_after, max_attempts, redrive_budget, backoff_base, backoff_cap,
                   updated_at)
values (%(name)s, %(stale_after)s, coalesce(%(max_attempts)s, 8), coalesce(%(redrive_budget)s, 3),
        coalesce(%(backoff_base)s, interval '30 seconds'), coalesce(%(backoff_cap)s, interval '1 hour'),
        %(now)s)
on conflict (name) do update set
    stale_after    = case when %(stale_after_given)s then excluded.stale_after else kinds.stale_after end,
    max_attempts   = coalesce(%(max_attempts)s, kinds.max_attempts),
    redrive_budget = coalesce(%(redrive_budget)s, kinds.redrive_budget),
    backoff_base   = coalesce(%(backoff_base)s, kinds.backoff_base),
    backoff_cap    = coalesce(%(backoff_cap)s, kinds.backoff_cap),
    updated_at     = %(now)s
returning name, stale_after, max_attempts, backoff_base, backoff_cap, redrive_budget;

-- name: kinds_list
select name, stale_after, max_attempts, backoff_base, backoff_cap, redrive_budget
from kinds order by name;

-- name: tenant_ensure
insert into tenants (id) values (%(tenant)s) on conflict (id) do nothing;

-- name: tenant_set_paused
update tenants set paused = %(paused)s where id = %(tenant)s returning id, paused;

-- name: endpoint_add
insert into endpoints (tenant, url, secret) values (%(tenant)s, %(url)s, %(secret)s)
on conflict (coalesce(tenant, ''), url) do update set secret = excluded.secret
returning id, tenant, url;

-- name: endpoint_find
select id, tenant, url from endpoints
where url = %(url)s and (tenant = %(tenant)s or tenant is null)
order by tenant nulls last limit 1;

-- ---------------------------------------------------------------- schedules (the API)

-- name: schedule_insert
insert into schedules (tenant, schedule_key, kind, channel, destination, payload, revision,
                       at, rrule, tz, local_start, gap_policy, overlap_policy, request_hash,
                       created_at, updated_at)
values (%(tenant)s, %(schedule_key)s, %(kind)s, %(channel)s, %(destination)s, %(payload)s,
        %(revision)s, %(at)s, %(rrule)s, %(tz)s, %(local_start)s, %(gap)s, %(overlap)s,
        %(request_hash)s, %(now)s, %(now)s)
on conflict (tenant, schedule_key) do nothing
returning id, generation;

-- name: schedule_get
select id, tenant, schedule_key, kind, channel, destination, payload, revision, generation, state,
       at, rrule, tz, local_start, gap_policy, overlap_policy, request_hash
from schedules where tenant = %(tenant)s and schedule_key = %(schedule_key)s;

-- name: schedule_lock
select id, tenant, schedule_key, kind, channel, destination, payload, revision, generation, state,
       at, rrule, tz, local_start, gap_policy, overlap_policy
from schedules where tenant = %(tenant)s and schedule_key = %(schedule_key)s
for update;

-- name: schedule_tenants_for_key
-- CROSS-TENANT: the command line resolves a bare key to its tenant; it lists, never changes.
select s.tenant, s.schedule_key from schedules s where s.schedule_key = %(key)s
union
select s.tenant, s.schedule_key from deliveries d join schedules s on s.id = d.schedule_id
where d.delivery_key = %(key)s;

-- name: schedule_update
update schedules set
    at = %(at)s, rrule = %(rrule)s, tz = %(tz)s, local_start = %(local_start)s,
    gap_policy = %(gap)s, overlap_policy = %(overlap)s, revision = %(revision)s,
    generation = generation + 1, state = 'active', updated_at = %(now)s
where id = %(id)s and tenant = %(tenant)s
returning id, generation;

-- name: schedule_cancel
update schedules set state = 'cancelled', updated_at = %(now)s
where id = %(id)s and tenant = %(tenant)s and state = 'active';

-- name: schedule_end
update schedules set state = 'ended', updated_at = %(now)s
where id = %(id)s and tenant = %(tenant)s and state = 'active'
  and not exists (select 1 from deliveries d where d.schedule_id = %(id)s
                  and d.state in ('scheduled', 'leased', 'retrying'));

-- name: recipients_insert
insert into schedule_recipients (schedule_id, tenant, recipient, destination)
select %(schedule_id)s, %(tenant)s, r.recipient, r.destination
from unnest(%(recipients)s::text[], %(destinations)s::text[]) as r(recipient, destination);

-- name: recipients_of_schedule
select recipient, destination from schedule_recipients
where schedule_id = %(schedule_id)s and tenant = %(tenant)s order by recipient;

-- name: deliveries_insert
-- One statement for any number of recipients: a fan-out costs one round trip.
insert into deliveries (tenant, schedule_id, generation, recipient, channel, destination,
                        delivery_key, occurrence_at, revision, due_at, state, reason,
                        created_at, updated_at)
select s.tenant, s.id, s.generation, r.recipient, s.channel, r.destination, r.delivery_key,
       r.occurrence_at, s.revision, r.occurrence_at, r.state, r.reason, %(now)s, %(now)s
from schedules s,
     unnest(%(recipients)s::text[], %(destinations)s::text[], %(keys)s::text[],
            %(occurrences)s::timestamptz[], %(states)s::text[], %(reasons)s::text[])
         as r(recipient, destination, delivery_key, occurrence_at, state, reason)
where s.id = %(schedule_id)s and s.tenant = %(tenant)s
on conflict (delivery_key) do nothing
returning id, recipient, delivery_key, occurrence_at, due_at, state;

-- name: deliveries_of_schedule_generation
select id, recipient, delivery_key, occurrence_at, due_at, state
from deliveries where schedule_id = %(schedule_id)s and tenant = %(tenant)s
  and generation = %(generation)s
order by recipient, occurrence_at;

-- name: deliveries_supersede_pending
-- Reschedule and cancel: every pending delivery of the schedule stops here. A leased one loses
-- its lease, so its holder's fenced writes are refused and its message is dropped on re-check.
update deliveries set state = 'suppressed', reason = %(reason)s, lease_token = null,
                      lease_expires_at = null, updated_at = %(now)s
where schedule_id = %(schedule_id)s and tenant = %(tenant)s
  and state in ('scheduled', 'leased', 'retrying')
returning id, recipient, occurrence_at;

-- name: series_state
-- The recipient's place in a recurring series: its last occurrence in the current generation.
select s.state, s.rrule, s.tz, s.local_start, s.gap_policy, s.overlap_policy, s.generation,
       s.channel, k.stale_after, r.destination,
       (select max(d.occurrence_at) from deliveries d
        where d.schedule_id = s.id and d.tenant = s.tenant and d.recipient = r.recipient
          and d.generation = s.generation) as last_occurrence,
       exists (select 1 from deliveries d where d.schedule_id = s.id and d.tenant = s.tenant
               and d.recipient = r.recipient and d.state in ('scheduled', 'leased', 'retrying'))
           as has_pending
from schedules s
join kinds k on k.name = s.kind
join schedule_recipients r on r.schedule_id = s.id and r.recipient = %(recipient)s
where s.id = %(schedule_id)s and s.tenant = %(tenant)s;

-- name: opt_out_add
insert into opt_outs (tenant, recipient, channel, created_at)
values (%(tenant)s, %(recipient)s, %(channel)s, %(now)s)
on conflict do nothing;

-- name: opt_out_remove
delete from opt_outs where tenant = %(tenant)s and recipient = %(recipient)s
  and channel = %(channel)s;

-- ---------------------------------------------------------------- scanner

-- name: scanner_lock
-- Scanners take turns: the in-flight budget is counted and spent by one at a time.
select pg_advisory_xact_lock(%(key)s);

-- name: lease_reclaim_expired
-- CROSS-TENANT: the scanner serves every tenant. Expired leases are at most the in-flight
-- budget, so this is bounded. A lease whose attempt started but never finished becomes
-- `unknown` unless its channel deduplicates on the delivery key; otherwise it is due again.
with expired as (
    select d.id, d.lease_token, d.channel, d.attempts_made,
           exists (select 1 from attempts a where a.delivery_id = d.id
                   and a.lease_token = d.lease_token and a.finished_at is null) as attempt_open
    from deliveries d
    where d.state = 'leased' and d.lease_expires_at < %(now)s
    for update of d skip locked
), closed as (
    update attempts a set finished_at = %(now)s, outcome = 'unknown',
                          detail = 'lease expired before the outcome was recorded'
    from expired e
    where a.delivery_id = e.id and a.lease_token = e.lease_token and a.finished_at is null
    returning a.delivery_id
)
update deliveries d set
    state = case
        when e.attempt_open and not (e.channel = any(%(idempotent_channels)s)) then 'unknown'
        when e.attempts_made = 0 then 'scheduled'
        else 'retrying' end,
    reason = case
        when e.attempt_open and not (e.channel = any(%(idempotent_channels)s))
            then 'lease expired after a send started; not resent: the channel cannot deduplicate'
        when e.attempt_open then 'lease expired after a send started; resent with the same key'
        else 'lease expired before any send; due again' end,
    lease_token = null, lease_expires_at = null, updated_at = %(now)s
from expired e
where d.id = e.id
returning d.id, d.tenant, d.state, d.schedule_id, d.recipient,
          exists (select 1 from schedules s where s.id = d.schedule_id and s.rrule is not null)
              as recurring;

-- name: lease_park_poisoned
-- CROSS-TENANT, part of the scanner's pass. A delivery whose leases keep ending without an
-- attempt is a message that fails before any send is tried (a poison pill): park it as dead
-- instead of leasing it forever. Bounded by the batch size.
with poisoned as (
    select d.id from deliveries d
    where d.state in ('scheduled', 'retrying') and d.due_at <= %(now)s
      and d.leases - d.attempts_made >= %(max_empty_leases)s
    order by d.due_at, d.id
    limit %(batch)s
    for update skip locked
)
update deliveries d set state = 'dead', updated_at = %(now)s,
    reason = 'leased ' || d.leases || ' times, ' || d.attempts_made
             || ' attempts: its message keeps failing before a send is tried'
from poisoned where d.id = poisoned.id
returning d.id, d.tenant, d.state, d.schedule_id, d.recipient,
          exists (select 1 from schedules s where s.id = d.schedule_id and s.rrule is not null)
              as recurring;

-- name: lease_due
-- CROSS-TENANT: the one statement that picks work across tenants (paused tenants wait).
-- Oldest due first; rows another transaction holds (an application's reschedule) are skipped.
with room as (
    select greatest(0, least(%(batch)s,
        %(budget)s - greatest(%(queued)s, (select count(*) from deliveries where state = 'leased'))
    )) as n
), due as (
    select d.id from deliveries d join tenants t on t.id = d.tenant
    where d.state in ('scheduled', 'retrying') and d.due_at <= %(now)s and not t.paused
      and d.leases - d.attempts_made < %(max_empty_leases)s
    order by d.due_at, d.id
    limit (select n from room)
    for update of d skip locked
)
update deliveries d set state = 'leased', lease_token = gen_random_uuid(),
                        lease_expires_at = %(now)s + make_interval(secs => %(lease_seconds)s),
                        leases = d.leases + 1, updated_at = %(now)s
from due where d.id = due.id
returning d.id, d.lease_token, d.due_at;

-- name: lease_release
-- Fenced: hands back leases whose message never reached the queue (or a paused tenant's).
-- CROSS-TENANT by (id, token): only the holder of those leases knows the tokens.
update deliveries d set
    state = case when d.attempts_made = 0 then 'scheduled' else 'retrying' end,
    reason = %(reason)s, lease_token = null, lease_expires_at = null, updated_at = %(now)s,
    leases = greatest(d.leases - 1, 0)  -- handed back unused: it does not count
from unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) as r(id, token)
where d.id = r.id and d.lease_token = r.token and d.state = 'leased';

-- name: oldest_overdue
-- CROSS-TENANT: an operator's health figure over the whole system.
select extract(epoch from %(now)s - min(due_at))::float8 as seconds, count(*) as overdue
from deliveries
where state in ('scheduled', 'retrying', 'leased') and due_at <= %(now)s;

-- ---------------------------------------------------------------- consumer and redrive

-- name: recheck_load
-- CROSS-TENANT by id: ids come from messages the scanner published; one round trip per batch.
select d.id, d.tenant, d.schedule_id, d.generation, d.recipient, d.channel, d.destination,
       d.delivery_key, d.occurrence_at, d.revision, d.due_at, d.state, d.reason,
       d.attempts_made, d.redrives, d.lease_token, d.lease_expires_at,
       s.state as schedule_state, s.revision as schedule_revision,
       s.generation as schedule_generation, s.payload, s.kind, (s.rrule is not null) as recurring,
       s.rrule, s.tz, s.local_start, s.gap_policy, s.overlap_policy,
       k.stale_after, k.max_attempts, k.backoff_base, k.backoff_cap, k.redrive_budget,
       t.paused as tenant_paused,
       exists (select 1 from attempts a where a.delivery_id = d.id
               and a.lease_token = d.lease_token and a.finished_at is null) as open_attempt,
       exists (select 1 from opt_outs o where o.tenant = d.tenant and o.recipient = d.recipient
               and o.channel = d.channel) as opted_out,
       e.secret as endpoint_secret
from deliveries d
join schedules s on s.id = d.schedule_id
join kinds k on k.name = s.kind
join tenants t on t.id = d.tenant
left join lateral (
    select secret from endpoints
    where d.channel = 'webhook' and url = d.destination and (tenant = d.tenant or tenant is null)
    order by tenant nulls last limit 1
) e on true
where d.id = any(%(ids)s::bigint[]);

-- name: attempt_start
-- Fenced: appends the attempt only while the lease is still ours and nobody else started one
-- since the row was read (two copies of one message racing: one wins); committed before the
-- send.
with d as (
    update deliveries set attempts_made = attempts_made + 1, updated_at = %(now)s
    where id = %(id)s and lease_token = %(token)s and state = 'leased'
      and attempts_made = %(attempts_made)s
    returning id, tenant, attempts_made
)
insert into attempts (tenant, delivery_id, attempt_no, lease_token, started_at)
select d.tenant, d.id, d.attempts_made, %(token)s, %(now)s from d
returning id, attempt_no;

-- name: attempts_close_open
-- A try under this lease started a send and never recorded its outcome (it crashed).
update attempts set finished_at = %(now)s, outcome = 'unknown',
                    detail = 'the try stopped before recording its outcome'
where delivery_id = %(id)s and tenant = %(tenant)s and lease_token = %(token)s
  and finished_at is null;

-- name: attempt_finish
update attempts set finished_at = %(now)s, outcome = %(outcome)s, status_code = %(status_code)s,
                    detail = %(detail)s, retry_after = %(retry_after)s
where id = %(attempt_id)s and tenant = %(tenant)s and finished_at is null;

-- name: delivery_settle
-- Fenced: the outcome lands only while the lease is still ours.
update deliveries set state = %(state)s, reason = %(reason)s,
                      due_at = coalesce(%(due_at)s, due_at),
                      lease_token = null, lease_expires_at = null, updated_at = %(now)s
where id = %(id)s and tenant = %(tenant)s and lease_token = %(token)s and state = 'leased'
returning id, state;

-- name: delivery_replay
-- Redrive: fenced on the lease the dead-lettered message was about (or on an expired one).
update deliveries set
    state = case when attempts_made = 0 then 'scheduled' else 'retrying' end,
    reason = %(reason)s, due_at = %(now)s, redrives = redrives + 1,
    lease_token = null, lease_expires_at = null, updated_at = %(now)s
where id = %(id)s and tenant = %(tenant)s and state = 'leased' and lease_token = %(token)s
returning id, state;

-- name: event_add
insert into delivery_events (tenant, delivery_id, at, actor, event, detail)
values (%(tenant)s, %(id)s, %(now)s, %(actor)s, %(event)s, %(detail)s);

-- ---------------------------------------------------------------- operator reads

-- name: status_by_state
-- CROSS-TENANT unless a tenant is given: the operator's view.
select state, channel, count(*) as n from deliveries
where (%(tenant)s::text is null or tenant = %(tenant)s)
group by state, channel order by state, channel;

-- name: next_due
-- CROSS-TENANT: when the next piece of work falls due (the demo's simulated clock jumps there).
select min(case when state = 'leased' then lease_expires_at else due_at end) as at
from deliveries where state in ('scheduled', 'retrying', 'leased');

-- name: status_expired_leases
select count(*) as n from deliveries
where state = 'leased' and lease_expires_at < %(now)s
  and (%(tenant)s::text is null or tenant = %(tenant)s);

-- name: status_oldest_overdue
select extract(epoch from %(now)s - min(due_at))::float8 as seconds from deliveries
where state in ('scheduled', 'retrying', 'leased') and due_at <= %(now)s
  and (%(tenant)s::text is null or tenant = %(tenant)s);

-- name: delivery_by_key
select d.id, d.tenant, s.schedule_key, d.delivery_key, d.recipient, d.channel, d.destination,
       d.occurrence_at, d.due_at, d.revision, d.state, d.reason, d.attempts_made, d.redrives,
       d.lease_token, d.lease_expires_at, d.created_at, d.updated_at, s.kind
from deliveries d join schedules s on s.id = d.schedule_id
where d.delivery_key = %(key)s and d.tenant = %(tenant)s;

-- name: deliveries_of_schedule
select d.id, d.tenant, s.schedule_key, d.delivery_key, d.recipient, d.channel, d.destination,
       d.occurrence_at, d.due_at, d.revision, d.state, d.reason, d.attempts_made, d.redrives,
       d.lease_expires_at, d.created_at, d.updated_at, s.kind
from deliveries d join schedules s on s.id = d.schedule_id
where s.schedule_key = %(key)s and d.tenant = %(tenant)s
order by d.occurrence_at, d.recipient, d.id;

-- name: deliveries_in_state
-- CROSS-TENANT unless a tenant is given: the operator's worklist (parked deliveries).
select d.id, d.tenant, s.schedule_key, d.delivery_key, d.recipient, d.channel, d.destination,
       d.occurrence_at, d.due_at, d.revision, d.state, d.reason, d.attempts_made, d.redrives,
       d.lease_expires_at, d.created_at, d.updated_at, s.kind
from deliveries d join schedules s on s.id = d.schedule_id
where d.state = %(state)s and (%(tenant)s::text is null or d.tenant = %(tenant)s)
order by d.updated_at, d.id
limit %(limit)s;

-- name: delivery_reconcile
-- An operator settles a parked or terminal delivery after checking with the receiver.
-- Never one that is due or leased: those belong to the pipeline.
update deliveries set
    state = case when %(target)s <> 'retry' then %(target)s
                 when attempts_made = 0 then 'scheduled' else 'retrying' end,
    reason = %(reason)s,
    due_at = case when %(target)s = 'retry' then %(now)s else due_at end,
    updated_at = %(now)s
where delivery_key = %(key)s and tenant = %(tenant)s
  and state in ('unknown', 'failed', 'dead', 'stale', 'suppressed')
returning id, tenant, state, reason;

-- name: attempts_of_delivery
select attempt_no, started_at, finished_at, outcome, status_code, detail, retry_after
from attempts where delivery_id = %(id)s and tenant = %(tenant)s order by attempt_no;

-- name: events_of_delivery
select at, actor, event, detail from delivery_events
where delivery_id = %(id)s and tenant = %(tenant)s order by id;
