-- The calling application's own opt-outs (as my_schedules).
create or replace view my_opt_outs with (security_barrier) as
select o.recipient, o.channel, o.created_at
from opt_outs o
where o.tenant = (select t.tenant from tenant_logins t where t.login = session_user);

revoke all on my_opt_outs from public;
grant select on my_opt_outs to reminders_client;
