-- What a schedule call answers, bounded: one row per recipient, with its pending delivery
-- (the one a recurring schedule keeps), else its latest one of the current generation, else
-- none yet (never the generation's whole history: 0017). Each recipient is two index probes at
-- most: the pending one (deliveries_one_pending), then the latest (deliveries_schedule).
create or replace function schedule_answer(tenant text, schedule_id bigint, created boolean)
returns table (schedule_id bigint, schedule_key text, created boolean, recipient text,
               delivery_key text, due_at timestamptz, state text)
language sql stable set search_path from current as $$
    select s.id, s.schedule_key, $3, r.recipient, coalesce(p.delivery_key, l.delivery_key),
           coalesce(p.due_at, l.due_at), coalesce(p.state, l.state)
    from schedules s
    join schedule_recipients r on r.schedule_id = s.id
    left join lateral (
        select d.delivery_key, d.due_at, d.state from deliveries d
        where d.schedule_id = s.id and d.recipient = r.recipient
          and d.state in ('scheduled', 'leased', 'retrying') and d.superseded is null
          and d.generation = s.generation
        limit 1
    ) p on true
    left join lateral (
        select d.delivery_key, d.due_at, d.state from deliveries d
        where p.delivery_key is null
          and d.schedule_id = s.id and d.recipient = r.recipient
          and d.generation = s.generation
        order by d.occurrence_at desc, d.id desc
        limit 1
    ) l on true
    where s.id = $2 and s.tenant = $1
    order by r.recipient
$$;

revoke all on function schedule_answer(text, bigint, boolean) from public;
