-- One delivery per (recipient, occurrence), in one statement; the stable delivery key is
-- made here and nowhere else: schedule:{id}/{generation}:{occurrence, UTC}:{recipient}:{channel}.
-- A delivery to schedule is due at its occurrence moved by its kind (0024): to the next opening
-- of the kind's send windows in the recipient's zone (the schedule's: its rule's, or the
-- one-off's `tz`; else UTC), then by its key's place in the kind's spread; `held` says why
-- and `planned_at` keeps that instant (lateness is measured from it). One whose due time would
-- be past its staleness deadline (occurrence + stale_after) is born `stale` with that reason
-- (a recurring one flagged for its series to advance).
create or replace function materialise(tenant text, schedule_id bigint, recipients text[],
                            occurrences timestamptz[], states text[], reasons text[],
                            now timestamptz)
returns table (id bigint, recipient text, delivery_key text, occurrence_at timestamptz,
               due_at timestamptz, state text)
language sql set search_path from current as $$
    insert into deliveries (tenant, schedule_id, generation, recipient, channel, destination,
                            delivery_key, occurrence_at, revision, due_at, state, reason,
                            held, planned_at, advance_series, created_at, updated_at)
    select s.tenant, s.id, s.generation, r.recipient, s.channel, sr.destination,
           kk.delivery_key, r.occurrence_at, s.revision, coalesce(p.due_at, r.occurrence_at),
           case when p.late then 'stale' else r.state end,
           case when not p.late then r.reason
                when p.due_at is null then 'held by its send window: no opening within 8 days'
                else format('held by its send window: its next opening %s is past its '
                            'staleness deadline %s', to_char(w.opens at time zone 'UTC',
                            'YYYY-MM-DD"T"HH24:MI:SS"Z"'), to_char((r.occurrence_at
                            + k.stale_after) at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
           end,
           case when p.due_at is distinct from r.occurrence_at then concat_ws('; ',
               case when w.opens is distinct from r.occurrence_at then format(
                   'held by its send window (%s) until %s', w.zone,
                   to_char(w.opens at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')) end,
               case when k.spread is not null then format('spread by %ss of %ss',
                   extract(epoch from spread_offset(kk.delivery_key, k.spread))::numeric(12, 3),
                   extract(epoch from k.spread)::numeric(12, 3)) end) end,
           case when p.due_at is distinct from r.occurrence_at then p.due_at end,
           p.late and s.rrule is not null, $7, $7
    from schedules s
    join kinds k on k.name = s.kind
    cross join unnest($3, $4, $5, $6) as r(recipient, occurrence_at, state, reason)
    join schedule_recipients sr on sr.schedule_id = s.id and sr.recipient = r.recipient
    cross join lateral (select 'schedule:' || s.id || '/' || s.generation || ':'
               || to_char(r.occurrence_at at time zone 'UTC', 'YYYYMMDD"T"HH24MISS"Z"')
               || ':' || r.recipient || ':' || s.channel as delivery_key) kk
    cross join lateral (select coalesce(s.tz, 'UTC') as zone,
                               r.state = 'scheduled'
                               and (k.send_windows is not null or k.spread is not null) as moved
    ) m
    cross join lateral (select m.zone, case when m.moved then send_window_due(
                            r.occurrence_at, m.zone, k.send_windows, s.gap_policy,
                            s.overlap_policy) else r.occurrence_at end as opens) w
    cross join lateral (select w.opens + spread_offset(kk.delivery_key, k.spread) as due_at) d
    cross join lateral (select d.due_at, m.moved and (d.due_at is null or (
                            k.stale_after is not null
                            and d.due_at > r.occurrence_at + k.stale_after)) as late) p
    where s.id = $2 and s.tenant = $1
    on conflict (delivery_key) do nothing
    returning id, recipient, delivery_key, occurrence_at, due_at, state
$$;

revoke all on function materialise(text, bigint, text[], timestamptz[], text[], text[],
    timestamptz) from public;
