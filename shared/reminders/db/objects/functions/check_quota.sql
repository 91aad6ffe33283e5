-- A tenant's limits on what an application adds (schedule_for, for a schedule it has just
-- inserted): schedules created in the minute up to ``now`` (this one counted), at most the
-- tenant's schedules_per_minute, and pending deliveries (the kept counts, delivery_counts,
-- summed over O(groups) rows: never a count of the deliveries) plus the ``adds`` this call
-- makes, at most its max_pending. Refused with RM429, naming the limit and its value.
--
-- The tenant's row is locked first (FOR NO KEY UPDATE: a delivery's or a schedule's foreign key
-- check, FOR KEY SHARE, never waits on it), so a tenant's concurrent calls pass this check one
-- at a time, each seeing the counts the others committed: two calls cannot both pass a limit
-- they exceed together. The lock is held until the caller's transaction ends; other tenants'
-- calls never wait on it. The service's own writes (a series' next occurrence, the scanner's
-- first occurrence of a rule) do not come here: the limits bound what applications add.
create or replace function check_quota(tenant text, adds bigint, now timestamptz) returns void
language plpgsql set search_path from current as $$
#variable_conflict use_variable
declare
    limits record;
    made integer;
    pending bigint;
begin
    select coalesce(t.max_pending, d.max_pending) as max_pending,
           coalesce(t.schedules_per_minute, d.schedules_per_minute) as per_minute
    into limits
    from tenants t cross join tenant_defaults d
    where t.id = tenant
    for no key update of t;
    if not found then
        raise exception using errcode = 'RM404', message = format(
            'no tenant %s', quote_literal(tenant));
    end if;
    select count(*) into made from (
        select 1 from schedules s
        where s.tenant = tenant and s.created_at > now - interval '1 minute'
          and s.created_at <= now
        limit limits.per_minute + 1) recent;
    if made > limits.per_minute then
        raise exception using errcode = 'RM429', message = format(
            'tenant %s is at its limit of %s schedules created a minute '
            '(schedules_per_minute); try again later, or ask the operator to raise it',
            quote_literal(tenant), limits.per_minute);
    end if;
    select coalesce(sum(c.n), 0) into pending from delivery_counts c
    where c.tenant = tenant and c.state in ('scheduled', 'retrying', 'leased');
    if pending + adds > limits.max_pending then
        raise exception using errcode = 'RM429', message = format(
            'tenant %s is at its limit of %s pending deliveries (max_pending): %s pending, '
            'this call adds %s', quote_literal(tenant), limits.max_pending, pending, adds);
    end if;
end $$;

revoke all on function check_quota(text, bigint, timestamptz) from public;
