-- What looks at the service from outside, as named blocks: the invariant checker
-- (reminders.invariants) and the fault drills (reminders.local.drills). The service never runs
-- these. All of them are CROSS-TENANT reads over the whole schema; the one that acts
-- (drill_terminate_service) ends sessions on the drill's own database only.

-- ---------------------------------------------------------------- invariants

-- name: check_leases_past_expiry
-- (a) No lease outlives its expiry by more than one scanner tick, taken by a consumer or
-- pending.
select delivery_key, lease_expires_at,
       extract(epoch from %(now)s - lease_expires_at)::float8 as past_seconds
from (select d.delivery_key, d.lease_expires_at from deliveries d where d.state = 'leased'
      union all
      select d.delivery_key, q.expires_at from due_queue q
      join deliveries d on d.id = q.id where q.token is not null) leases
where lease_expires_at < %(now)s - make_interval(secs => %(tick_seconds)s)
order by lease_expires_at, delivery_key;

-- name: check_due_queue
-- (g) The due set agrees with the deliveries (migration 0013): every `scheduled` or `retrying`
-- delivery has one due_queue row, with its tenant, state and due time (a due entry, or a
-- pending lease), and no other delivery has one.
select coalesce(d.delivery_key, 'no delivery ' || q.id) as delivery_key, d.state, d.due_at,
       q.state as entry_state, q.due_at as entry_due_at, (q.token is not null) as pending
from deliveries d
full join due_queue q on q.id = d.id
where case when d.state in ('scheduled', 'retrying')
           then q.id is null
                or (q.state, q.due_at, q.tenant) is distinct from (d.state, d.due_at, d.tenant)
           else q.id is not null end
order by 1;

-- name: check_open_attempts
-- (b) An attempt without an outcome belongs to the delivery's current lease, and that lease is
-- live (or expired less than a tick ago: the next scanner pass reclaims it and closes the try).
select d.delivery_key, d.state, d.lease_expires_at, a.attempt_no, a.started_at,
       (d.lease_token is not distinct from a.lease_token) as same_lease
from attempts a
join deliveries d on d.id = a.delivery_id
where a.finished_at is null
  and not (d.state = 'leased' and d.lease_token = a.lease_token
           and d.lease_expires_at >= %(now)s - make_interval(secs => %(tick_seconds)s))
order by d.delivery_key, a.attempt_no;

-- name: check_attempts_over_budget
-- (c) The ledger never holds more attempts for a delivery than its kind allows (counted since
-- an operator's retry, which starts the budget afresh).
select d.delivery_key, k.name as kind, k.max_attempts, count(*) as attempts
from deliveries d
join schedules s on s.id = d.schedule_id
join kinds k on k.name = s.kind
join attempts a on a.delivery_id = d.id
group by d.id, d.delivery_key, d.attempts_base, k.name, k.max_attempts
having count(*) > k.max_attempts + d.attempts_base
order by d.delivery_key;

-- name: check_delivery_counts
-- (f) The counts `status` and the console read (delivery_counts, its shards summed, migration
-- 0011) equal a count of the rows, group by group: every mismatch, either side missing.
with kept as (
    select tenant, kind, channel, state, sum(n)::bigint as n from delivery_counts
    group by tenant, kind, channel, state
    having sum(n) <> 0
), actual as (
    select d.tenant, s.kind, d.channel, d.state, count(*) as n
    from deliveries d join schedules s on s.id = d.schedule_id
    group by d.tenant, s.kind, d.channel, d.state
)
select tenant, kind, channel, state, coalesce(k.n, 0) as kept, coalesce(a.n, 0) as actual
from kept k full join actual a using (tenant, kind, channel, state)
where k.n is distinct from a.n
order by tenant, kind, channel, state;

-- name: check_ledger_of_keys
-- (d) What the ledger says about the keys a receiver saw: attempts, and whether one of them
-- may have sent without recording it.
select d.delivery_key, count(a.id) as attempts,
       coalesce(bool_or(a.outcome = 'unknown'), false) as any_unknown
from deliveries d
left join attempts a on a.delivery_id = d.id
where d.delivery_key = any(%(keys)s::text[])
group by d.delivery_key;

-- name: check_unsettled
-- (e) Nothing lost: every delivery due by now has an outcome or is held by a live lease
-- (taken by a consumer, or pending).
select d.delivery_key, d.state, d.reason, d.due_at, d.lease_expires_at
from deliveries d
where d.due_at <= %(now)s and d.state in ('scheduled', 'leased', 'retrying')
  and not (d.state = 'leased' and d.lease_expires_at > %(now)s)
  and not exists (select 1 from due_queue q
                  where q.id = d.id and q.token is not null and q.expires_at > %(now)s)
order by d.due_at, d.delivery_key;

-- ---------------------------------------------------------------- drills

-- name: drill_pending
-- Occurrences that have come and have no outcome yet (a retry waiting for later included).
select count(*) as n from deliveries
where occurrence_at <= %(now)s and state in ('scheduled', 'leased', 'retrying');

-- name: drill_leased
-- Live leases, taken by a consumer or pending.
select (select count(*) from deliveries where state = 'leased')
       + (select count(*) from due_queue where token is not null) as n;

-- name: drill_deliveries
select d.id, d.delivery_key, d.channel, d.destination, d.state, d.reason, d.due_at,
       d.occurrence_at, d.attempts_made, d.leases, d.lease_token
from deliveries d
order by d.id;

-- name: drill_attempts
select d.delivery_key, a.attempt_no, a.lease_token, a.started_at, a.finished_at, a.outcome,
       a.detail
from attempts a
join deliveries d on d.id = a.delivery_id
order by d.delivery_key, a.attempt_no;

-- name: drill_max_delivery_id
select coalesce(max(id), 0) as id from deliveries;

-- name: drill_service_sessions
select count(*) as n from pg_stat_activity
where datname = current_database() and application_name = %(application)s
  and pid <> pg_backend_pid();

-- name: drill_terminate_service
-- The fault itself: end every session the service holds on this database.
select count(*) filter (where pg_terminate_backend(pid)) as n
from pg_stat_activity
where datname = current_database() and application_name = %(application)s
  and pid <> pg_backend_pid();
