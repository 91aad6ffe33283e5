-- Move a schedule to a new instant, a new rule or a new content revision. Pending deliveries
-- are superseded (reason `rescheduled`) and replaced in a new generation. The same request
-- again changes nothing (the current deliveries are answered). A new rule's first occurrence
-- is `first_at` when the caller expanded it (`expanded`), else the scanner's to materialise.
create or replace function reschedule_for(
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
    perform check_instant(at, 'at');
    perform check_instant(first_at, 'first_at');
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
        if not expanded then
            perform check_first_occurrence(rrule, local_start);
        end if;
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

revoke all on function reschedule_for(text, text, timestamptz, text, text, timestamp, text, text,
    text, timestamptz, boolean, timestamptz) from public;
