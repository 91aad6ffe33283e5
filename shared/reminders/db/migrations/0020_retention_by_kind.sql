-- Retention reads only what it removes. Kinds keep their terminal deliveries for different
-- times; the purge read the terminal-age index from its oldest entry, so with a kind kept 30
-- days and one kept a day it read every terminal row younger than 30 days (a million index
-- entries) to find the few of the short kind past a day. A delivery now carries its
-- schedule's kind (which never changes once the schedule exists: schedules_kind_fixed), and
-- the terminal-age index leads with it: each kind's purge is one range of its own entries,
-- O(rows purged).
alter table deliveries add column kind text;
update deliveries d set kind = s.kind from schedules s where s.id = d.schedule_id;
alter table deliveries alter column kind set not null;

create index deliveries_terminal_kind_age on deliveries (kind, updated_at, id)
    where state in ('sent', 'failed', 'suppressed', 'stale', 'unknown', 'dead')
      and not advance_series;
-- It served only the purge.
drop index deliveries_terminal_age;
