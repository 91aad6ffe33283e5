-- One delivery per (recipient, occurrence), in one statement; the stable delivery key is
-- made here and nowhere else: schedule:{id}/{generation}:{occurrence, UTC}:{recipient}:{channel}.
create or replace function materialise(tenant text, schedule_id bigint, recipients text[],
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

revoke all on function materialise(text, bigint, text[], timestamptz[], text[], text[],
    timestamptz) from public;
