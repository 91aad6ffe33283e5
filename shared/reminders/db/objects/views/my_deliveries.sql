-- The calling application's own deliveries (as my_schedules).
create or replace view my_deliveries with (security_barrier) as
select d.delivery_key, s.schedule_key, d.recipient, d.channel, d.destination, d.occurrence_at,
       d.due_at, d.revision, d.state, d.reason, d.attempts_made, d.created_at, d.updated_at
from deliveries d join schedules s on s.id = d.schedule_id
where d.tenant = (select t.tenant from tenant_logins t where t.login = session_user);

revoke all on my_deliveries from public;
grant select on my_deliveries to reminders_client;
