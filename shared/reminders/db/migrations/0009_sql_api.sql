-- The application operations as SQL functions: one implementation for every caller. The
-- Python API calls the `*_for` functions with the tenant it was given; an application in any
-- language calls the client functions (schedule, reschedule, cancel, opt_out, opt_in,
-- delivery_state) as a login granted `reminders_client`, and the tenant comes from the
-- database (`tenant_logins`, by `session_user`), never from an argument.
--
-- Errors, by SQLSTATE (the message names the argument):
--   RM400  bad input: an argument is missing, malformed or out of range
--   RM404  not found: no such schedule key or delivery key for this tenant
--   RM409  refused by the current state: the same key for a different request, a cancelled
--          schedule, a key being created by another transaction at this moment
--   RM403  this login is not an application login of any tenant (`grant_tenant`)
-- Deadlocks and lock timeouts keep their own SQLSTATEs (40P01, 55P03): try again.
--
-- Every function runs with search_path set to this schema (then pg_temp), captured here from
-- the migrator's setting, so nothing a caller puts on its own search_path is used by them.

-- A recurring schedule recorded by a caller that could not expand its rule (no Python at
-- hand): the scanner materialises its first occurrence, a bounded batch per tick.
alter table schedules
    add column pending_first boolean not null default false,
    -- Why the service could not materialise the schedule (a rule or zone it cannot expand).
    add column problem text;
create index schedules_pending_first on schedules (id) where pending_first;

-- Which login role is which tenant's application. Maintained by the operator with
-- grant_tenant / revoke_tenant; read by the client functions and views through session_user.
create table tenant_logins (
    login       text primary key check (login <> '' and length(login) <= 63),
    tenant      text not null references tenants (id),
    granted_at  timestamptz not null default now()
);
create index tenant_logins_tenant on tenant_logins (tenant);

-- ---------------------------------------------------------------- validation

create function check_tenant(tenant text) returns text
language plpgsql immutable set search_path from current as $$
begin
    if tenant is null or tenant !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$' then
        raise exception using errcode = 'RM400', message = format(
            'tenant must be 1-200 letters, digits or _.:- , got %s',
            coalesce(quote_literal(tenant), 'NULL'));
    end if;
    return tenant;
end $$;

create function check_channel(channel text) returns text
language plpgsql immutable set search_path from current as $$
begin
    if channel is null or channel not in ('webhook', 'email', 'sms') then
        raise exception using errcode = 'RM400', message = format(
            'unknown channel %s; expected one of webhook, email, sms',
            coalesce(quote_literal(channel), 'NULL'));
    end if;
    return channel;
end $$;

-- One recipient: trimmed, and free of what a delivery key cannot carry unambiguously.
create function check_recipient(recipient text) returns text
language plpgsql immutable set search_path from current as $$
begin
    if recipient is null or btrim(recipient) = '' then
        raise exception using errcode = 'RM400', message = 'recipient must be a non-empty string';
    end if;
    if length(recipient) > 320 then
        raise exception using errcode = 'RM400', message = format(
            'recipient %s... is longer than 320 characters', quote_literal(left(recipient, 40)));
    end if;
    if recipient ~ '[\n\r]' then
        raise exception using errcode = 'RM400', message = format(
            'recipient %s contains a line break', quote_literal(left(recipient, 40)));
    end if;
    if position(':' in recipient) > 0 then
        raise exception using errcode = 'RM400', message = format(
            'recipient %s contains '':'' (the delivery key''s separator)',
            quote_literal(left(recipient, 40)));
    end if;
    return btrim(recipient);
end $$;

-- The recipients of one call: each checked, duplicates dropped (first one kept), bounded.
create function check_recipients(recipients text[]) returns text[]
language plpgsql immutable set search_path from current as $$
declare
    people text[];
begin
    select coalesce(array_agg(r order by first_at), '{}') into people
    from (select check_recipient(x) as r, min(n) as first_at
          from unnest(recipients) with ordinality as u(x, n) group by 1) d;
    if cardinality(people) = 0 then
        raise exception using errcode = 'RM400', message = 'at least one recipient is required';
    end if;
    if cardinality(people) > 50000 then
        raise exception using errcode = 'RM400', message = format(
            '%s recipients in one call; the limit is 50000', cardinality(people));
    end if;
    return people;
end $$;

-- Where each recipient's delivery goes: the shared destination (a webhook URL, or one
-- address for a single recipient) or the recipient's own address.
create function check_destinations(channel text, recipients text[], destination text)
returns text[]
language plpgsql immutable set search_path from current as $$
declare
    addresses text[];
    address text;
begin
    if channel = 'webhook' then
        if destination is null or destination !~ '^https?://[^\s/]+' then
            raise exception using errcode = 'RM400', message = format(
                'webhook channel needs an http(s) URL to send to, got %s',
                coalesce(quote_literal(destination), 'NULL'));
        end if;
        return array_fill(destination, array[cardinality(recipients)]);
    end if;
    if destination is not null and cardinality(recipients) > 1 then
        raise exception using errcode = 'RM400', message = format(
            '%s: with several recipients each recipient is its own address; do not pass a '
            'single destination', channel);
    end if;
    addresses := case when destination is not null then array[destination] else recipients end;
    foreach address in array addresses loop
        if channel = 'email' and address !~ '^[^@\s]+@[^@\s]+\.[^@\s]+$' then
            raise exception using errcode = 'RM400', message = format(
                'email: %s is not an e-mail address', quote_literal(address));
        end if;
        if channel = 'sms' and address !~ '^\+[1-9][0-9]{7,14}$' then
            raise exception using errcode = 'RM400', message = format(
                'sms: %s is not an E.164 phone number (+ and 8-15 digits)',
                quote_literal(address));
        end if;
    end loop;
    return addresses;
end $$;

create function check_revision(revision text) returns text
language plpgsql immutable set search_path from current as $$
begin
    if revision is null or revision = '' or length(revision) > 100 then
        raise exception using errcode = 'RM400',
            message = 'revision must be a non-empty string of at most 100 characters';
    end if;
    return revision;
end $$;

-- A rule is checked here for its shape only; its meaning (RRULE, zone, DST policy) is the
-- service's to expand: a rule it cannot expand ends the schedule with the reason in `problem`.
create function check_rule(rrule text, tz text, local_start timestamp, gap text, overlap text)
returns void
language plpgsql immutable set search_path from current as $$
begin
    if rrule is null or rrule !~ '^[A-Za-z]' or length(rrule) > 1000 then
        raise exception using errcode = 'RM400', message =
            'rrule must be an RFC 5545 rule such as FREQ=WEEKLY;BYDAY=MO (at most 1000 characters)';
    end if;
    if tz is null or tz = '' or length(tz) > 64 then
        raise exception using errcode = 'RM400',
            message = 'tz must be an IANA time zone name such as Europe/Berlin';
    end if;
    if local_start is null or local_start not between '1900-01-01' and '9000-01-01' then
        raise exception using errcode = 'RM400', message =
            'local_start must be the local wall-clock start (timestamp without time zone)';
    end if;
    if gap is null or gap not in ('shift', 'skip') then
        raise exception using errcode = 'RM400', message = format(
            'gap must be shift or skip, got %s', coalesce(quote_literal(gap), 'NULL'));
    end if;
    if overlap is null or overlap not in ('first', 'later') then
        raise exception using errcode = 'RM400', message = format(
            'overlap must be first or later, got %s', coalesce(quote_literal(overlap), 'NULL'));
    end if;
end $$;

-- ---------------------------------------------------------------- the implementation

-- One delivery per (recipient, occurrence), in one statement; the stable delivery key is
-- made here and nowhere else: schedule:{id}/{generation}:{occurrence, UTC}:{recipient}:{channel}.
create function materialise(tenant text, schedule_id bigint, recipients text[],
                            occurrences timestamptz[], states text[], reasons text[],
                            now timestamptz)
returns table (id bigint, recipient text, delivery_key text, occurrence_at timestamptz,
               due_at timestamptz, state text)
language sql set search_path from current as $$
    insert into deliveries (tenant, schedule_id, generation, recipient, channel, destination,
                            delivery_key, occurrence_at, revision, due_at, state, reason,
                            created_at, updated_at)
    select s.tenant, s.id, s.generation, r.recipient, s.channel, sr.destination,
           'schedule:' || s.id || '/' || s.generation || ':'
               || to_char(r.occurrence_at at time zone 'UTC', 'YYYYMMDD"T"HH24MISS"Z"')
               || ':' || r.recipient || ':' || s.channel,
           r.occurrence_at, s.revision, r.occurrence_at, r.state, r.reason, $7, $7
    from schedules s
    cross join unnest($3, $4, $5, $6) as r(recipient, occurrence_at, state, reason)
    join schedule_recipients sr on sr.schedule_id = s.id and sr.recipient = r.recipient
    where s.id = $2 and s.tenant = $1
    on conflict (delivery_key) do nothing
    returning id, recipient, delivery_key, occurrence_at, due_at, state
$$;

-- A schedule with nothing pending whose rule has ended.
create function end_schedule(tenant text, schedule_id bigint, now timestamptz) returns void
language sql set search_path from current as $$
    update schedules set state = 'ended', updated_at = $3
    where id = $2 and tenant = $1 and state = 'active'
      and not exists (select 1 from deliveries d where d.schedule_id = $2
                      and d.state in ('scheduled', 'leased', 'retrying'));
$$;

-- What a schedule call answers: one row per delivery of the schedule's current generation,
-- and one row (delivery columns null) per recipient without one yet.
create function schedule_answer(tenant text, schedule_id bigint, created boolean)
returns table (schedule_id bigint, schedule_key text, created boolean, recipient text,
               delivery_key text, due_at timestamptz, state text)
language sql stable set search_path from current as $$
    select s.id, s.schedule_key, $3, r.recipient, d.delivery_key, d.due_at, d.state
    from schedules s
    join schedule_recipients r on r.schedule_id = s.id
    left join deliveries d on d.schedule_id = s.id and d.recipient = r.recipient
                          and d.generation = s.generation
    where s.id = $2 and s.tenant = $1
    order by r.recipient, d.occurrence_at nulls first, d.id
$$;

create function schedule_for(
    tenant text, key text, recipients text[], channel text,
    at timestamptz default null, rrule text default null, tz text default null,
    local_start timestamp default null, gap text default 'shift', overlap text default 'first',
    destination text default null, kind text default 'default', payload jsonb default '{}',
    revision text default '1', first_at timestamptz default null, expanded boolean default false,
    now timestamptz default now())
returns table (schedule_id bigint, schedule_key text, created boolean, recipient text,
               delivery_key text, due_at timestamptz, state text)
language plpgsql set search_path from current as $$
#variable_conflict use_variable
declare
    people text[];
    addresses text[];
    hash text;
    found_row record;
    new_id bigint;
    size integer;
begin
    perform check_tenant(tenant);
    perform check_channel(channel);
    people := check_recipients(recipients);
    addresses := check_destinations(channel, people, destination);
    payload := coalesce(payload, '{}');
    if jsonb_typeof(payload) <> 'object' then
        raise exception using errcode = 'RM400', message = format(
            'payload must be a JSON object, got %s', jsonb_typeof(payload));
    end if;
    size := octet_length(payload::text);
    if size > 16384 then
        raise exception using errcode = 'RM400', message = format(
            'payload is %s bytes; the limit is 16384', size);
    end if;
    perform check_revision(revision);
    if (at is null) = (rrule is null) then
        raise exception using errcode = 'RM400', message =
            'give exactly one of: an instant (at) or a recurrence (rrule, tz, start)';
    end if;
    if rrule is not null then
        perform check_rule(rrule, tz, local_start, gap, overlap);
    else
        tz := null; local_start := null; gap := 'shift'; overlap := 'first';
    end if;
    key := coalesce(key, 'auto-' || gen_random_uuid());
    if key = '' or length(key) > 200 then
        raise exception using errcode = 'RM400', message = 'key must be 1-200 characters';
    end if;
    hash := encode(sha256(convert_to(jsonb_build_object(
        'recipients', to_jsonb(people), 'channel', channel, 'to', destination, 'kind', kind,
        'payload', payload, 'revision', revision, 'at', to_jsonb(at at time zone 'UTC'),
        'rrule', rrule, 'tz', tz, 'local_start', to_jsonb(local_start), 'gap', gap,
        'overlap', overlap)::text, 'UTF8')), 'hex');

    if not exists (select 1 from kinds k where k.name = kind) then
        raise exception using errcode = 'RM400', message = format(
            'unknown kind %s; create it with `reminders kinds set`',
            coalesce(quote_literal(kind), 'NULL'));
    end if;
    insert into tenants (id) values (tenant) on conflict on constraint tenants_pkey do nothing;
    if channel = 'webhook' and not exists (
            select 1 from endpoints e where e.url = destination
            and (e.tenant = tenant or e.tenant is null)) then
        raise exception using errcode = 'RM400', message = format(
            'no webhook endpoint registered for %s; register it with '
            '`reminders endpoints add URL --secret whsec_...`', destination);
    end if;

    insert into schedules as s (tenant, schedule_key, kind, channel, destination, payload,
                                revision, at, rrule, tz, local_start, gap_policy,
                                overlap_policy, request_hash, pending_first, created_at,
                                updated_at)
    values (tenant, key, kind, channel, case when channel = 'webhook' then destination end,
            payload, revision, at, rrule, tz, local_start, gap, overlap, hash,
            rrule is not null and not expanded, now, now)
    on conflict on constraint schedules_tenant_schedule_key_key do nothing
    returning s.id into new_id;

    if new_id is null then  -- the key exists: the same request again, or a refusal
        select s.id, s.request_hash into found_row from schedules s
        where s.tenant = tenant and s.schedule_key = key;
        if not found then  -- the conflicting insert was rolled back meanwhile
            raise exception using errcode = 'RM409', message = format(
                'key %L is being created concurrently; retry', key);
        end if;
        if found_row.request_hash <> hash then
            raise exception using errcode = 'RM409', message = format(
                'key %L was already used for a different request; '
                'use reschedule to change it, or a new key', key);
        end if;
        return query select * from schedule_answer(tenant, found_row.id, false);
        return;
    end if;

    insert into schedule_recipients (schedule_id, tenant, recipient, destination)
    select new_id, tenant, r.recipient, r.destination
    from unnest(people, addresses) as r(recipient, destination);
    if at is not null then
        perform materialise(tenant, new_id, people, array_fill(at, array[cardinality(people)]),
                            array_fill('scheduled'::text, array[cardinality(people)]),
                            array_fill(null::text, array[cardinality(people)]), now);
    elsif expanded and first_at is not null then
        perform materialise(tenant, new_id, people,
                            array_fill(first_at, array[cardinality(people)]),
                            array_fill('scheduled'::text, array[cardinality(people)]),
                            array_fill(null::text, array[cardinality(people)]), now);
    elsif expanded then  -- a rule whose occurrences are all in the past
        perform end_schedule(tenant, new_id, now);
    end if;
    return query select * from schedule_answer(tenant, new_id, true);
end $$;

-- The schedule, locked for the rest of the transaction: lock order everywhere is the
-- schedule (FOR NO KEY UPDATE), then its deliveries.
create function lock_schedule(tenant text, key text) returns schedules
language plpgsql set search_path from current as $$
#variable_conflict use_variable
declare
    locked schedules;
begin
    perform check_tenant(tenant);
    select * into locked from schedules s where s.tenant = tenant and s.schedule_key = key
    for no key update;
    if not found then
        raise exception using errcode = 'RM404', message = format(
            'no schedule with key %s for tenant %L', coalesce(quote_literal(key), 'NULL'),
            tenant);
    end if;
    if locked.state = 'cancelled' then
        raise exception using errcode = 'RM409', message = format(
            'schedule %L is cancelled', key);
    end if;
    return locked;
end $$;

-- Reschedule and cancel: every pending delivery of the schedule stops here, fenced on the
-- send in flight in this same statement. One that is not sending is suppressed and loses its
-- lease (its holder's fenced writes are refused, its message dropped on re-check). One whose
-- send is in flight keeps its lease and is marked superseded: its holder records what the
-- send did, and it is never tried again.
create function supersede_pending(tenant text, schedule_id bigint, reason text,
                                  now timestamptz)
returns table (id bigint, recipient text, occurrence_at timestamptz, state text)
language sql set search_path from current as $$
    update deliveries d set
        state = case when d.send_attempt is null then 'suppressed' else d.state end,
        reason = case when d.send_attempt is null then $3 else d.reason end,
        superseded = case when d.send_attempt is null then null else $3 end,
        lease_token = case when d.send_attempt is null then null else d.lease_token end,
        lease_expires_at = case when d.send_attempt is null then null
                                else d.lease_expires_at end,
        received = case when d.send_attempt is null then false else d.received end,
        updated_at = $4
    where d.schedule_id = $2 and d.tenant = $1
      and d.state in ('scheduled', 'leased', 'retrying') and d.superseded is null
    returning d.id, d.recipient, d.occurrence_at, d.state
$$;

-- Move a schedule to a new instant, a new rule or a new content revision. Pending deliveries
-- are superseded (reason `rescheduled`) and replaced in a new generation. The same request
-- again changes nothing (the current deliveries are answered). A new rule's first occurrence
-- is `first_at` when the caller expanded it (`expanded`), else the scanner's to materialise.
create function reschedule_for(
    tenant text, key text, at timestamptz default null, rrule text default null,
    tz text default null, local_start timestamp default null, gap text default null,
    overlap text default null, revision text default null, first_at timestamptz default null,
    expanded boolean default false, now timestamptz default now())
returns table (schedule_id bigint, schedule_key text, created boolean, recipient text,
               delivery_key text, due_at timestamptz, state text)
language plpgsql set search_path from current as $$
#variable_conflict use_variable
declare
    new_instant boolean := at is not null;
    new_rule boolean := rrule is not null;
    cur schedules;
    people text[];
    occurrences timestamptz[];
begin
    perform check_tenant(tenant);
    if not new_instant and revision is null and not new_rule then
        raise exception using errcode = 'RM400',
            message = 'reschedule needs a new time (at), rule or revision';
    end if;
    if revision is not null then
        perform check_revision(revision);
    end if;
    cur := lock_schedule(tenant, key);
    if new_instant and cur.rrule is not null then
        raise exception using errcode = 'RM400', message = format(
            'schedule %L recurs; give a new rule, not an instant', key);
    end if;
    if new_rule and cur.rrule is null then
        raise exception using errcode = 'RM400', message = format(
            'schedule %L is one-off; give a new instant, not a rule', key);
    end if;
    if new_rule then
        gap := coalesce(gap, 'shift');
        overlap := coalesce(overlap, 'first');
        perform check_rule(rrule, tz, local_start, gap, overlap);
    else
        tz := cur.tz; local_start := cur.local_start;
        gap := cur.gap_policy; overlap := cur.overlap_policy;
    end if;
    at := coalesce(at, cur.at);
    rrule := coalesce(rrule, cur.rrule);
    revision := coalesce(revision, cur.revision);
    if cur.state = 'active' and at is not distinct from cur.at
            and rrule is not distinct from cur.rrule and tz is not distinct from cur.tz
            and local_start is not distinct from cur.local_start and gap = cur.gap_policy
            and overlap = cur.overlap_policy and revision = cur.revision then
        -- The same request again (a retry): nothing changes, nothing is sent again.
        return query select * from schedule_answer(tenant, cur.id, false) a
                     where a.delivery_key is not null;
        return;
    end if;

    -- The schedule is locked; now its deliveries.
    select array_agg(p.recipient order by p.recipient),
           array_agg(p.occurrence_at order by p.recipient)
    into people, occurrences
    from supersede_pending(tenant, cur.id, 'rescheduled', now) p;

    update schedules s set
        at = at, rrule = rrule, tz = tz, local_start = local_start, gap_policy = gap,
        overlap_policy = overlap, revision = revision, generation = s.generation + 1,
        state = case when new_instant or new_rule then 'active' else s.state end,
        pending_first = case when new_instant then false when new_rule then not expanded
                             else s.pending_first end,
        problem = case when new_instant or new_rule then null else s.problem end,
        updated_at = now
    where s.id = cur.id;

    if new_instant then  -- a new instant: everybody gets it
        select array_agg(r.recipient order by r.recipient) into people
        from schedule_recipients r where r.schedule_id = cur.id;
        occurrences := array_fill(at, array[cardinality(people)]);
    elsif new_rule then  -- a new rule: every recipient's series restarts
        people := null;
        if expanded and first_at is not null then
            select array_agg(r.recipient order by r.recipient) into people
            from schedule_recipients r where r.schedule_id = cur.id;
            occurrences := array_fill(first_at, array[cardinality(people)]);
        end if;
    end if;  -- else a new revision: the pending ones, same instant, new content
    if coalesce(cardinality(people), 0) > 0 then
        perform materialise(tenant, cur.id, people, occurrences,
                            array_fill('scheduled'::text, array[cardinality(people)]),
                            array_fill(null::text, array[cardinality(people)]), now);
    elsif new_rule and expanded then  -- the new rule has nothing left to deliver
        perform end_schedule(tenant, cur.id, now);
    end if;
    return query select * from schedule_answer(tenant, cur.id, false) a
                 where a.delivery_key is not null;
end $$;

-- Cancel a schedule; answers how many pending deliveries were suppressed (or superseded while
-- their send is in flight: what that send did then stands).
create function cancel_for(tenant text, key text, now timestamptz default now())
returns integer
language plpgsql set search_path from current as $$
#variable_conflict use_variable
declare
    cur schedules;
    n integer;
begin
    cur := lock_schedule(tenant, key);
    update schedules s set state = 'cancelled', pending_first = false, updated_at = now
    where s.id = cur.id and s.state = 'active';
    select count(*) into n from supersede_pending(tenant, cur.id, 'cancelled', now);
    return n;
end $$;

-- Stop sending to a recipient on a channel; answers whether the opt-out is new. Pending
-- deliveries stay and are suppressed when they come due (opting back in before then restores
-- them). It takes the row locks of the recipient's pending deliveries before it commits, so an
-- attempt start either commits before it or sees it.
create function opt_out_for(tenant text, recipient text, channel text,
                            now timestamptz default now())
returns boolean
language plpgsql set search_path from current as $$
#variable_conflict use_variable
declare
    person text;
    added integer;
begin
    perform check_tenant(tenant);
    perform check_channel(channel);
    person := check_recipient(recipient);
    insert into tenants (id) values (tenant) on conflict on constraint tenants_pkey do nothing;
    insert into opt_outs (tenant, recipient, channel, created_at)
    values (tenant, person, channel, now) on conflict do nothing;
    get diagnostics added = row_count;
    perform 1 from deliveries d
    where d.tenant = tenant and d.recipient = person and d.channel = channel
      and d.state in ('scheduled', 'leased', 'retrying')
    order by d.id
    for update;
    return added > 0;
end $$;

-- Undo an opt-out; answers whether there was one.
create function opt_in_for(tenant text, recipient text, channel text) returns boolean
language plpgsql set search_path from current as $$
#variable_conflict use_variable
declare
    person text;
    removed integer;
begin
    perform check_tenant(tenant);
    perform check_channel(channel);
    person := check_recipient(recipient);
    delete from opt_outs o
    where o.tenant = tenant and o.recipient = person and o.channel = channel;
    get diagnostics removed = row_count;
    return removed > 0;
end $$;

-- One delivery's current state, by its delivery key (`key`).
create function delivery_state_for(tenant text, key text)
returns table (delivery_key text, schedule_key text, recipient text, channel text,
               occurrence_at timestamptz, due_at timestamptz, revision text, state text,
               reason text, attempts_made integer, updated_at timestamptz)
language plpgsql stable set search_path from current as $$
#variable_conflict use_variable
begin
    perform check_tenant(tenant);
    return query
    select d.delivery_key, s.schedule_key, d.recipient, d.channel, d.occurrence_at, d.due_at,
           d.revision, d.state, d.reason, d.attempts_made, d.updated_at
    from deliveries d join schedules s on s.id = d.schedule_id
    where d.delivery_key = key and d.tenant = tenant;
    if not found then
        raise exception using errcode = 'RM404', message = format(
            'no delivery with key %s for tenant %L', coalesce(quote_literal(key), 'NULL'),
            tenant);
    end if;
end $$;

-- The scanner's first materialisation of a recurring schedule recorded through SQL: the first
-- occurrence it computed (null: none left, the schedule ends), or the reason it could not.
-- Fenced on the flag, under the schedule lock the scanner took first.
create function materialise_first(tenant text, schedule_id bigint, first_at timestamptz,
                                  problem text, now timestamptz)
returns integer
language plpgsql set search_path from current as $$
#variable_conflict use_variable
declare
    people text[];
    n integer := 0;
begin
    update schedules s set pending_first = false, problem = materialise_first.problem,
                           state = case when materialise_first.problem is null then s.state
                                        else 'ended' end,
                           updated_at = now
    where s.id = schedule_id and s.tenant = tenant and s.pending_first and s.state = 'active';
    if not found or problem is not null then
        return 0;
    end if;
    if first_at is null then
        perform end_schedule(tenant, schedule_id, now);
        return 0;
    end if;
    select array_agg(r.recipient order by r.recipient) into people
    from schedule_recipients r where r.schedule_id = materialise_first.schedule_id;
    select count(*) into n from materialise(
        tenant, schedule_id, people, array_fill(first_at, array[cardinality(people)]),
        array_fill('scheduled'::text, array[cardinality(people)]),
        array_fill(null::text, array[cardinality(people)]), now);
    return n;
end $$;

-- ---------------------------------------------------------------- applications' access

-- The role applications' logins are granted: it may call the client functions below and read
-- its own tenant's rows through the my_* views, and nothing else. Roles are the cluster's, so
-- it may exist already (another database of the same cluster).
do $$
begin
    if not exists (select 1 from pg_roles where rolname = 'reminders_client') then
        create role reminders_client nologin;
    end if;
exception when duplicate_object or unique_violation then
    null;  -- created by a concurrent migration of another database
end $$;

-- The operator maps an application's login role to its tenant (and back).
create function grant_tenant(login text, tenant text) returns void
language plpgsql set search_path from current as $$
#variable_conflict use_variable
begin
    perform check_tenant(tenant);
    if not exists (select 1 from pg_roles r where r.rolname = login) then
        raise exception using errcode = 'RM404', message = format(
            'login: no role named %s', coalesce(quote_literal(login), 'NULL'));
    end if;
    insert into tenants (id) values (tenant) on conflict on constraint tenants_pkey do nothing;
    insert into tenant_logins as t (login, tenant) values (login, tenant)
    on conflict on constraint tenant_logins_pkey do update set tenant = excluded.tenant,
                                                     granted_at = now();
end $$;

create function revoke_tenant(login text) returns boolean
language plpgsql set search_path from current as $$
#variable_conflict use_variable
begin
    delete from tenant_logins t where t.login = revoke_tenant.login;
    return found;
end $$;

-- The calling application's tenant: by the login it authenticated as (session_user, which
-- SET ROLE cannot change), never by an argument.
create function my_tenant() returns text
language plpgsql stable security definer set search_path from current as $$
declare
    found_tenant text;
begin
    select t.tenant into found_tenant from tenant_logins t where t.login = session_user;
    if found_tenant is null then
        raise exception using errcode = 'RM403', message = format(
            'login %s is not an application login of any tenant; the operator maps it with '
            'grant_tenant(login, tenant)', quote_literal(session_user));
    end if;
    return found_tenant;
end $$;

create function schedule(
    key text, recipients text[], channel text, at timestamptz default null,
    rrule text default null, tz text default null, local_start timestamp default null,
    gap text default 'shift', overlap text default 'first', destination text default null,
    kind text default 'default', payload jsonb default '{}', revision text default '1')
returns table (schedule_id bigint, schedule_key text, created boolean, recipient text,
               delivery_key text, due_at timestamptz, state text)
language sql security definer set search_path from current as $$
    select * from schedule_for(my_tenant(), $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,
                               $13, null, false, now())
$$;

create function reschedule(
    key text, at timestamptz default null, rrule text default null, tz text default null,
    local_start timestamp default null, gap text default null, overlap text default null,
    revision text default null)
returns table (schedule_id bigint, schedule_key text, created boolean, recipient text,
               delivery_key text, due_at timestamptz, state text)
language sql security definer set search_path from current as $$
    select * from reschedule_for(my_tenant(), $1, $2, $3, $4, $5, $6, $7, $8, null, false,
                                 now())
$$;

create function cancel(key text) returns integer
language sql security definer set search_path from current as $$
    select cancel_for(my_tenant(), $1, now())
$$;

create function opt_out(recipient text, channel text) returns boolean
language sql security definer set search_path from current as $$
    select opt_out_for(my_tenant(), $1, $2, now())
$$;

create function opt_in(recipient text, channel text) returns boolean
language sql security definer set search_path from current as $$
    select opt_in_for(my_tenant(), $1, $2)
$$;

create function delivery_state(key text)
returns table (delivery_key text, schedule_key text, recipient text, channel text,
               occurrence_at timestamptz, due_at timestamptz, revision text, state text,
               reason text, attempts_made integer, updated_at timestamptz)
language sql stable security definer set search_path from current as $$
    select * from delivery_state_for(my_tenant(), $1)
$$;

-- The calling application's own rows (the views run with their owner's rights; the filter is
-- the login's tenant, and security_barrier keeps a caller's functions from seeing past it).
create view my_schedules with (security_barrier) as
select s.schedule_key, s.kind, s.channel, s.destination, s.payload, s.revision, s.generation,
       s.state, s.at, s.rrule, s.tz, s.local_start, s.gap_policy, s.overlap_policy,
       s.pending_first, s.problem, s.created_at, s.updated_at
from schedules s
where s.tenant = (select t.tenant from tenant_logins t where t.login = session_user);

create view my_deliveries with (security_barrier) as
select d.delivery_key, s.schedule_key, d.recipient, d.channel, d.destination, d.occurrence_at,
       d.due_at, d.revision, d.state, d.reason, d.attempts_made, d.created_at, d.updated_at
from deliveries d join schedules s on s.id = d.schedule_id
where d.tenant = (select t.tenant from tenant_logins t where t.login = session_user);

create view my_opt_outs with (security_barrier) as
select o.recipient, o.channel, o.created_at
from opt_outs o
where o.tenant = (select t.tenant from tenant_logins t where t.login = session_user);

-- Nothing here is anyone's by default: functions are executable by PUBLIC unless revoked.
do $$
begin
    execute format('revoke all on all functions in schema %I from public', current_schema());
    execute format('alter default privileges in schema %I revoke execute on functions '
                   'from public', current_schema());
    execute format('grant usage on schema %I to reminders_client', current_schema());
end $$;
grant execute on function my_tenant(), schedule(text, text[], text, timestamptz, text, text,
    timestamp, text, text, text, text, jsonb, text), reschedule(text, timestamptz, text, text,
    timestamp, text, text, text), cancel(text), opt_out(text, text), opt_in(text, text),
    delivery_state(text) to reminders_client;
grant select on my_schedules, my_deliveries, my_opt_outs to reminders_client;
