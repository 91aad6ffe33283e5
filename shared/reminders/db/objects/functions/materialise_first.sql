-- The scanner's first materialisation of a recurring schedule recorded through SQL: the first
-- occurrence it computed (null: none left, the schedule ends), or the reason it could not.
-- Fenced on the flag, under the schedule lock the scanner took first.
create or replace function materialise_first(tenant text, schedule_id bigint, first_at timestamptz,
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

revoke all on function materialise_first(text, bigint, timestamptz, text, timestamptz) from public;
