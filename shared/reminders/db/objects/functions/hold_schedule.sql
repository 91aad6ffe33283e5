-- Pause (held) or resume a schedule (migration 0023); answers whether its paused flag changed.
-- Its due deliveries' due_queue entries are held, or let go, in this transaction: a held entry
-- is never walked by a tick, and a pending lease on one ends here (its message finds no lease).
-- No delivery row is locked (as a tenant's pause): a consumer between its re-check and the
-- statement that starts an attempt is stopped by that statement, which reads the flag. A
-- delivery handed back at the same moment may enter the due set unheld once; the consumer's
-- re-check hands it back again, held.
create or replace function hold_schedule(tenant text, key text, paused boolean,
                              now timestamptz default now())
returns boolean
language plpgsql set search_path from current as $$
#variable_conflict use_variable
declare
    cur schedules;
begin
    cur := lock_schedule(tenant, key);
    if paused and cur.state = 'ended' then
        raise exception using errcode = 'RM409', message = format(
            'schedule %L has finished: nothing is left to pause', key);
    end if;
    if cur.paused = paused then
        return false;
    end if;
    update schedules s set paused = hold_schedule.paused, updated_at = now where s.id = cur.id;
    update due_queue q set held = hold_schedule.paused, token = null, expires_at = null
    where q.id in (select d.id from deliveries d
                   where d.schedule_id = cur.id and d.tenant = cur.tenant
                     and d.state in ('scheduled', 'retrying'))
      and q.held is distinct from hold_schedule.paused;
    return true;
end $$;

revoke all on function hold_schedule(text, text, boolean, timestamptz) from public;
