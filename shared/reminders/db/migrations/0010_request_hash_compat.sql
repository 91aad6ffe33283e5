-- Schedules created before 0009 hold a request hash computed by the Python API: SHA-256 of
-- Python's json.dumps(sort_keys=True, separators=(",", ":")) over the request, the payload
-- being its own JSON text. 0009 computes the hash in SQL, in another form, so the same
-- request retried with an old key would be refused as a different one.
--
-- The stored row cannot give the old request back (the recipients' order is not kept, a
-- reschedule overwrites at, revision and rule but not the hash, an e-mail or SMS `to` is kept
-- only as a recipient's address), so the hashes are not recomputed here: schedule_for accepts
-- a stored hash of either form. The old form is computed only when the new one does not
-- match, from the request as the old code saw it.
--
-- Known limit of the old form here: a payload float that Python wrote in exponent form
-- (below 1e-4, or 1e16 and above) comes back from jsonb without the exponent, so such a
-- request from before 0009 is still refused as different.

-- Python's json.dumps of one string (ensure_ascii: everything outside space..~ escaped,
-- characters beyond the BMP as UTF-16 surrogate pairs).
create function python_json_string(t text) returns text
language sql immutable strict set search_path from current as $$
    select '"' || coalesce(string_agg(case
        when c = '\' then '\\'
        when c = '"' then '\"'
        when c = E'\n' then '\n'
        when c = E'\r' then '\r'
        when c = E'\t' then '\t'
        when c = E'\b' then '\b'
        when c = E'\f' then '\f'
        when ascii(c) between 32 and 126 then c
        when ascii(c) < 65536 then '\u' || lpad(to_hex(ascii(c)), 4, '0')
        else '\u' || to_hex(55296 + ((ascii(c) - 65536) >> 10))
             || '\u' || to_hex(56320 + ((ascii(c) - 65536) & 1023))
    end, '' order by n), '') || '"'
    from regexp_split_to_table(t, '') with ordinality as s(c, n)
$$;

-- Python's json.dumps(value, sort_keys=True, separators=(",", ":")) of a JSON value: keys in
-- code point order at every level.
create function python_json(j jsonb) returns text
language plpgsql immutable set search_path from current as $$
begin
    if j is null then
        return 'null';
    end if;
    case jsonb_typeof(j)
        when 'object' then
            return '{' || coalesce((select string_agg(python_json_string(e.key) || ':'
                                                      || python_json(e.value), ','
                                                      order by e.key collate "C")
                                    from jsonb_each(j) as e), '') || '}';
        when 'array' then
            return '[' || coalesce((select string_agg(python_json(a.value), ',' order by a.n)
                                    from jsonb_array_elements(j) with ordinality as a(value, n)),
                                   '') || ']';
        when 'string' then
            return python_json_string(j #>> '{}');
        else  -- number, true, false, null: the same text
            return j::text;
    end case;
end $$;

-- Python's str() of a datetime: microseconds only when there are any.
create function python_timestamp(t timestamp) returns text
language sql immutable strict set search_path from current as $$
    select to_char(t, 'YYYY-MM-DD HH24:MI:SS')
           || case when extract(microseconds from t)::bigint % 1000000 <> 0
                   then to_char(t, '.US') else '' end
$$;

-- The request hash as the Python API computed it before 0009 (schedule's _request_hash).
create function python_request_hash(
    recipients text[], channel text, destination text, kind text, payload jsonb,
    revision text, at timestamptz, rrule text, tz text, local_start timestamp, gap text,
    overlap text)
returns text
language sql immutable set search_path from current as $$
    select encode(sha256(convert_to(
        '{"at":' || coalesce(python_json_string(
                        python_timestamp(at at time zone 'UTC') || '+00:00'), 'null')
        || ',"channel":' || coalesce(python_json_string(channel), 'null')
        || ',"gap":' || coalesce(python_json_string(gap), 'null')
        || ',"kind":' || coalesce(python_json_string(kind), 'null')
        || ',"local_start":' || coalesce(python_json_string(python_timestamp(local_start)),
                                         'null')
        || ',"overlap":' || coalesce(python_json_string(overlap), 'null')
        || ',"payload":' || python_json_string(python_json(payload))
        || ',"recipients":' || python_json(to_jsonb(recipients))
        || ',"revision":' || coalesce(python_json_string(revision), 'null')
        || ',"rrule":' || coalesce(python_json_string(rrule), 'null')
        || ',"to":' || coalesce(python_json_string(destination), 'null')
        || ',"tz":' || coalesce(python_json_string(tz), 'null')
        || '}', 'UTF8')), 'hex')
$$;

-- The same as in 0009 but for the comparison of the request hash, which accepts either form.
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
