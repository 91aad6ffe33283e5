-- Every runtime statement, as named blocks. Parameters are psycopg named placeholders.
-- Batch writes by id say `(d.state = 'leased') is true` rather than `d.state = 'leased'`: the
-- same test, but one the planner cannot match to the partial indexes on leased rows, so the
-- rows are found by primary key (one lookup a row), never by walking every live lease (which
-- it would pick on statistics taken before a burst). They read the batch from `unnest(...)`
-- and look each row up by `d.id = r.id` alone: a second `d.id = any(ids)` made the planner
-- scan the rows by that list and join the unnest to each of them, n × n comparisons (89,700
-- for a batch of 300).
-- Tenancy: every statement is scoped to one tenant (or to ids that a tenant-scoped statement
-- handed out), except those marked CROSS-TENANT, which say why.

-- name: pipeline_abandon
-- Fails an open pipeline's implicit transaction, so leaving the pipeline rolls it back.
do $$ begin raise exception 'pipeline abandoned by the client'; end $$;

-- name: session_defaults
-- What this session started with: the login's role settings in this database (the service
-- sets nothing at connect, since RDS Proxy refuses startup options).
select current_setting('search_path') as search_path,
       (select setting::bigint from pg_settings where name = 'lock_timeout') as lock_timeout_ms,
       (select setting::bigint from pg_settings where name = 'statement_timeout')
           as statement_timeout_ms;

-- name: transaction_begin
-- A transaction of its own for each statement db.each_alone pipelines.
begin;

-- name: transaction_commit
commit;

-- name: transaction_rollback
-- What a pipeline of db.each_alone left open when one of its statements failed.
rollback;

-- name: transaction_statement_timeout
-- For the rest of this transaction only (SET LOCAL: a pooler's connection is not pinned).
select set_config('statement_timeout', %(value)s, true);

-- name: ping
-- Is the connection still there (after it sat idle)?
select 1 as ok;

-- name: migrations_applied
select version from schema_migrations order by version;

-- name: migration_record
insert into schema_migrations (version, name) values (%(version)s, %(name)s);

-- name: client_logins_configurable
-- Whether configure_client_logins exists (a migrator stopped before it, as an upgrade test's
-- older release, has none).
select 1 as present where to_regprocedure('configure_client_logins()') is not null;

-- name: client_logins_configure
-- Every mapped application login's statement timeout again (configure_client_logins).
select configure_client_logins() as logins;

-- name: schema_objects_recorded
select name, digest from schema_objects;

-- name: schema_objects_present
-- The repeatable objects in the service's schema (the migrator's search path), by kind and
-- name as their files are named (objects/<kind>/<name>.sql).
select 'functions' as kind, p.proname::text as name from pg_proc p
where p.pronamespace = current_schema()::regnamespace
union all
select 'views', c.relname::text from pg_class c
where c.relnamespace = current_schema()::regnamespace and c.relkind = 'v'
union all
select 'triggers', t.tgname::text from pg_trigger t join pg_class c on c.oid = t.tgrelid
where c.relnamespace = current_schema()::regnamespace and not t.tgisinternal;

-- name: schema_object_record
insert into schema_objects (name, digest) values (%(name)s, %(digest)s)
on conflict (name) do update set digest = excluded.digest, applied_at = now();

-- name: time_zones_table
select 1 as present where to_regclass('time_zones') is not null;

-- name: time_zones_replace
-- The tzdata wheel's zone names, whole (a few hundred rows).
with wanted as (select unnest(%(names)s::text[]) as name),
gone as (delete from time_zones z where not exists (select 1 from wanted w where w.name = z.name))
insert into time_zones (name) select name from wanted on conflict (name) do nothing;

-- name: schema_objects_forget
-- Files removed: their objects were dropped by the numbered migration that removed them.
delete from schema_objects where name <> all(%(names)s::text[]);

-- ---------------------------------------------------------------- kinds, endpoints, tenants

-- name: kind_upsert
insert into kinds (name, stale_after, max_attempts, redrive_budget, backoff_base, backoff_cap,
                   retention, send_windows, spread, priority, updated_at)
values (%(name)s, %(stale_after)s, coalesce(%(max_attempts)s, 8), coalesce(%(redrive_budget)s, 3),
        coalesce(%(backoff_base)s, interval '30 seconds'), coalesce(%(backoff_cap)s, interval '1 hour'),
        coalesce(%(retention)s, interval '30 days'), %(send_windows)s::jsonb, %(spread)s,
        coalesce(%(priority)s, 5), %(now)s)
on conflict (name) do update set
    stale_after    = case when %(stale_after_given)s then excluded.stale_after else kinds.stale_after end,
    max_attempts   = coalesce(%(max_attempts)s, kinds.max_attempts),
    redrive_budget = coalesce(%(redrive_budget)s, kinds.redrive_budget),
    backoff_base   = coalesce(%(backoff_base)s, kinds.backoff_base),
    backoff_cap    = coalesce(%(backoff_cap)s, kinds.backoff_cap),
    retention      = coalesce(%(retention)s, kinds.retention),
    send_windows   = case when %(send_windows_given)s then excluded.send_windows
                          else kinds.send_windows end,
    spread         = case when %(spread_given)s then excluded.spread else kinds.spread end,
    priority       = coalesce(%(priority)s, kinds.priority),
    updated_at     = %(now)s
returning name, stale_after, max_attempts, backoff_base, backoff_cap, redrive_budget, retention,
          send_windows, spread, priority;

-- name: kind_get
-- One kind, locked for a change of its policies (who changed what is recorded only if it did).
select name, stale_after, max_attempts, backoff_base, backoff_cap, redrive_budget, retention,
       send_windows, spread, priority
from kinds where name = %(name)s for no key update;

-- name: kinds_list
select name, stale_after, max_attempts, backoff_base, backoff_cap, redrive_budget, retention,
       send_windows, spread, priority
from kinds order by name;

-- name: tenant_ensure
insert into tenants (id) values (%(tenant)s) on conflict (id) do nothing;

-- name: tenant_set_paused
update tenants set paused = %(paused)s where id = %(tenant)s returning id, paused;

-- name: endpoint_add
-- The secret sealed (never plaintext); registering a URL again replaces its secret at once and
-- ends any rotation.
insert into endpoints (tenant, url, secret_ciphertext, secret_data_key, secret_key_id,
                       updated_at)
values (%(tenant)s, %(url)s, %(ciphertext)s, %(data_key)s, %(key_id)s, %(now)s)
on conflict (coalesce(tenant, ''), url) do update set
    secret = null, secret_ciphertext = excluded.secret_ciphertext,
    secret_data_key = excluded.secret_data_key, secret_key_id = excluded.secret_key_id,
    next_secret_ciphertext = null, next_secret_data_key = null, next_secret_key_id = null,
    overlap_until = null, updated_at = excluded.updated_at
returning id, tenant, url;

-- ---------------------------------------------------------------- schedules (the API)
-- The rules live in the SQL functions of db/objects/functions (the same ones applications in any
-- language call); these blocks only call them with the tenant the caller named.

-- name: api_schedule
select schedule_id, schedule_key, created, recipient, delivery_key, due_at, state
from schedule_for(tenant => %(tenant)s, key => %(key)s, recipients => %(recipients)s::text[],
                  channel => %(channel)s, at => %(at)s, rrule => %(rrule)s, tz => %(tz)s,
                  local_start => %(local_start)s, gap => %(gap)s, overlap => %(overlap)s,
                  destination => %(destination)s, kind => %(kind)s,
                  payload => %(payload)s::jsonb, revision => %(revision)s,
                  first_at => %(first_at)s, expanded => %(expanded)s, now => %(now)s);

-- name: api_reschedule
select schedule_id, schedule_key, created, recipient, delivery_key, due_at, state
from reschedule_for(tenant => %(tenant)s, key => %(key)s, at => %(at)s, rrule => %(rrule)s,
                    tz => %(tz)s, local_start => %(local_start)s, gap => %(gap)s,
                    overlap => %(overlap)s, revision => %(revision)s,
                    first_at => %(first_at)s, expanded => %(expanded)s, now => %(now)s);

-- name: api_cancel
select cancel_for(tenant => %(tenant)s, key => %(key)s, now => %(now)s) as suppressed;

-- name: api_pause
select hold_schedule(tenant => %(tenant)s, key => %(key)s, paused => %(paused)s,
                     now => %(now)s) as changed;

-- name: api_trigger
select recipient, delivery_key, due_at, state
from trigger_for(tenant => %(tenant)s, key => %(key)s, now => %(now)s);

-- name: api_backfill
select recipient, delivery_key, occurrence_at, due_at, state
from backfill_for(tenant => %(tenant)s, key => %(key)s,
                  occurrences => %(occurrences)s::timestamptz[], now => %(now)s);

-- name: api_opt_out
select opt_out_for(tenant => %(tenant)s, recipient => %(recipient)s, channel => %(channel)s,
                   now => %(now)s) as added;

-- name: api_opt_in
select opt_in_for(tenant => %(tenant)s, recipient => %(recipient)s,
                  channel => %(channel)s) as removed;

-- name: deliveries_materialise
-- One statement for any number of recipients: a fan-out costs one round trip.
select id, recipient, delivery_key, occurrence_at, due_at, state
from materialise(tenant => %(tenant)s, schedule_id => %(schedule_id)s,
                 recipients => %(recipients)s::text[], occurrences => %(occurrences)s::timestamptz[],
                 states => %(states)s::text[], reasons => %(reasons)s::text[], now => %(now)s);

-- name: schedules_pending_first
-- CROSS-TENANT, bounded: recurring schedules recorded through SQL whose first occurrence is
-- not materialised yet, read off their partial index and locked (the schedule first, as
-- everywhere); one another transaction holds waits for the next tick.
select id, tenant, rrule, tz, local_start, gap_policy, overlap_policy from schedules
where pending_first order by id limit %(limit)s
for no key update skip locked;

-- name: schedule_materialise_first
select materialise_first(tenant => %(tenant)s, schedule_id => %(id)s, first_at => %(first_at)s,
                         problem => %(problem)s, now => %(now)s) as deliveries;
-- name: schedule_get
select id, tenant, schedule_key, kind, channel, destination, payload, revision, generation, state,
       at, rrule, tz, local_start, gap_policy, overlap_policy, request_hash
from schedules where tenant = %(tenant)s and schedule_key = %(schedule_key)s;

-- name: schedule_share
-- The series advance reads the schedule under a share lock: a reschedule or cancel waits for
-- it, or it waits for them, and either way it reads what they committed.
select id from schedules where id = %(id)s and tenant = %(tenant)s for share;

-- name: schedule_share_unless_held
-- The scanner's series advance: as schedule_share, but a schedule another transaction holds
-- (an application's open reschedule or cancel) is skipped, not waited for: no row when it is
-- held, and its delivery keeps its flag for the next tick.
select id from schedules where id = %(id)s and tenant = %(tenant)s for share skip locked;
-- name: schedule_tenants_for_key
-- CROSS-TENANT: the command line resolves a bare key to its tenant; it lists, never changes.
select s.tenant, s.schedule_key from schedules s where s.schedule_key = %(key)s
union
select s.tenant, s.schedule_key from deliveries d join schedules s on s.id = d.schedule_id
where d.delivery_key = %(key)s;

-- name: schedule_end
select end_schedule(%(tenant)s, %(id)s, %(now)s);

-- name: deliveries_of_schedule_generation
select id, recipient, delivery_key, occurrence_at, due_at, state
from deliveries where schedule_id = %(schedule_id)s and tenant = %(tenant)s
  and generation = %(generation)s
order by recipient, occurrence_at;

-- name: series_state
-- The recipient's place in a recurring series: its last occurrence in the current generation
-- (deliveries a trigger or a backfill made are off the series, migration 0022).
select s.state, s.rrule, s.tz, s.local_start, s.gap_policy, s.overlap_policy, s.generation,
       s.channel, k.stale_after, r.destination,
       (select max(d.occurrence_at) from deliveries d
        where d.schedule_id = s.id and d.tenant = s.tenant and d.recipient = r.recipient
          and d.generation = s.generation and d.origin = 'series') as last_occurrence,
       exists (select 1 from deliveries d where d.schedule_id = s.id and d.tenant = s.tenant
               and d.recipient = r.recipient and d.state in ('scheduled', 'leased', 'retrying')
               and d.superseded is null and d.origin = 'series')
           as has_pending
from schedules s
join kinds k on k.name = s.kind
join schedule_recipients r on r.schedule_id = s.id and r.recipient = %(recipient)s
where s.id = %(schedule_id)s and s.tenant = %(tenant)s;
-- ---------------------------------------------------------------- scanner
-- name: scanner_turn_take
-- Scanners take turns for a whole tick (lease, publish, count): the in-flight budget is
-- counted and spent by one at a time. The turn is one row, taken when free or expired (its
-- holder died), so nothing lives in a session a pooler could break or pin; taken again by the
-- same holder (a retry after a connection was lost) it changes nothing. A turn held by a
-- live scanner is not waited for: that tick is skipped (another scanner taking or ending the
-- turn at this instant holds the row for a moment only; the lock timeout bounds that wait).
update scanner_turn
set holder = %(holder)s, held_until = %(until)s
where id = 1 and (holder is null or held_until <= %(now)s or holder = %(holder)s)
returning held_until;

-- name: scanner_turn_holder
select holder, held_until from scanner_turn where id = 1;

-- name: scanner_turn_end
-- Fenced on the token: a tick that outlived its turn never ends its successor's.
update scanner_turn set holder = null, held_until = null
where id = 1 and holder = %(holder)s;
-- name: lease_reclaim_expired
-- CROSS-TENANT: the scanner serves every tenant; bounded by the limit. A lease ends here when
-- it expired (a send in flight extends it to the send's deadline, so an expired lease has no
-- live send), or when it expires further ahead than a lease lasts and no send is in flight
-- (taken by a clock running ahead). Decided on the locked row itself:
--   a send was in flight  -> an outcome its holder recorded but could not settle stands;
--                            otherwise its attempt is closed as unknown, and it is `unknown` when
--                            the channel cannot deduplicate or the schedule moved on, `dead`
--                            when the attempt budget is spent, else due again (same key);
--   no send was tried     -> due again; if its message reached a consumer this counts toward
--                            the poison-message limit, which parks it `dead`.
with candidates as (  -- two ranges of the lease-expiry index, each bounded: no lease walk
    (select id from deliveries where state = 'leased' and lease_expires_at < %(now)s
     order by lease_expires_at limit %(limit)s)
    union all
    (select id from deliveries where state = 'leased'
       and lease_expires_at > %(now)s + make_interval(secs => %(lease_seconds)s)
     order by lease_expires_at desc limit %(limit)s)
), expired as (
    select d.id, d.channel, d.send_attempt, d.superseded, d.received, d.empty_receives,
           d.attempts_made - d.attempts_base as attempts_counted, d.attempts_made,
           k.max_attempts, (s.rrule is not null and d.origin = 'series') as recurring,
           a.outcome as recorded
    from deliveries d
    join schedules s on s.id = d.schedule_id
    join kinds k on k.name = s.kind
    left join attempts a on a.delivery_id = d.id and a.attempt_no = d.send_attempt
    where d.id in (select id from candidates) and (d.state = 'leased') is true
      and (d.lease_expires_at < %(now)s
           or (d.send_attempt is null
               and d.lease_expires_at > %(now)s + make_interval(secs => %(lease_seconds)s)))
    for update of d skip locked
), decided as (
    select e.*, case
        when e.recorded = 'sent' then 'sent'
        when e.recorded = 'permanent' then 'failed'
        when e.recorded = 'transient' and e.superseded is not null then 'suppressed'
        when e.recorded = 'transient' and e.attempts_counted >= e.max_attempts then 'dead'
        when e.recorded = 'transient' then 'retrying'
        when e.send_attempt is not null
             and (e.superseded is not null or not (e.channel = any(%(idempotent_channels)s)))
            then 'unknown'
        when e.send_attempt is not null and e.attempts_counted >= e.max_attempts then 'dead'
        when e.send_attempt is not null then 'retrying'
        when e.received and e.empty_receives + 1 >= %(max_empty_leases)s then 'dead'
        when e.attempts_made = 0 then 'scheduled'
        else 'retrying' end as next_state
    from expired e
), closed as (
    update attempts a set finished_at = %(now)s, outcome = 'unknown',
                          detail = 'the lease expired before the outcome was recorded'
    from decided e
    where a.delivery_id = e.id and a.attempt_no = e.send_attempt and a.finished_at is null
    returning a.delivery_id
)
update deliveries d set
    state = e.next_state,
    reason = case
        when e.recorded in ('sent', 'permanent', 'transient')
            then 'the send''s outcome (' || e.recorded || ') was recorded, and the lease '
                 || 'expired before the delivery was settled'
        when e.send_attempt is not null and e.superseded is not null
            then 'a send may have happened: its lease expired before the outcome was recorded; '
                 || 'not resent: ' || e.superseded
        when e.next_state = 'unknown'
            then 'a send may have happened: its lease expired before the outcome was recorded; '
                 || 'not resent: the channel cannot deduplicate'
        when e.send_attempt is not null and e.next_state = 'dead'
            then 'attempt budget spent (' || e.attempts_counted || ' of ' || e.max_attempts
                 || '); the last try stopped mid-send'
        when e.send_attempt is not null
            then 'lease expired after a send started; resent with the same key'
        when e.next_state = 'dead'
            then 'its message reached a consumer ' || (e.empty_receives + 1)
                 || ' times and failed each time before any send (a poison message)'
        when d.lease_expires_at >= %(now)s
            then 'lease expired further ahead than a lease lasts (taken by a clock running '
                 || 'ahead); due again'
        else 'lease expired before any send; due again' end,
    empty_receives = d.empty_receives
        + case when e.send_attempt is null and e.received then 1 else 0 end,
    advance_series = e.recurring and e.superseded is null
        and e.next_state in ('sent', 'failed', 'unknown', 'dead'),
    received = false, send_attempt = null, send_deadline = null, superseded = null,
    lease_token = null, lease_expires_at = null, updated_at = %(now)s
from decided e
where d.id = e.id
returning d.id, d.tenant, d.state, (e.send_attempt is not null) as tried;
-- name: tenants_with_due_work
-- CROSS-TENANT: how many tenants have due work (paused ones are not walked), to split a pass
-- fairly. The tenants come off the due entries' own index, one probe a tenant that has any
-- (a loose index scan): a tenant with nothing queued costs nothing, however many there are.
with recursive queued(tenant) as (  -- the tenants with due entries, one probe each
    (select q.tenant from due_queue q where q.token is null and not q.held order by q.tenant limit 1)
    union all
    select (select q.tenant from due_queue q where q.token is null and not q.held and q.tenant > t.tenant
            order by q.tenant limit 1)
    from queued t where t.tenant is not null
)
select count(*) as n from queued t
where t.tenant is not null
  and not (select p.paused from tenants p where p.id = t.tenant)
  and exists (select 1 from due_queue q
              where q.tenant = t.tenant and q.token is null and not q.held and q.due_at <= %(now)s);

-- name: due_unreadable
-- CROSS-TENANT, bounded by the limit: due entries whose instant no component can hold (before
-- year 1 or after 9999, 'infinity' included: psycopg, Python and JSON readers all refuse them),
-- written before the entry checks or by hand. Each such delivery fails alone (its `failed`
-- event written with it), with the reason
-- (which keeps the instant as written; the row then holds the nearest one every reader loads),
-- instead of failing every pass that leases it or every read that loads it. Two index ranges
-- per tenant with due entries (each tenant's lowest and highest entries), nothing else read:
-- the tenants' probe names the due index's whole predicate (`not held` too), or it reads the
-- whole due set.
with recursive queued(tenant) as (  -- the tenants with due entries, one probe each
    (select q.tenant from due_queue q where q.token is null and not q.held order by q.tenant limit 1)
    union all
    select (select q.tenant from due_queue q where q.token is null and not q.held and q.tenant > t.tenant
            order by q.tenant limit 1)
    from queued t where t.tenant is not null
), bad as (
    select o.id from queued t cross join lateral (
        (select q.id from due_queue q where q.tenant = t.tenant and q.token is null and not q.held
           and q.due_at < '0001-01-01 00:00:00+00'::timestamptz order by q.due_at limit %(limit)s)
        union all
        (select q.id from due_queue q where q.tenant = t.tenant and q.token is null and not q.held
           and q.due_at > '9999-12-31 23:59:59.999999+00'::timestamptz order by q.due_at desc limit %(limit)s)) o
    where t.tenant is not null
    limit %(limit)s
), parked as (
    select d.id from deliveries d where d.id = any(array(select id from bad))
      and d.state in ('scheduled', 'retrying')
    for update of d skip locked
), failed as (
    update deliveries d set state = 'failed',
        reason = 'its due instant cannot be read back: ' || d.due_at::text
                 || ' is outside the years 1-9999 (UTC) that every component holds',
        -- kept in the reason; the row holds the nearest instant every reader can load
        due_at = greatest(least(d.due_at, '9999-12-31 23:59:59.999999+00'::timestamptz),
                          '0001-01-01 00:00:00+00'::timestamptz),
        advance_series = false, updated_at = %(now)s
    where d.id = any(array(select id from parked))
    returning d.id, d.tenant
)  -- each one's event in the same statement: one statement, atomic alone
insert into delivery_events (tenant, delivery_id, at, actor, event, detail)
select f.tenant, f.id, %(now)s, 'scanner', 'failed', 'its due instant is outside the years 1-9999'
from failed f
returning delivery_id as id, tenant;

-- name: live_leases
-- The in-flight budget's other half: live leases, pending (not taken by a consumer yet) and
-- taken, each read off its expiry index (there are never more than the budget).
select (select count(*) from due_queue where token is not null)
       + (select count(*) from deliveries where state = 'leased') as n;

-- name: lease_due
-- CROSS-TENANT: the one statement that picks work across tenants. Fair: every tenant with due
-- work offers its `share` entries of highest priority (its kinds' 0-9), oldest first within a
-- priority, and the pass takes them round by round (each tenant's
-- first, then each tenant's second, ...), oldest first within a round, up to `batch`. One
-- tenant's fan-out cannot hold back another tenant's reminder due in the same minute. Reads at
-- most `share` index entries per tenant with due work (plus a probe of each of the ten
-- priorities it reaches, and entries another transaction holds,
-- an application's reschedule, which are skipped), and one probe per tenant with entries
-- queued (a tenant with none is never read, however many tenants there are); paused tenants
-- are never walked.
-- A lease writes a token and an expiry on the due entries (migration 0013): the delivery rows
-- are not written; a consumer takes the lease onto its row (deliveries_take_leases).
-- Each row also says how many tenants may have due work left after this pass (a tenant that
-- offered a full share, or more than the pass took): the next pass's share, without probing
-- every tenant again.
with recursive queued(tenant) as (  -- the tenants with due entries, one probe each
    (select q.tenant from due_queue q where q.token is null and not q.held order by q.tenant limit 1)
    union all
    select (select q.tenant from due_queue q where q.token is null and not q.held and q.tenant > t.tenant
            order by q.tenant limit 1)
    from queued t where t.tenant is not null
), offered as (
    select t.tenant, o.id, o.due_at,
           row_number() over (partition by t.tenant
                              order by o.priority desc, o.due_at, o.id) as round
    from queued t
    cross join lateral (  -- the tenant's share, highest priority first (0024): one range of
        -- due_queue_tenant_priority_due per priority, 9 down to 0, read until the share is full
        select q.id, q.due_at, q.priority
        from generate_series(9, 0, -1) as p(priority)
        cross join lateral (
            select q.id, q.due_at, q.priority from due_queue q
            where q.tenant = t.tenant and q.priority = p.priority and q.token is null
              and not q.held and q.due_at <= %(now)s
              and q.due_at >= '0001-01-01 00:00:00+00'::timestamptz  -- else due_unreadable's
            order by q.due_at, q.id
            limit %(share)s
            for update skip locked
        ) q
        limit %(share)s
    ) o
    where t.tenant is not null and not (select p.paused from tenants p where p.id = t.tenant)
), due as (
    select id, tenant from offered order by round, due_at, id limit %(batch)s
), left_over as (
    select count(*) as n from (
        select o.tenant from offered o group by o.tenant
        having count(*) >= %(share)s
            or count(*) > (select count(*) from due where due.tenant = o.tenant)) t
)
update due_queue q set token = gen_random_uuid(),
                       expires_at = %(now)s + make_interval(secs => %(lease_seconds)s)
where q.id = any(array(select id from due))  -- by key, whatever the table's statistics say
returning q.id, q.token as lease_token, q.due_at, (select n from left_over) as tenants_left;
-- name: pending_release
-- The scanner hands back pending leases whose message never reached the queue, fenced on the
-- token: each is a due entry again. A lease another transaction holds (a trigger ending it
-- for an application's change, a reclaim) is skipped: that transaction ends it.
with ours as (  -- by key, each checked against its token (a hashed lookup, not a join)
    select q.id from due_queue q
    where q.id = any(%(ids)s::bigint[])
      and ((q.id, q.token) in (select * from unnest(%(ids)s::bigint[], %(tokens)s::uuid[])))
          is true
    for update of q skip locked
)
update due_queue q set token = null, expires_at = null
where q.id = any(array(select id from ours));
-- name: pending_leases_reclaim
-- CROSS-TENANT, bounded by the limit: pending leases no consumer took before they expired (or
-- that expire further ahead than a lease lasts: taken by a clock running ahead) are due
-- entries again. A pending lease never has a send in flight, and no consumer received its
-- message (a consumer takes the lease first thing), so it is due again as it was.
-- Two ranges of the expiry index, each bounded, each row locked as it is read (a lease that
-- changed meanwhile is read again, and left if it no longer qualifies).
with expired as (
    select id from due_queue where token is not null and expires_at < %(now)s
    order by expires_at limit %(limit)s
    for update skip locked
), ahead as (
    select id from due_queue where token is not null
      and expires_at > %(now)s + make_interval(secs => %(lease_seconds)s)
    order by expires_at desc limit %(limit)s
    for update skip locked
)
update due_queue q set token = null, expires_at = null
where q.id = any(array(select id from expired union all select id from ahead))
returning q.id, q.tenant, q.state, false as tried;
-- name: lease_release
-- Fenced: hands back leases a consumer took and may not use yet (a paused tenant, not due by
-- its clock), or that the redrive hands back; never one with a send in flight. (The scanner's
-- pending leases go back with pending_release.)
-- CROSS-TENANT by (id, token): only the holder of those leases knows the tokens.
-- A row another transaction holds (an application cancelling or rescheduling that very
-- delivery) is skipped, not waited for, so one held row never fails the rest: that transaction
-- ends the lease or leaves it, and a lease left expires and is reclaimed. The consumer and the
-- redrive release rows they have locked themselves, which are never skipped.
with ours as (
    select d.id from unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) as r(id, token)
    join deliveries d on d.id = r.id and d.lease_token = r.token
    where (d.state = 'leased') is true and d.send_attempt is null
    for update of d skip locked
)
update deliveries d set
    state = case when d.attempts_made = 0 then 'scheduled' else 'retrying' end,
    reason = %(reason)s, lease_token = null, lease_expires_at = null, updated_at = %(now)s,
    received = false, leases = greatest(d.leases - 1, 0)  -- handed back unused: it does not count
from ours where d.id = ours.id
returning d.id;

-- name: retention_purge
-- CROSS-TENANT, bounded by the limit: terminal deliveries older than their kind's retention go,
-- with their attempts and events (a delivery whose series has not advanced yet stays), and the
-- day's totals say how many. Each kind's own range of the terminal-age index (which leads with
-- the kind, migration 0020), oldest first: rows a kind keeps are never read, whatever other
-- kinds keep. O(kinds + rows purged). The kind's range is an equality on the kind and a bound
-- on the last change as UTC wall time, the expression the terminal-age index holds (migration
-- 0034): both are index conditions that end the range (Postgres 17 does not end one on a row
-- comparison's later column), and no other index holds the expression, so none by updated_at
-- alone (deliveries_browse_updated, migration 0025) can serve it; the planner took that one
-- at a million rows and read every terminal row older than the shortest retention.
with old as (
    select o.id from kinds k cross join lateral (
        select d.id from deliveries d
        where d.kind = k.name
          and (d.updated_at at time zone 'UTC') < ((%(now)s - k.retention) at time zone 'UTC')
          and d.state in ('sent', 'failed', 'suppressed', 'stale', 'unknown', 'dead')
          and not d.advance_series
        order by d.kind, (d.updated_at at time zone 'UTC'), d.id
        limit %(limit)s
        for update of d skip locked) o
    limit %(limit)s
), gone_attempts as (
    delete from attempts a using old where a.delivery_id = old.id returning a.id
), gone_events as (
    delete from delivery_events e using old where e.delivery_id = old.id returning e.id
), gone as (
    delete from deliveries d using old where d.id = old.id returning d.id
), counted as (
    select (select count(*) from gone) as deliveries,
           (select count(*) from gone_attempts) as attempts,
           (select count(*) from gone_events) as events
), saved as (
    insert into retention_totals as t (day, deliveries, attempts, events)
    select (%(now)s at time zone 'UTC')::date, deliveries, attempts, events from counted
    where deliveries > 0
    on conflict (day) do update set deliveries = t.deliveries + excluded.deliveries,
                                    attempts = t.attempts + excluded.attempts,
                                    events = t.events + excluded.events
)
select deliveries, attempts, events from counted;

-- name: retention_removed
-- What retention removed: the last seven days and in all.
select coalesce(sum(deliveries) filter (where day > (%(now)s at time zone 'UTC')::date - 7), 0)
           as deliveries_7d,
       coalesce(sum(attempts) filter (where day > (%(now)s at time zone 'UTC')::date - 7), 0)
           as attempts_7d,
       coalesce(sum(events) filter (where day > (%(now)s at time zone 'UTC')::date - 7), 0)
           as events_7d,
       coalesce(sum(deliveries), 0) as deliveries_total
from retention_totals;

-- name: delivery_counts_fold
-- CROSS-TENANT, bounded by the limit: the counter rows backends wrote (shard = their pid) are
-- folded into shard 0, which only this statement writes. Rows a live transaction holds are
-- skipped (next tick); so this waits on no one, and a backend adding to a row being folded
-- waits only for this statement. Run on its own (autocommit), never inside a transaction.
with picked as (
    select tenant, kind, channel, state, shard from delivery_counts
    where shard <> 0
    order by tenant, kind, channel, state, shard
    limit %(limit)s
    for update skip locked
), moved as (
    delete from delivery_counts c using picked p
    where c.tenant = p.tenant and c.kind = p.kind and c.channel = p.channel
      and c.state = p.state and c.shard = p.shard
    returning c.tenant, c.kind, c.channel, c.state, c.n
), folded as (
    insert into delivery_counts as c (tenant, kind, channel, state, shard, n)
    select tenant, kind, channel, state, 0, sum(n) from moved
    group by tenant, kind, channel, state
    order by tenant, kind, channel, state
    on conflict (tenant, kind, channel, state, shard) do update set n = c.n + excluded.n
    returning 1
)
select (select count(*) from moved) as rows;

-- name: delivery_counts_drop_zeros
-- Groups with nothing left in them (retention removed their last rows), bounded by the limit.
delete from delivery_counts c using (
    select tenant, kind, channel, state from delivery_counts
    where shard = 0 and n = 0
    order by tenant, kind, channel, state
    limit %(limit)s
    for update skip locked) z
where c.tenant = z.tenant and c.kind = z.kind and c.channel = z.channel
  and c.state = z.state and c.shard = 0;

-- name: series_to_advance
-- CROSS-TENANT, bounded: terminal recurring deliveries whose next occurrence is not yet made.
select id, tenant, schedule_id, recipient, occurrence_at from deliveries
where advance_series order by updated_at, id limit %(limit)s;

-- name: series_advance_claim
update deliveries set advance_series = false
where id = %(id)s and tenant = %(tenant)s and advance_series
returning id;

-- name: series_advance_claim_unless_held
-- As series_advance_claim, but a delivery row another transaction holds is skipped (no row):
-- the flag stays for the next tick.
update deliveries set advance_series = false
where id = (select d.id from deliveries d
            where d.id = %(id)s and d.tenant = %(tenant)s and d.advance_series
            for no key update skip locked)
returning id;

-- name: series_advance_failed
-- A series that cannot advance parks with its reason on the delivery; the tick goes on.
update deliveries set advance_series = false,
    reason = coalesce(reason || '; ', '') || 'series not advanced: ' || %(error)s,
    updated_at = %(now)s
where id = %(id)s and tenant = %(tenant)s
returning id;
-- name: oldest_overdue
-- CROSS-TENANT: the system's lateness (paused tenants apart: their backlog is deliberate) and
-- a paused backlog's age: one index probe per tenant with due entries (tenants with none are
-- never read), the oldest entry of each. The overdue count stops at `cap` and counts the
-- tenants that are not paused: a paused backlog is never walked (its size is in the kept
-- counts). A leased delivery not sent yet is late too, its lease pending or taken.
with recursive queued(tenant) as (  -- the tenants with due entries, one probe each
    (select q.tenant from due_queue q where q.token is null and not q.held order by q.tenant limit 1)
    union all
    select (select q.tenant from due_queue q where q.token is null and not q.held and q.tenant > t.tenant
            order by q.tenant limit 1)
    from queued t where t.tenant is not null
), firsts as (  -- each tenant's oldest due entry, and whether it is paused
    select t.tenant, (select p.paused from tenants p where p.id = t.tenant) as paused, o.due_at
    from queued t cross join lateral (
        select q.due_at from due_queue q
        where q.tenant = t.tenant and q.token is null and not q.held and q.due_at <= %(now)s
          and q.due_at >= '0001-01-01 00:00:00+00'::timestamptz
        order by q.due_at, q.id limit 1) o
    where t.tenant is not null
)
select extract(epoch from %(now)s - least(
           (select min(f.due_at) from firsts f where not f.paused),
           (select m from (select min(due_at) as m from deliveries where state = 'leased') l
            where m <= %(now)s),
           (select m from (  -- pending leases: at most the in-flight budget
                select min(due_at) as m from due_queue
                where token is not null and expires_at is not null) l
            where m <= %(now)s))
       )::float8 as seconds,
       extract(epoch from %(now)s - (select min(f.due_at) from firsts f where f.paused)
       )::float8 as paused_seconds,
       -- paused schedules' due entries (held, migration 0022), apart: the oldest is one probe
       -- of the held index, the count stops at `cap`; a held backlog is never walked
       extract(epoch from %(now)s - (select q.due_at from due_queue q
                                     where q.held and q.due_at <= %(now)s
                                     order by q.due_at, q.id limit 1)
       )::float8 as held_seconds,
       (select count(*) from (select 1 from due_queue q where q.held and q.due_at <= %(now)s
                              order by q.due_at, q.id limit %(cap)s) h) as held,
       (select count(*) from (
           select 1 from firsts f cross join lateral (
               select 1 from due_queue q
               where q.tenant = f.tenant and q.token is null and not q.held and q.due_at <= %(now)s
                 and q.due_at >= '0001-01-01 00:00:00+00'::timestamptz
               limit %(cap)s) o
           where not f.paused
           limit %(cap)s) c) as overdue;
-- ---------------------------------------------------------------- consumer and redrive

-- name: deliveries_take_leases
-- First thing a consumer does with a batch, committed on its own: these leases' messages
-- reached a consumer. A pending lease (migration 0013) moves onto its delivery row, which
-- becomes `leased` with the lease's token and expiry; a lease already on its row (a message
-- received again) is marked received. A lease that then ends without a send counts as a
-- poison-message try. The row is locked before its pending lease (the order every writer
-- takes); rows another transaction holds are skipped (their messages fail alone and come
-- back). A pending lease another transaction is ending (a reclaim, a release, a trigger's
-- revocation) is waited for, briefly, and then gone: that message's lease is not current.
-- The deliveries' own `state` and `due_at` fence it too: every change of either ends the
-- pending lease in the same transaction. A pending lease that has expired by the consumer's
-- clock is not taken: its message is late, not a poison pill (taken, the reclaim would count
-- a failed receipt, and a consumer running a lease behind parked reminders dead unsent); the
-- scanner's reclaim makes it due again as it was.
with ours as (  -- rows found by key (`= any`), whatever the table's statistics say
    select d.id, d.state, w.token
    from deliveries d
    join unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) as w(id, token) on w.id = d.id
    where d.id = any(%(ids)s::bigint[])
      and (((d.state = 'leased') is true and d.lease_token = w.token and not d.received)
           or d.state in ('scheduled', 'retrying'))
    for update of d skip locked
), taken as (  -- by key, each checked against its token: a hashed lookup (`is true` keeps
               -- the planner from making it a join), never one comparison per pair
    delete from due_queue l
    where l.id = any(array(select id from ours where state in ('scheduled', 'retrying')))
      and ((l.id, l.token) in (select id, token from ours)) is true
      and l.expires_at > %(now)s
    returning l.id, l.token, l.expires_at
), marked as (  -- a lease already on its row: its message is received again
    update deliveries d set received = true
    from ours o where d.id = o.id and (o.state = 'leased') is true
)
update deliveries d set
    state = 'leased', received = true, lease_token = t.token, lease_expires_at = t.expires_at,
    leases = d.leases + 1, updated_at = %(now)s
from taken t where d.id = t.id;

-- name: deliveries_lock
-- The consumer and redrive lock the rows a batch names (in id order, skipping rows another
-- transaction holds: those messages fail alone and come back), then read them afresh.
select id from deliveries where id = any(%(ids)s::bigint[]) order by id for update skip locked;

-- name: recheck_load
-- CROSS-TENANT by id: ids come from messages the scanner published; one round trip per batch.
-- Read after the rows are locked, in a new statement: everything committed before the lock
-- was taken is seen, so an opt-out or cancel committed a moment earlier is never overridden.
select d.id, d.tenant, d.schedule_id, d.generation, d.recipient, d.channel, d.destination,
       d.delivery_key, d.occurrence_at, d.revision, d.due_at, d.state, d.reason,
       d.attempts_made, d.attempts_base, d.redrives, d.lease_token, d.lease_expires_at,
       d.send_attempt, d.send_deadline, d.received, d.empty_receives,
       s.state as schedule_state, s.revision as schedule_revision,
       -- as text: each row's payload is read on its own (consumer.read_payload), so one the
       -- service cannot read back parks that delivery, never the batch
       s.generation as schedule_generation, s.payload::text as payload, s.kind,
       (s.rrule is not null) as recurring,
       s.rrule, s.tz, s.local_start, s.gap_policy, s.overlap_policy,
       k.stale_after, k.max_attempts, k.backoff_base, k.backoff_cap, k.redrive_budget,
       t.paused as tenant_paused, s.paused as schedule_paused, d.origin,
       -- a backfilled occurrence is late on purpose: its window counts from when it was made
       case when d.origin = 'backfill' then d.created_at else d.occurrence_at end as stale_from,
       q.token as pending_token, q.expires_at as pending_expires_at,
       exists (select 1 from opt_outs o where o.tenant = d.tenant and o.recipient = d.recipient
               and o.channel = d.channel) as opted_out,
       e.id as endpoint_id, e.tenant as endpoint_tenant, e.secret as endpoint_secret,
       e.secret_ciphertext, e.secret_data_key, e.secret_key_id, e.next_secret_ciphertext,
       e.next_secret_data_key, e.next_secret_key_id, e.overlap_until, d.throttles,
       -- the bucket its send takes a token from (pacing.py), if its channel or endpoint is paced
       (select c.key from channel_rates c where c.key = case when d.channel = 'webhook'
            then 'webhook ' || d.destination else d.channel end) as pace_key
from deliveries d
join schedules s on s.id = d.schedule_id
join kinds k on k.name = s.kind
join tenants t on t.id = d.tenant
left join due_queue q on q.id = d.id  -- a pending lease, if one is waiting to be taken
left join lateral (
    select id, tenant, secret, secret_ciphertext, secret_data_key, secret_key_id,
           next_secret_ciphertext, next_secret_data_key, next_secret_key_id, overlap_until
    from endpoints
    -- two probes of endpoints_tenant_url (the tenant's own, then the shared one), never a
    -- scan of every tenant's endpoints
    where d.channel = 'webhook' and coalesce(tenant, '') = any(array[d.tenant, ''])
      and url = d.destination
    order by tenant nulls last limit 1
) e on true
where d.id = any(%(ids)s::bigint[]);
-- name: attempts_start
-- Fenced, for a whole batch in one statement: appends each attempt only while its lease is ours
-- and no send is in flight, and puts the send in flight on the row with its deadline (the lease
-- lasts at least that long). Committed before any send. A tenant or a schedule paused since
-- the re-check read its row (a pause locks no delivery) starts nothing: the pause is decided
-- here, in the statement that starts the attempt, as the row locks decide an opt-out.
with started as (
    update deliveries d set attempts_made = d.attempts_made + 1,
                            send_attempt = d.attempts_made + 1, send_deadline = r.deadline,
                            lease_expires_at = greatest(d.lease_expires_at, r.deadline),
                            updated_at = %(now)s
    from unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(deadlines)s::timestamptz[])
        as r(id, token, deadline)
    where d.id = r.id and d.lease_token = r.token
      and (d.state = 'leased') is true and d.send_attempt is null
      and not exists (select 1 from tenants t where t.id = d.tenant and t.paused)
      and not exists (select 1 from schedules s where s.id = d.schedule_id and s.paused)
    returning d.id, d.tenant, d.attempts_made, d.lease_token
)
insert into attempts (tenant, delivery_id, attempt_no, lease_token, started_at)
select tenant, id, attempts_made, lease_token, %(now)s from started
returning id, delivery_id, attempt_no;
-- name: pace_take
-- The tokens a batch's sends take (pacing.py): for each paced key, from one shard of its bucket
-- this transaction can lock at once (SKIP LOCKED: a consumer never waits behind another; one
-- that finds every shard taken gets no token), the one holding the most tokens first (spin
-- breaks ties): a send that found none is booked a slot at the back, so tokens left in a shard
-- no send chose would fill it and overflow, and the bucket would give less than its rate. A shard refills at the rate in force (the set
-- rate, lowered by throttles: AIMD) divided by the shards, up to burst / shards. The sends it
-- cannot cover are given its next free slots (slot_base + k / shard_rate), where their
-- deliveries are released due. Held only until the consumer's start transaction commits.
with wanted as (
    select w.key, w.n, c.shards, c.burst / c.shards as cap,
           c.rate * least(1.0, c.factor + greatest(0, coalesce(
               extract(epoch from (%(now)s - c.throttled_at))::float8, 0)) * %(recover)s)
               / c.shards as shard_rate
    from unnest(%(keys)s::text[], %(counts)s::integer[]) as w(key, n)
    join channel_rates c on c.key = w.key
), picked as (
    select w.*, s.shard, s.tokens, s.refilled_at, s.reserved_until
    from wanted w
    left join lateral (
        select r.shard, r.tokens, r.refilled_at, r.reserved_until from rate_shards r
        where r.key = w.key
        order by least(w.cap, r.tokens + greatest(0, extract(epoch from
                     (%(now)s - r.refilled_at))::float8) * w.shard_rate) desc,
                 mod(r.shard + %(spin)s, w.shards)
        limit 1 for update of r skip locked
    ) s on true
), took as (
    select p.key, p.shard, p.n, p.shard_rate, greatest(p.reserved_until, %(now)s) as slot_base,
           least(p.cap, p.tokens + greatest(0, extract(epoch from
               (%(now)s - p.refilled_at))::float8) * p.shard_rate) as avail
    from picked p where p.shard is not null
), granted as (
    select t.*, least(t.n, floor(t.avail + 1e-9)::integer) as taken from took t
), spent as (
    update rate_shards r set
        tokens = g.avail - g.taken, refilled_at = greatest(r.refilled_at, %(now)s),
        reserved_until = g.slot_base + make_interval(secs => (g.n - g.taken) / g.shard_rate),
        used_before = case when date_trunc('minute', %(now)s) <= r.minute then r.used_before
                           when date_trunc('minute', %(now)s) = r.minute + interval '1 minute'
                           then r.used else 0 end,
        used = case when date_trunc('minute', %(now)s) <= r.minute then r.used + g.taken
                    else g.taken end,
        minute = greatest(r.minute, date_trunc('minute', %(now)s))
    from granted g where r.key = g.key and r.shard = g.shard
)
select p.key, p.shard, coalesce(g.taken, 0) as taken, coalesce(g.slot_base, %(now)s) as slot_base,
       p.shard_rate
from picked p left join granted g on g.key = p.key;
-- name: lease_release_paced
-- Fenced as lease_release: hands back leases whose sends found no token, each due again at its
-- bucket's slot. No attempt was started, so none is spent, and the lease does not count.
with ours as (
    select d.id, r.due_at, r.reason
    from unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(due_ats)s::timestamptz[],
                %(reasons)s::text[]) as r(id, token, due_at, reason)
    join deliveries d on d.id = r.id and d.lease_token = r.token
    where (d.state = 'leased') is true and d.send_attempt is null
    for update of d skip locked
)
update deliveries d set
    state = case when d.attempts_made = 0 then 'scheduled' else 'retrying' end,
    reason = ours.reason, due_at = ours.due_at, lease_token = null, lease_expires_at = null,
    updated_at = %(now)s, received = false, leases = greatest(d.leases - 1, 0)
from ours where d.id = ours.id
returning d.id;
-- name: deliveries_throttled
-- Before their outcomes are settled, fenced as deliveries_settle: sends the provider throttled
-- give their attempt back to the kind's budget (attempts_base), counted in throttles.
update deliveries d set attempts_base = d.attempts_base + 1, throttles = d.throttles + 1
from unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(attempt_nos)s::integer[])
    as r(id, token, attempt_no)
where d.id = r.id and d.lease_token = r.token
  and (d.state = 'leased') is true and d.send_attempt is not distinct from r.attempt_no;
-- name: pace_throttled
-- AIMD's decrease: a provider throttled sends of these keys, so each bucket's rate in force is
-- halved (down to a floor), at most once a second whatever the number of throttled sends; it
-- climbs back by recover_per_second from then on (pace_take). A row another consumer is
-- lowering at the same moment is skipped: that consumer halves it.
with lowering as (
    select key from channel_rates
    where key = any(%(keys)s::text[])
      and (throttled_at is null or throttled_at <= %(now)s - interval '1 second')
    for update skip locked
)
update channel_rates c set
    factor = greatest(%(floor)s, 0.5 * least(1.0, c.factor + greatest(0, coalesce(
        extract(epoch from (%(now)s - c.throttled_at))::float8, 0)) * %(recover)s)),
    throttled_at = %(now)s, throttles = c.throttles + 1
from lowering l where c.key = l.key
returning c.key, c.factor;
-- name: rate_set
-- A key's rate and burst: an operator's (source 'set') always; the SES account's default
-- (source 'account') only where no operator set one, and only when it changed. Returns the row
-- when it changed (its bucket is then reset with rate_shards_reset).
insert into channel_rates (key, rate, burst, shards, source, updated_at)
values (%(key)s, %(rate)s, %(burst)s, %(shards)s, %(source)s, %(now)s)
on conflict (key) do update set
    rate = excluded.rate, burst = excluded.burst, shards = excluded.shards,
    source = excluded.source, factor = 1, throttled_at = null, updated_at = excluded.updated_at
where excluded.source = 'set'
   or (channel_rates.source = 'account' and (channel_rates.rate, channel_rates.burst)
       is distinct from (excluded.rate, excluded.burst))
returning key, rate, burst, shards, source, updated_at;
-- name: rate_shards_reset
-- A key's bucket after its rate changed: its shards full, their slots free (usage kept).
with extra as (delete from rate_shards where key = %(key)s and shard >= %(shards)s)
insert into rate_shards (key, shard, tokens, refilled_at, reserved_until, minute)
select %(key)s, g, %(burst)s::float8 / %(shards)s, %(now)s, %(now)s, date_trunc('minute', %(now)s)
from generate_series(0, %(shards)s - 1) as g
on conflict (key, shard) do update set tokens = excluded.tokens,
    refilled_at = excluded.refilled_at, reserved_until = excluded.reserved_until;
-- name: rate_remove
delete from channel_rates where key = %(key)s returning key;
-- name: rates_list
-- Every paced key, its rate in force, and the sends its bucket granted in the previous whole
-- minute and so far in this one.
select c.key, c.rate, c.burst, c.shards, c.source, c.throttles, c.throttled_at, c.updated_at,
       c.rate * least(1.0, c.factor + greatest(0, coalesce(
           extract(epoch from (%(now)s - c.throttled_at))::float8, 0)) * %(recover)s)
           as rate_now,
       coalesce(sum(case when s.minute = date_trunc('minute', %(now)s) then s.used_before
                         when s.minute = date_trunc('minute', %(now)s) - interval '1 minute'
                         then s.used else 0 end), 0)::bigint as used_last_minute,
       coalesce(sum(case when s.minute = date_trunc('minute', %(now)s) then s.used else 0 end),
                0)::bigint as used_this_minute
from channel_rates c left join rate_shards s on s.key = c.key
group by c.key order by c.key;
-- name: status_pacing
-- Each paced key as `status` and the console's overview show it, off its own rows (no
-- delivery read), for a bounded set of keys however many endpoints are paced: the channels,
-- then at most %(limit)s endpoints, those throttled in the last hour first (from
-- channel_rates_throttled, the latest first), then by URL (the primary key), each range read
-- to one more (more_endpoints: there are others). For each: the rate in force, the sends
-- waiting for a token (the slots its shards booked ahead of now for deliveries released for
-- want of one: (reserved_until - now) x the shard's rate, summed) and when the last is booked,
-- and its provider throttles in the last hour (the sends throttled, counted by the minute in
-- rate_throttles: this minute and the 59 before, at most 60 x 8 rows) with the latest one's
-- instant. Each key's row is read once, by the range that found it.
with candidates as (
    (select c.*, true as recent from channel_rates c
     where c.throttled_at is not null and c.throttled_at > %(now)s - interval '1 hour'
       and c.key <> all(array['email', 'sms'])
     order by c.throttled_at desc, c.key limit %(limit)s + 1)
    union all
    (select c.*, false from channel_rates c where c.key <> all(array['email', 'sms'])
     order by c.key limit %(limit)s + 1)
), endpoints as (
    select distinct on (key) * from candidates order by key, recent desc
), shown as (
    select c.key, c.rate, c.burst, c.shards, c.factor, c.throttled_at, c.throttles, 0 as place
    from channel_rates c where c.key = any(array['email', 'sms'])
    union all
    (select e.key, e.rate, e.burst, e.shards, e.factor, e.throttled_at, e.throttles, 1
     from endpoints e
     order by e.recent desc, case when e.recent then e.throttled_at end desc, e.key
     limit %(limit)s)
)
select c.key, c.rate, c.burst, c.throttles as halvings, c.throttled_at, f.rate_now,
       w.waiting, w.booked_until, coalesce(t.throttles, 0)::bigint as throttles_last_hour,
       t.last_at as last_throttled_at,
       (select count(*) from endpoints) > %(limit)s as more_endpoints
from shown c
cross join lateral (select c.rate * least(1.0, c.factor + greatest(0, coalesce(
    extract(epoch from (%(now)s - c.throttled_at))::float8, 0)) * %(recover)s) as rate_now) f
cross join lateral (
    select coalesce(round(sum(greatest(0, extract(epoch from (s.reserved_until - %(now)s))
                                          ::float8) * f.rate_now / c.shards)), 0)::bigint
               as waiting,
           max(s.reserved_until) filter (where s.reserved_until > %(now)s) as booked_until
    from rate_shards s where s.key = c.key
) w
cross join lateral (
    select sum(r.throttles) as throttles, max(r.last_at) as last_at from rate_throttles r
    where r.key = c.key and r.minute >= date_trunc('minute', %(now)s) - interval '59 minutes'
      and r.minute <= %(now)s and r.last_at <= %(now)s
) t
order by c.place,
         case when c.throttled_at > %(now)s - interval '1 hour' then c.throttled_at end
             desc nulls last, c.key;
-- name: pace_throttles_count
-- The sends a provider throttled, by paced key, added to this minute's row of one slot; and
-- rows past a day removed, a hundred at most, none another transaction holds.
with gone as (
    delete from rate_throttles where ctid in (
        select ctid from rate_throttles
        where key = any(%(keys)s::text[]) and minute < %(now)s - interval '1 day'
        limit 100 for update skip locked)
)
insert into rate_throttles (key, minute, slot, throttles, last_at)
select w.key, date_trunc('minute', %(now)s), %(slot)s, w.n, %(now)s
from unnest(%(keys)s::text[], %(counts)s::integer[]) as w(key, n)
on conflict (key, minute, slot) do update set
    throttles = rate_throttles.throttles + excluded.throttles,
    last_at = greatest(rate_throttles.last_at, excluded.last_at);
-- name: deliveries_paused
-- Why attempts_start started nothing for these rows (a tenant or a schedule paused since the
-- re-check): CROSS-TENANT by ids the caller holds leases on.
select d.id, t.paused as tenant_paused, s.paused as schedule_paused
from deliveries d join tenants t on t.id = d.tenant join schedules s on s.id = d.schedule_id
where d.id = any(%(ids)s::bigint[]);
-- name: attempts_finish
-- The outcomes of a batch's sends, in one statement; an attempt already closed stays as it is.
update attempts a set finished_at = %(now)s, outcome = r.outcome, status_code = r.status_code,
                      detail = r.detail, retry_after = r.retry_after
from unnest(%(attempt_ids)s::bigint[], %(outcomes)s::text[], %(status_codes)s::integer[],
            %(details)s::text[], %(retry_afters)s::timestamptz[])
    as r(id, outcome, status_code, detail, retry_after)
where a.id = r.id and a.finished_at is null;
-- name: deliveries_settle
-- Fenced, one statement for any number of deliveries: each on its lease token and on the send
-- in flight (none before a send, this one after it). Superseded while sending: what the send
-- did (sent, failed, unknown) stands, anything else becomes suppressed. A terminal recurring
-- delivery is flagged for its series' next occurrence.
update deliveries d set
    state = case when d.superseded is null or r.state in ('sent', 'failed', 'unknown')
                 then r.state else 'suppressed' end,
    reason = case when d.superseded is null then r.reason
                  else r.reason || '; ' || d.superseded || ' while the send was in flight' end,
    due_at = case when d.superseded is null then coalesce(r.due_at, d.due_at) else d.due_at end,
    advance_series = d.superseded is null and d.origin = 'series'
        and r.state not in ('scheduled', 'leased', 'retrying')
        and exists (select 1 from schedules s where s.id = d.schedule_id and s.rrule is not null),
    superseded = null, send_attempt = null, send_deadline = null, received = false,
    lease_token = null, lease_expires_at = null, updated_at = %(now)s
from unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(states)s::text[], %(reasons)s::text[],
            %(due_ats)s::timestamptz[], %(attempt_nos)s::integer[])
    as r(id, token, state, reason, due_at, attempt_no)
where d.id = r.id and d.lease_token = r.token
  and (d.state = 'leased') is true and d.send_attempt is not distinct from r.attempt_no
returning d.id, d.state;
-- name: delivery_replay
-- Redrive: fenced on the lease the dead-lettered message was about (or on an expired one) and
-- on no send in flight, in this one statement. Its message reached consumers and failed
-- before any send, so it counts toward the poison-message limit.
update deliveries d set
    state = case when d.received and d.empty_receives + 1 >= %(max_empty_leases)s then 'dead'
                 when d.attempts_made = 0 then 'scheduled' else 'retrying' end,
    reason = case when d.received and d.empty_receives + 1 >= %(max_empty_leases)s
                  then 'its message reached a consumer ' || (d.empty_receives + 1)
                       || ' times and failed each time before any send (a poison message)'
                  else %(reason)s end,
    empty_receives = d.empty_receives + case when d.received then 1 else 0 end,
    advance_series = d.received and d.empty_receives + 1 >= %(max_empty_leases)s
        and d.origin = 'series' and exists (select 1 from schedules s where s.id = d.schedule_id and s.rrule is not null),
    received = false, due_at = %(now)s, redrives = d.redrives + 1,
    lease_token = null, lease_expires_at = null, updated_at = %(now)s
where d.id = %(id)s and d.tenant = %(tenant)s and d.state = 'leased' and d.send_attempt is null
  and (d.lease_token = %(token)s or d.lease_expires_at <= %(now)s)
returning d.id, d.state;
-- name: event_add
insert into delivery_events (tenant, delivery_id, at, actor, event, detail)
values (%(tenant)s, %(id)s, %(now)s, %(actor)s, %(event)s, %(detail)s);

-- name: events_add
-- A batch's events in one statement.
insert into delivery_events (tenant, delivery_id, at, actor, event, detail)
select r.tenant, r.id, %(now)s, %(actor)s, r.event, r.detail
from unnest(%(tenants)s::text[], %(ids)s::bigint[], %(events)s::text[], %(details)s::text[])
    as r(tenant, id, event, detail);
-- ---------------------------------------------------------------- operator reads

-- name: status_breakdown
-- CROSS-TENANT unless a tenant is given: the operator's view, counts by tenant, kind, channel
-- and state (`status` and the console's overview both read it). Read off `delivery_counts`,
-- which the deliveries' own writes keep (migration 0011): O(groups × backends that wrote since
-- the scanner last folded them), whatever the table holds. Exact at this statement's snapshot.
select tenant, kind, channel, state, sum(n)::bigint as n
from delivery_counts
where (%(tenant)s::text is null or tenant = %(tenant)s)
group by tenant, kind, channel, state
having sum(n) <> 0
order by tenant, kind, channel, state;

-- name: next_due_work
-- CROSS-TENANT: when the next due entry no lease holds falls due (paused tenants apart): a
-- scanner tick whose pass found nothing due waits for it when it falls inside the tick. A probe
-- a tenant with entries queued, as lease_due reads them.
with recursive queued(tenant) as (  -- the tenants with due entries, one probe each
    (select q.tenant from due_queue q where q.token is null and not q.held order by q.tenant limit 1)
    union all
    select (select q.tenant from due_queue q where q.token is null and not q.held and q.tenant > t.tenant
            order by q.tenant limit 1)
    from queued t where t.tenant is not null
)
select min(o.due_at) as at from queued t cross join lateral (
    select q.due_at from due_queue q where q.tenant = t.tenant and q.token is null and not q.held
      and q.due_at between '0001-01-01 00:00:00+00'::timestamptz and '9999-12-31 23:59:59.999999+00'::timestamptz
    order by q.due_at, q.id limit 1) o
where t.tenant is not null and not (select p.paused from tenants p where p.id = t.tenant);

-- name: next_due
-- CROSS-TENANT: when the next piece of work falls due (the demo's simulated clock jumps there).
-- A leased delivery's next event is its lease's expiry, pending or taken.
with recursive queued(tenant) as (  -- the tenants with due entries, one probe each
    (select q.tenant from due_queue q where q.token is null and not q.held order by q.tenant limit 1)
    union all
    select (select q.tenant from due_queue q where q.token is null and not q.held and q.tenant > t.tenant
            order by q.tenant limit 1)
    from queued t where t.tenant is not null
)
select least((select min(o.due_at) from queued t cross join lateral (  -- a probe a tenant
                  select q.due_at from due_queue q where q.tenant = t.tenant and q.token is null and not q.held
                    and q.due_at between '0001-01-01 00:00:00+00'::timestamptz and '9999-12-31 23:59:59.999999+00'::timestamptz
                  order by q.due_at, q.id limit 1) o where t.tenant is not null),
             (select min(expires_at) from due_queue where token is not null),
             (select min(lease_expires_at) from deliveries where state = 'leased')) as at;

-- name: status_expired_leases
-- Leases past their expiry (taken or pending; the next tick reclaims them), and the pending
-- leases: handed to the queue, not taken by a consumer yet (at most the in-flight budget).
select (select count(*) from deliveries
        where state = 'leased' and lease_expires_at < %(now)s
          and (%(tenant)s::text is null or tenant = %(tenant)s))
       + (select count(*) from due_queue
          where token is not null and expires_at < %(now)s
            and (%(tenant)s::text is null or tenant = %(tenant)s)) as n,
       (select count(*) from due_queue
        where token is not null
          and (%(tenant)s::text is null or tenant = %(tenant)s)) as pending;

-- name: status_oldest_overdue
-- The oldest pending delivery already due (paused tenants included; a paused schedule's held
-- ones apart: `status_paused_schedules`), in probes: of the due
-- index (every tenant) or of the tenant's due entries, and of the live leases (at most the
-- in-flight budget). Never a walk of a backlog.
select extract(epoch from %(now)s - least(
           (select d.due_at from deliveries d
            where d.state in ('scheduled', 'retrying') and d.due_at <= %(now)s
              and d.due_at >= '0001-01-01 00:00:00+00'::timestamptz and %(tenant)s::text is null
              and not exists (select 1 from due_queue q where q.id = d.id and q.held)
            order by d.due_at, d.id limit 1),
           (select q.due_at from due_queue q
            where q.tenant = %(tenant)s and q.token is null and not q.held and q.due_at <= %(now)s
              and q.due_at >= '0001-01-01 00:00:00+00'::timestamptz
            order by q.due_at, q.id limit 1),
           (select min(due_at) from due_queue
            where token is not null and due_at <= %(now)s
              and (%(tenant)s::text is null or tenant = %(tenant)s)),
           (select min(due_at) from deliveries
            where state = 'leased' and due_at <= %(now)s
              and (%(tenant)s::text is null or tenant = %(tenant)s))))::float8 as seconds;

-- name: delivery_by_key
select d.id, d.tenant, s.schedule_key, d.delivery_key, d.recipient, d.channel, d.destination,
       d.occurrence_at, d.due_at, d.revision, d.state, d.reason, d.attempts_made, d.redrives,
       d.lease_token, d.lease_expires_at, d.send_attempt, d.send_deadline, d.superseded,
       d.created_at, d.updated_at, s.kind, d.held,
       q.token as pending_lease_token, q.expires_at as pending_lease_expires_at
from deliveries d join schedules s on s.id = d.schedule_id
left join due_queue q on q.id = d.id
where d.delivery_key = %(key)s and d.tenant = %(tenant)s;

-- name: deliveries_of_schedule_first
-- `show SCHEDULE_KEY`: the schedule's first deliveries, at most %(limit)s (the caller asks for
-- one more than it shows, to say whether there are more).
select d.id, d.tenant, s.schedule_key, d.delivery_key, d.recipient, d.channel, d.destination,
       d.occurrence_at, d.due_at, d.revision, d.state, d.reason, d.attempts_made, d.redrives,
       d.lease_expires_at, d.created_at, d.updated_at, s.kind, d.held
from deliveries d join schedules s on s.id = d.schedule_id
where s.schedule_key = %(key)s and d.tenant = %(tenant)s
order by d.occurrence_at, d.recipient, d.id
limit %(limit)s;

-- name: pending_of_schedule_first
-- `cancel --dry-run`: the first %(limit)s deliveries a cancel would suppress, and (below) how
-- many it would.
select d.delivery_key, d.state, d.due_at
from deliveries d join schedules s on s.id = d.schedule_id
where s.schedule_key = %(key)s and d.tenant = %(tenant)s
  and d.state in ('scheduled', 'retrying', 'leased')
order by d.occurrence_at, d.recipient, d.id
limit %(limit)s;

-- name: pending_count_of_schedule
select count(*) as n
from deliveries d join schedules s on s.id = d.schedule_id
where s.schedule_key = %(key)s and d.tenant = %(tenant)s
  and d.state in ('scheduled', 'retrying', 'leased');

-- name: deliveries_of_schedule
select d.id, d.tenant, s.schedule_key, d.delivery_key, d.recipient, d.channel, d.destination,
       d.occurrence_at, d.due_at, d.revision, d.state, d.reason, d.attempts_made, d.redrives,
       d.lease_expires_at, d.created_at, d.updated_at, s.kind, d.held
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
-- Never one that is due or leased: those belong to the pipeline. A retry starts the budgets
-- afresh (attempts, poison-message tries and dead-letter replays) and is refused for a delivery its schedule has
-- moved on from (cancelled, rescheduled, new revision): it would only be suppressed.
update deliveries d set
    state = case when %(target)s <> 'retry' then %(target)s
                 when d.attempts_made = 0 then 'scheduled' else 'retrying' end,
    reason = %(reason)s,
    due_at = case when %(target)s = 'retry' then %(now)s else d.due_at end,
    attempts_base = case when %(target)s = 'retry' then d.attempts_made else d.attempts_base end,
    empty_receives = case when %(target)s = 'retry' then 0 else d.empty_receives end,
    redrives = case when %(target)s = 'retry' then 0 else d.redrives end,
    advance_series = case when %(target)s = 'retry' then false else d.advance_series end,
    updated_at = %(now)s
from schedules s
where d.delivery_key = %(key)s and d.tenant = %(tenant)s and s.id = d.schedule_id
  and d.state in ('unknown', 'failed', 'dead', 'stale', 'suppressed')
  and (%(target)s <> 'retry' or (s.state <> 'cancelled' and s.generation = d.generation
                                  and s.revision = d.revision))
returning d.id, d.tenant, d.state, d.reason;

-- name: delivery_schedule_moved_on
select s.state as schedule_state, s.generation <> d.generation as rescheduled,
       s.revision <> d.revision as revised
from deliveries d join schedules s on s.id = d.schedule_id
where d.delivery_key = %(key)s and d.tenant = %(tenant)s;
-- name: attempts_of_delivery
select attempt_no, started_at, finished_at, outcome, status_code, detail, retry_after
from attempts where delivery_id = %(id)s and tenant = %(tenant)s order by attempt_no;

-- name: events_of_delivery
select at, actor, who, event, detail from delivery_events
where delivery_id = %(id)s and tenant = %(tenant)s order by id limit 1000;

-- name: operator_event_add
-- An operator's action on one delivery: who and why.
insert into delivery_events (tenant, delivery_id, at, actor, who, event, detail)
values (%(tenant)s, %(id)s, %(now)s, 'operator', %(who)s, %(event)s, %(detail)s);

-- name: operator_action_add
insert into operator_actions (at, who, action, object, tenant, name, reason, via, detail)
values (%(now)s, %(who)s, %(action)s, %(object)s, %(tenant)s, %(name)s, %(reason)s, %(via)s,
        %(detail)s);

-- name: operator_actions_of_delivery
-- The latest operator actions on a delivery's tenant, endpoint, kind and schedule, oldest first.
select at, who, action, object, name, reason from (
    select * from operator_actions
    where (object, name) in (('tenant', %(tenant)s), ('endpoint', %(destination)s),
                             ('kind', %(kind)s), ('schedule', %(schedule_key)s))
      and (tenant is null or tenant = %(tenant)s)
    order by id desc limit %(limit)s
) latest order by id;

-- name: tenant_get
select id, paused, created_at, max_pending, schedules_per_minute from tenants
where id = %(tenant)s;

-- name: tenant_limits_set
-- A tenant's own limits (null: the deployment's default, tenant_defaults).
update tenants set max_pending = %(max_pending)s, schedules_per_minute = %(schedules_per_minute)s
where id = %(tenant)s;

-- name: tenant_defaults_get
select max_pending, schedules_per_minute, client_statement_timeout_ms from tenant_defaults;

-- name: tenant_defaults_set
update tenant_defaults set max_pending = %(max_pending)s,
                           schedules_per_minute = %(schedules_per_minute)s;

-- name: opt_out_get
select tenant, recipient, channel, created_at from opt_outs
where tenant = %(tenant)s and recipient = %(recipient)s and channel = %(channel)s;

-- name: tenant_names
-- CROSS-TENANT: the tenants' names, for a shell's completion, off the primary key.
select id as tenant from tenants order by id limit %(limit)s;

-- name: tenants_list
-- CROSS-TENANT: the operator's list. Pending counts are the kept counts (delivery_counts,
-- summed over its groups and shards: O(groups) a tenant), never the deliveries themselves, so
-- a paused tenant's backlog is not walked at every listing. Active schedules are counted up to
-- %(counted)s and one more (the entries of schedules_tenant_active, migration 0028): at most
-- that many index entries a tenant, whatever it has made or ended over the years.
select t.id as tenant, t.paused, t.created_at,
       (select coalesce(sum(c.n), 0) from delivery_counts c where c.tenant = t.id
          and c.state in ('scheduled', 'retrying', 'leased')) as pending,
       (select count(*) from (select from schedules s where s.tenant = t.id
          and s.state = 'active' limit %(counted)s + 1) a) as schedules,
       coalesce(t.max_pending, d.max_pending) as max_pending,
       coalesce(t.schedules_per_minute, d.schedules_per_minute) as schedules_per_minute,
       t.max_pending is null and t.schedules_per_minute is null as default_limits
from tenants t cross join tenant_defaults d order by t.id limit %(limit)s;

-- name: tenants_paused
select id as tenant from tenants where paused order by id;

-- name: status_paused_schedules
-- Paused schedules (migration 0023) and the pending deliveries they hold, counted apart from
-- every overdue figure (a hold is deliberate: nothing pages): the schedules off their own
-- index; the held entries (every pending delivery of a paused schedule has one, due or not)
-- off the held index, each count stopping at `cap`; the oldest held entry already due, one
-- probe.
select (select count(*) from schedules s
        where s.paused and (%(tenant)s::text is null or s.tenant = %(tenant)s)) as schedules,
       (select count(*) from (
            select 1 from due_queue q
            where q.held and (%(tenant)s::text is null or q.tenant = %(tenant)s)
            order by q.due_at, q.id limit %(cap)s) h) as held,
       (select count(*) from (
            select 1 from due_queue q
            where q.held and q.due_at <= %(now)s
              and (%(tenant)s::text is null or q.tenant = %(tenant)s)
            order by q.due_at, q.id limit %(cap)s) h) as held_due,
       extract(epoch from %(now)s - (
            select q.due_at from due_queue q
            where q.held and q.due_at <= %(now)s
              and (%(tenant)s::text is null or q.tenant = %(tenant)s)
            order by q.due_at, q.id limit 1))::float8 as oldest_held_due_seconds;

-- name: endpoints_list
-- Never the secret.
select id, tenant, url, created_at from endpoints
where (%(tenant)s::text is null or tenant = %(tenant)s or tenant is null)
order by url, tenant nulls first limit %(limit)s;

-- name: opt_outs_list
select tenant, recipient, channel, created_at from opt_outs
where (%(tenant)s::text is null or tenant = %(tenant)s)
  and (%(channel)s::text is null or channel = %(channel)s)
  and (%(recipient)s::text is null or recipient = %(recipient)s)
order by tenant, recipient, channel limit %(limit)s;

-- name: deliveries_filtered
-- CROSS-TENANT unless a tenant is given. Every filter optional; ordered by due time, then id,
-- so a page continues after (due_at, id) of the last row of the previous one. A kind or a
-- channel no delivery has (in the tenant and the state given) reads the kept counts and
-- nothing else: the guard is a constant condition, checked once before any row is read
-- (without it the page walked the due index to its end, filtering every row).
select d.id, d.tenant, s.schedule_key, d.delivery_key, d.recipient, d.channel, d.destination,
       d.occurrence_at, d.due_at, d.revision, d.state, d.reason, d.attempts_made, d.redrives,
       d.lease_expires_at, d.created_at, d.updated_at, s.kind
from deliveries d join schedules s on s.id = d.schedule_id
where (%(state)s::text is null or d.state = %(state)s)
  and (%(tenant)s::text is null or d.tenant = %(tenant)s)
  and (%(kind)s::text is null or d.kind || '' = %(kind)s)  -- the kind's browse index (0033)
  and (%(schedule)s::text is null or s.schedule_key = %(schedule)s)
  and (%(channel)s::text is null or d.channel = %(channel)s)
  and (%(recipient)s::text is null or d.recipient = %(recipient)s)
  and (%(due_from)s::timestamptz is null or d.due_at >= %(due_from)s)
  and (%(due_to)s::timestamptz is null or d.due_at < %(due_to)s)
  and (%(kind)s::text is null and %(channel)s::text is null
       or (select coalesce(sum(c.n), 0) from delivery_counts c  -- the kept counts: O(groups)
           where (%(tenant)s::text is null or c.tenant = %(tenant)s)
             and (%(kind)s::text is null or c.kind = %(kind)s)
             and (%(channel)s::text is null or c.channel = %(channel)s)
             and (%(state)s::text is null or c.state = %(state)s)) > 0)
  and (%(after_due)s::timestamptz is null or (d.due_at, d.id) > (%(after_due)s, %(after_id)s))
order by d.due_at, d.id
limit %(limit)s;

-- name: status_overdue_by
-- Lateness split by tenant, kind and channel, worst first. A tenant that is not paused: its
-- pending rows already due (its due entries, then each one's row), and every live lease (at
-- most the in-flight budget). A paused tenant's backlog is never read row by row: its groups'
-- pending counts come from the kept counts (`delivery_counts`: not yet due ones included) and
-- its oldest due entry is one index probe (`paused` says which rows are counted that way).
with recursive queued(tenant) as (  -- the tenants with due entries, one probe each
    (select q.tenant from due_queue q where q.token is null and not q.held order by q.tenant limit 1)
    union all
    select (select q.tenant from due_queue q where q.token is null and not q.held and q.tenant > t.tenant
            order by q.tenant limit 1)
    from queued t where t.tenant is not null
), firsts as (  -- each tenant with due entries: paused or not, its oldest
    select t.tenant, (select p.paused from tenants p where p.id = t.tenant) as paused,
           (select q.due_at from due_queue q
            where q.tenant = t.tenant and q.token is null and not q.held and q.due_at <= %(now)s
            order by q.due_at, q.id limit 1) as due_at
    from queued t
    where t.tenant is not null and (%(tenant)s::text is null or t.tenant = %(tenant)s)
), rows_due as (  -- each row by key, whatever the tables' statistics say
    select d.tenant, d.schedule_id, d.channel, d.due_at
    from firsts f
    cross join lateral (
        select d.tenant, d.schedule_id, d.channel, d.due_at from deliveries d
        where d.id = any(array(
            select q.id from due_queue q
            where q.tenant = f.tenant and q.token is null and not q.held and q.due_at <= %(now)s))) d
    where not f.paused and f.due_at is not null
    union all  -- pending leases
    select d.tenant, d.schedule_id, d.channel, d.due_at from deliveries d
    where d.id = any(array(
        select q.id from due_queue q
        where q.token is not null and q.due_at <= %(now)s
          and (%(tenant)s::text is null or q.tenant = %(tenant)s)))
    union all  -- leases a consumer took
    select d.tenant, d.schedule_id, d.channel, d.due_at from deliveries d
    where d.state = 'leased' and d.due_at <= %(now)s
      and (%(tenant)s::text is null or d.tenant = %(tenant)s)
), by_schedule as (
    select tenant, schedule_id, channel, count(*) as n, min(due_at) as due_at
    from rows_due group by tenant, schedule_id, channel
), counted as (  -- a schedule's kind, a probe each
    select b.tenant, (select s.kind from schedules s where s.id = b.schedule_id) as kind,
           b.channel, b.n, b.due_at, false as paused
    from by_schedule b
    union all
    select c.tenant, c.kind, c.channel, sum(c.n) as n, f.due_at, true
    from firsts f join delivery_counts c on c.tenant = f.tenant
    where f.paused and f.due_at is not null and c.state in ('scheduled', 'retrying')
    group by c.tenant, c.kind, c.channel, f.due_at
    having sum(c.n) > 0
)
select tenant, kind, channel, sum(n)::bigint as n, bool_or(paused) as paused,
       extract(epoch from %(now)s - min(due_at))::float8 as seconds
from counted
group by tenant, kind, channel
order by seconds desc, tenant, kind, channel
limit 50;

-- name: endpoint_by_url
-- Whether any tenant (or every tenant) has this URL registered.
select id from endpoints where url = %(url)s limit 1;

-- name: endpoint_remove
delete from endpoints where url = %(url)s and coalesce(tenant, '') = coalesce(%(tenant)s, '')
returning id, tenant, url;

-- name: endpoint_lock
-- One endpoint by URL and tenant (none: the shared one), locked for a change of its secrets.
select id, tenant, url, secret, secret_ciphertext, secret_data_key, secret_key_id,
       next_secret_ciphertext, next_secret_data_key, next_secret_key_id, overlap_until
from endpoints where url = %(url)s and coalesce(tenant, '') = coalesce(%(tenant)s, '')
for no key update;

-- name: endpoint_set_secrets
-- Both secrets of one locked endpoint, sealed; the plaintext column is cleared.
update endpoints set
    secret = null, secret_ciphertext = %(ciphertext)s, secret_data_key = %(data_key)s,
    secret_key_id = %(key_id)s, next_secret_ciphertext = %(next_ciphertext)s,
    next_secret_data_key = %(next_data_key)s, next_secret_key_id = %(next_key_id)s,
    overlap_until = %(overlap_until)s, updated_at = %(now)s
where id = %(id)s
returning id, tenant, url, overlap_until;

-- name: endpoints_plaintext_batch
-- Endpoints whose secret is still stored in plaintext (written before 0008 or by old code),
-- oldest first, locked; rows another transaction holds wait for the next batch.
select id, tenant, url, secret from endpoints where secret is not null
order by id limit %(limit)s for no key update skip locked;

-- name: endpoints_encrypt
-- Seal a batch's plaintext secrets, each only if its plaintext is still the one sealed.
update endpoints e set
    secret = null, secret_ciphertext = r.ciphertext, secret_data_key = r.data_key,
    secret_key_id = r.key_id, updated_at = %(now)s
from unnest(%(ids)s::bigint[], %(secrets)s::text[], %(ciphertexts)s::bytea[],
            %(data_keys)s::bytea[], %(key_ids)s::text[])
    as r(id, secret, ciphertext, data_key, key_id)
where e.id = r.id and e.id = any(%(ids)s::bigint[]) and e.secret = r.secret
returning e.id;

-- name: endpoints_plaintext_count
select count(*) as n from endpoints where secret is not null;

-- ---------------------------------------------------------------- operator reads (console)

-- name: oldest_overdue_delivery
-- The oldest pending delivery already due (paused tenants included; a paused schedule's held
-- ones apart, as they are in every overdue figure): one probe of the due index (past held
-- entries) and one of the leased-due index.
select tenant, delivery_key, due_at, state from (
    (select d.tenant, d.delivery_key, d.due_at, d.state, d.id from deliveries d
     where d.state in ('scheduled', 'retrying') and d.due_at <= %(now)s
       and (%(tenant)s::text is null or d.tenant = %(tenant)s)
       and not exists (select 1 from due_queue q where q.id = d.id and q.held)
     order by d.due_at, d.id limit 1)
    union all
    (select d.tenant, d.delivery_key, d.due_at, d.state, d.id from deliveries d
     where d.state = 'leased' and d.due_at <= %(now)s
       and (%(tenant)s::text is null or d.tenant = %(tenant)s)
     order by d.due_at limit 1)
) o order by due_at, id limit 1;

-- name: lateness_histogram
-- CROSS-TENANT unless a tenant is given. Sends in (since, now], counted by lateness (occurrence
-- due, or the instant its kind's send window and spread moved it to (0022), -> sent, in
-- seconds) into the buckets `bounds` (width_bucket: 0 below the first bound),
-- and one row (bucket null) with the count and p50/p95/p99: an index-only range of the
-- sent-at index over the window, never the whole table.
with sent as materialized (
    select extract(epoch from d.updated_at - coalesce(d.planned_at, d.occurrence_at))::float8
           as late
    from deliveries d
    where d.state = 'sent' and d.updated_at > %(since)s and d.updated_at <= %(now)s
      and (%(tenant)s::text is null or d.tenant = %(tenant)s)
)
select width_bucket(late, %(bounds)s::float8[]) as bucket, count(*) as n, null::float8[] as pcts
from sent group by 1
union all
select null, count(*), percentile_cont(array[0.5, 0.95, 0.99]) within group (order by late)
from sent;

-- name: throughput_by_minute
-- CROSS-TENANT unless a tenant is given. Attempts finished in [since, now], by the minute they
-- finished in, their delivery's channel and their outcome: an index range of
-- `attempts_finished` over the window (migration 0026) and one probe of each one's delivery,
-- never the whole ledger.
select date_trunc('minute', a.finished_at) as minute, d.channel, a.outcome, count(*) as n
from attempts a join deliveries d on d.id = a.delivery_id
where a.finished_at is not null and a.finished_at >= %(since)s and a.finished_at <= %(now)s
  and (%(tenant)s::text is null or a.tenant = %(tenant)s)
group by 1, 2, 3
order by 1, 2, 3;

-- name: deliveries_parked_page
-- CROSS-TENANT unless a tenant is given: the operator's worklist, parked deliveries (unknown,
-- dead, failed, stale) with every filter optional, by due time then id off the parked index,
-- so a page continues after (due_at, id) of the last row of the previous one.
select d.id, d.tenant, s.schedule_key, d.delivery_key, d.recipient, d.channel, d.destination,
       d.occurrence_at, d.due_at, d.revision, d.state, d.reason, d.attempts_made, d.redrives,
       d.lease_expires_at, d.created_at, d.updated_at, s.kind
from deliveries d join schedules s on s.id = d.schedule_id
where d.state in ('unknown', 'dead', 'failed', 'stale')
  and (%(state)s::text is null or d.state = %(state)s)
  and (%(tenant)s::text is null or d.tenant = %(tenant)s)
  and (%(kind)s::text is null or d.kind = %(kind)s)
  and (%(channel)s::text is null or d.channel = %(channel)s)
  and (%(recipient)s::text is null or d.recipient = %(recipient)s)
  and (%(due_from)s::timestamptz is null or d.due_at >= %(due_from)s)
  and (%(due_to)s::timestamptz is null or d.due_at < %(due_to)s)
  and (%(after_due)s::timestamptz is null or (d.due_at, d.id) > (%(after_due)s, %(after_id)s))
order by d.due_at, d.id
limit %(limit)s;

-- name: deliveries_parked_page_by_state
-- CROSS-TENANT unless a tenant is given: deliveries_parked_page's rows when a tenant or a state
-- is given, read as one range per parked state of deliveries_parked_tenant_state (a tenant's)
-- or deliveries_parked_state (every tenant's), each in (due_at, id) order from the cursor,
-- merged in that order and stopped at the page's end: O(page) whatever the tenant or the state
-- holds. A state given leaves one branch (the others fold to false and read nothing). Each
-- branch names its state literally: with `state in (...) and state = %(state)s` the planner
-- multiplied the two and expected a few rows, so it read every one of a tenant's dead rows off
-- deliveries_tenant_state and sorted them (767 buffers for a page at 1,000,000 rows).
(select d.id, d.tenant, s.schedule_key, d.delivery_key, d.recipient, d.channel,
        d.destination, d.occurrence_at, d.due_at, d.revision, d.state, d.reason,
        d.attempts_made, d.redrives, d.lease_expires_at, d.created_at, d.updated_at, s.kind
   from deliveries d join schedules s on s.id = d.schedule_id
   where d.state = 'unknown' and (%(state)s::text is null or %(state)s::text = 'unknown')
     and (%(tenant)s::text is null or d.tenant = %(tenant)s)
     and (%(kind)s::text is null or d.kind = %(kind)s)
     and (%(channel)s::text is null or d.channel = %(channel)s)
     and (%(recipient)s::text is null or d.recipient = %(recipient)s)
     and (%(due_from)s::timestamptz is null or d.due_at >= %(due_from)s)
     and (%(due_to)s::timestamptz is null or d.due_at < %(due_to)s)
     and (%(after_due)s::timestamptz is null
          or (d.due_at, d.id) > (%(after_due)s, %(after_id)s))
   order by d.due_at, d.id
   limit %(limit)s)
union all
(select d.id, d.tenant, s.schedule_key, d.delivery_key, d.recipient, d.channel,
        d.destination, d.occurrence_at, d.due_at, d.revision, d.state, d.reason,
        d.attempts_made, d.redrives, d.lease_expires_at, d.created_at, d.updated_at, s.kind
   from deliveries d join schedules s on s.id = d.schedule_id
   where d.state = 'dead' and (%(state)s::text is null or %(state)s::text = 'dead')
     and (%(tenant)s::text is null or d.tenant = %(tenant)s)
     and (%(kind)s::text is null or d.kind = %(kind)s)
     and (%(channel)s::text is null or d.channel = %(channel)s)
     and (%(recipient)s::text is null or d.recipient = %(recipient)s)
     and (%(due_from)s::timestamptz is null or d.due_at >= %(due_from)s)
     and (%(due_to)s::timestamptz is null or d.due_at < %(due_to)s)
     and (%(after_due)s::timestamptz is null
          or (d.due_at, d.id) > (%(after_due)s, %(after_id)s))
   order by d.due_at, d.id
   limit %(limit)s)
union all
(select d.id, d.tenant, s.schedule_key, d.delivery_key, d.recipient, d.channel,
        d.destination, d.occurrence_at, d.due_at, d.revision, d.state, d.reason,
        d.attempts_made, d.redrives, d.lease_expires_at, d.created_at, d.updated_at, s.kind
   from deliveries d join schedules s on s.id = d.schedule_id
   where d.state = 'failed' and (%(state)s::text is null or %(state)s::text = 'failed')
     and (%(tenant)s::text is null or d.tenant = %(tenant)s)
     and (%(kind)s::text is null or d.kind = %(kind)s)
     and (%(channel)s::text is null or d.channel = %(channel)s)
     and (%(recipient)s::text is null or d.recipient = %(recipient)s)
     and (%(due_from)s::timestamptz is null or d.due_at >= %(due_from)s)
     and (%(due_to)s::timestamptz is null or d.due_at < %(due_to)s)
     and (%(after_due)s::timestamptz is null
          or (d.due_at, d.id) > (%(after_due)s, %(after_id)s))
   order by d.due_at, d.id
   limit %(limit)s)
union all
(select d.id, d.tenant, s.schedule_key, d.delivery_key, d.recipient, d.channel,
        d.destination, d.occurrence_at, d.due_at, d.revision, d.state, d.reason,
        d.attempts_made, d.redrives, d.lease_expires_at, d.created_at, d.updated_at, s.kind
   from deliveries d join schedules s on s.id = d.schedule_id
   where d.state = 'stale' and (%(state)s::text is null or %(state)s::text = 'stale')
     and (%(tenant)s::text is null or d.tenant = %(tenant)s)
     and (%(kind)s::text is null or d.kind = %(kind)s)
     and (%(channel)s::text is null or d.channel = %(channel)s)
     and (%(recipient)s::text is null or d.recipient = %(recipient)s)
     and (%(due_from)s::timestamptz is null or d.due_at >= %(due_from)s)
     and (%(due_to)s::timestamptz is null or d.due_at < %(due_to)s)
     and (%(after_due)s::timestamptz is null
          or (d.due_at, d.id) > (%(after_due)s, %(after_id)s))
   order by d.due_at, d.id
   limit %(limit)s)
order by due_at, id
limit %(limit)s;

-- name: schedule_of_delivery
select s.schedule_key, s.kind, s.state, s.channel, s.at, s.rrule, s.tz, s.local_start,
       s.gap_policy, s.overlap_policy, s.revision, s.generation
from deliveries d join schedules s on s.id = d.schedule_id
where d.id = %(id)s and d.tenant = %(tenant)s;

-- name: operator_actions_recent
-- CROSS-TENANT: the newest operator actions, off their time index.
select id, at, who, via, action, object, name, tenant, reason, detail from operator_actions
order by at desc, id desc limit %(limit)s;

-- name: identity_proof_claim
-- CROSS-TENANT: an operator's identity proof, accepted once. Returns no row when the proof was
-- accepted before (its digest is there): the primary key decides, so of two uses at once the
-- second waits for the first and finds it.
insert into identity_proofs (digest, caller_arn, command, accepted_at, expires_at)
values (%(digest)s, %(caller_arn)s, %(command)s, %(now)s, %(expires_at)s)
on conflict (digest) do nothing
returning digest;

-- name: identity_proofs_purge
-- CROSS-TENANT: forget proofs that have expired (refused by their age anyway), a bounded
-- batch off the expiry index.
delete from identity_proofs
where digest in (select digest from identity_proofs where expires_at <= %(now)s
                 order by expires_at limit %(limit)s);

-- ---------------------------------------------------------------- holding a schedule (0023)

-- name: schedules_page
-- CROSS-TENANT unless a tenant is given: schedules by (tenant, key) off their unique index, a
-- page continuing after (tenant, key) of the last row of the previous one: O(page). `state`
-- is the operator's: active (and not paused), paused, cancelled, finished (stored `ended`).
select s.id, s.tenant, s.schedule_key, s.kind, s.channel, s.state, s.paused, s.at, s.rrule,
       s.tz, s.local_start, s.revision, s.generation, s.created_at, s.updated_at
from schedules s
where (%(tenant)s::text is null or s.tenant = %(tenant)s)
  and (%(state)s::text is null
       or (%(state)s = 'paused' and s.paused and s.state = 'active')
       or (%(state)s = 'active' and not s.paused and s.state = 'active')
       or (%(state)s = 'cancelled' and s.state = 'cancelled')
       or (%(state)s = 'finished' and s.state = 'ended'))
  and (%(after_tenant)s::text is null
       or (s.tenant, s.schedule_key) > (%(after_tenant)s, %(after_key)s))
order by s.tenant, s.schedule_key
limit %(limit)s;

-- name: schedule_detail
select s.id, s.tenant, s.schedule_key, s.kind, s.channel, s.destination, s.state, s.paused,
       s.at, s.rrule, s.tz, s.local_start, s.gap_policy, s.overlap_policy, s.revision,
       s.generation, s.problem, s.created_at, s.updated_at, k.stale_after
from schedules s join kinds k on k.name = s.kind
where s.tenant = %(tenant)s and s.schedule_key = %(key)s;

-- name: schedule_deliveries_page
-- A schedule's newest deliveries, at most `limit`, off its (schedule, recipient) index.
select d.generation, d.origin, d.delivery_key, d.recipient, d.occurrence_at, d.due_at, d.state,
       d.reason, d.attempts_made
from deliveries d
where d.schedule_id = %(schedule_id)s and d.tenant = %(tenant)s
order by d.generation desc, d.occurrence_at desc, d.recipient
limit %(limit)s;

-- name: schedule_timeline
-- The operator actions on one schedule, newest `limit`, oldest first (the object index).
select at, who, via, action, reason, detail from (
    select * from operator_actions
    where object = 'schedule' and name = %(key)s and tenant = %(tenant)s
    order by id desc limit %(limit)s
) latest order by id;

-- name: backfill_missing
-- Which of these occurrences no delivery of the schedule has for each recipient (any state,
-- any generation; a triggered send is not an occurrence): what a backfill would make.
select sr.recipient, o.at as occurrence_at
from schedules s
join schedule_recipients sr on sr.schedule_id = s.id
cross join (select distinct u.at from unnest(%(occurrences)s::timestamptz[]) as u(at)) o
where s.tenant = %(tenant)s and s.schedule_key = %(key)s
  and not exists (select 1 from deliveries e
                  where e.schedule_id = s.id and e.recipient = sr.recipient
                    and e.occurrence_at = o.at and e.origin <> 'trigger')
order by o.at, sr.recipient;

-- name: deliveries_by_keys
-- CROSS-TENANT unless a tenant is given: the deliveries of these keys (a bulk action's counted
-- or selected ones, at most its limit), whatever their state now, by due time then id.
select d.id, d.tenant, s.schedule_key, d.delivery_key, d.recipient, d.channel, d.destination,
       d.occurrence_at, d.due_at, d.revision, d.state, d.reason, d.attempts_made, d.redrives,
       d.lease_expires_at, d.created_at, d.updated_at, s.kind
from deliveries d join schedules s on s.id = d.schedule_id
where d.delivery_key = any(%(keys)s::text[])
  and (%(tenant)s::text is null or d.tenant = %(tenant)s)
order by d.due_at, d.id
limit %(limit)s;

-- name: deliveries_filtered_by_updated
-- CROSS-TENANT unless a tenant is given: as deliveries_filtered, newest change first, so a
-- page continues before (updated_at, id) of the last row of the previous one. As there, a
-- kind or a channel nobody has reads the kept counts only.
select d.id, d.tenant, s.schedule_key, d.delivery_key, d.recipient, d.channel, d.destination,
       d.occurrence_at, d.due_at, d.revision, d.state, d.reason, d.attempts_made, d.redrives,
       d.lease_expires_at, d.created_at, d.updated_at, s.kind
from deliveries d join schedules s on s.id = d.schedule_id
where (%(state)s::text is null or d.state = %(state)s)
  and (%(tenant)s::text is null or d.tenant = %(tenant)s)
  and (%(kind)s::text is null or d.kind || '' = %(kind)s)  -- the kind's browse index (0033)
  and (%(schedule)s::text is null or s.schedule_key = %(schedule)s)
  and (%(channel)s::text is null or d.channel = %(channel)s)
  and (%(recipient)s::text is null or d.recipient = %(recipient)s)
  and (%(due_from)s::timestamptz is null or d.due_at >= %(due_from)s)
  and (%(due_to)s::timestamptz is null or d.due_at < %(due_to)s)
  and (%(kind)s::text is null and %(channel)s::text is null
       or (select coalesce(sum(c.n), 0) from delivery_counts c  -- the kept counts: O(groups)
           where (%(tenant)s::text is null or c.tenant = %(tenant)s)
             and (%(kind)s::text is null or c.kind = %(kind)s)
             and (%(channel)s::text is null or c.channel = %(channel)s)
             and (%(state)s::text is null or c.state = %(state)s)) > 0)
  and (%(after_due)s::timestamptz is null
       or (d.updated_at, d.id) < (%(after_due)s, %(after_id)s))
order by d.updated_at desc, d.id desc
limit %(limit)s;

-- name: delivery_find
-- CROSS-TENANT unless a tenant is given: what the console's "go to" box names, a delivery key,
-- a schedule key or a webhook-id (a webhook send's id, as its request carried it), each an
-- index probe; at most a few rows.
select 'delivery' as what, d.tenant, d.delivery_key as key
from deliveries d
where d.delivery_key = %(text)s and (%(tenant)s::text is null or d.tenant = %(tenant)s)
union all
select 'schedule', s.tenant, s.schedule_key
from schedules s
where s.schedule_key = %(text)s and (%(tenant)s::text is null or s.tenant = %(tenant)s)
limit 20;

-- name: delivery_payload
-- A delivery's payload as its schedule holds it now (what a send builds its body from).
select s.payload from deliveries d join schedules s on s.id = d.schedule_id
where d.delivery_key = %(key)s and d.tenant = %(tenant)s;
