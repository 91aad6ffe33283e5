-- The calling application's own schedules. The my_* views run with their owner's rights; the
-- filter is the login's tenant (tenant_logins, by session_user), and security_barrier keeps a
-- caller's functions from seeing past it. `paused`: held by pause(key) or an operator
-- (migration 0023) until resume(key); its pending deliveries wait meanwhile.
create or replace view my_schedules with (security_barrier) as
select s.schedule_key, s.kind, s.channel, s.destination, s.payload, s.revision, s.generation,
       s.state, s.at, s.rrule, s.tz, s.local_start, s.gap_policy, s.overlap_policy,
       s.pending_first, s.problem, s.created_at, s.updated_at, s.paused
from schedules s
where s.tenant = (select t.tenant from tenant_logins t where t.login = session_user);

revoke all on my_schedules from public;
grant select on my_schedules to reminders_client;
