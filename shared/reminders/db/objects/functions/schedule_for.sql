-- Schedule one logical reminder for one or many recipients: checked, recorded with its
-- recipients and (for an instant, or a rule the caller expanded) its first deliveries.
-- Idempotent on the key: the same request again answers what exists; a different request
-- under the same key is refused. A stored request hash is accepted in either form: SQL's, or
-- the Python API's from before 0009 (python_request_hash).
create or replace function schedule_for(
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
    -- Sizes first, each read off the value's header, before any element is looked at: a
    -- 300,000-element array costs what a 3-element one does to refuse.
    if cardinality(recipients) > 50000 then
        raise exception using errcode = 'RM400', message = format(
            'recipients: %s elements in one call; the limit is 50000', cardinality(recipients));
    end if;
    -- A payload's stored size is at most 8 times its JSON text (a small number in an array is
    -- 3 characters of text and 12 bytes stored), so past 8 x 16384 its text is past 16384
    -- too: refused without writing it out.
    if pg_column_size(payload) > 8 * 16384 then
        raise exception using errcode = 'RM400', message = format(
            'payload is %s bytes as stored; the limit is 16384 bytes of JSON text',
            pg_column_size(payload));
    end if;
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
    perform check_payload(payload);
    perform check_revision(revision);
    if (at is null) = (rrule is null) then
        raise exception using errcode = 'RM400', message =
            'give exactly one of: an instant (at) or a recurrence (rrule, tz, start)';
    end if;
    perform check_instant(at, 'at');
    perform check_instant(first_at, 'first_at');
    if rrule is not null then
        perform check_rule(rrule, tz, local_start, gap, overlap);
        if not expanded then  -- the scanner expands it: refuse what cannot yield anything
            perform check_first_occurrence(rrule, local_start);
        end if;
    else  -- a one-off's zone (0024): its recipient's, for its kind's send windows
        if tz is not null then
            perform check_zone(tz);
        end if;
        local_start := null; gap := 'shift'; overlap := 'first';
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
    -- The tenant's quota lock (check_quota's), before the key is claimed: a call waiting for it
    -- holds nothing another call of the tenant could wait for (the key's index entry).
    perform 1 from tenants t where t.id = tenant for no key update;
    -- Two probes of endpoints_tenant_url (the tenant's own, then the shared one), as the
    -- consumer's re-check reads it: never a scan of every tenant's endpoints.
    if channel = 'webhook' and not exists (
            select 1 from endpoints e
            where coalesce(e.tenant, '') = any(array[tenant, '']) and e.url = destination) then
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
        if found_row.request_hash <> hash and found_row.request_hash <> python_request_hash(
                people, channel, destination, kind, payload, revision, at, rrule, tz,
                local_start, gap, overlap) then
            raise exception using errcode = 'RM409', message = format(
                'key %L was already used for a different request; '
                'use reschedule to change it, or a new key', key);
        end if;
        return query select * from schedule_answer(tenant, found_row.id, false);
        return;
    end if;

    -- A new schedule: within the tenant's limits (one pending delivery a recipient, now or,
    -- for a rule the scanner expands, at its first occurrence; none for a rule already over).
    perform check_quota(tenant, case when expanded and first_at is null and at is null then 0
                                     else cardinality(people) end, now);

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

revoke all on function schedule_for(text, text, text[], text, timestamptz, text, text, timestamp,
    text, text, text, text, jsonb, text, timestamptz, boolean, timestamptz) from public;
