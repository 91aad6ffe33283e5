-- Reschedule and cancel: every pending delivery of the schedule stops here, fenced on the
-- send in flight in this same statement. One that is not sending is suppressed and loses its
-- lease (its holder's fenced writes are refused, its message dropped on re-check). One whose
-- send is in flight keeps its lease and is marked superseded: its holder records what the
-- send did, and it is never tried again.
create or replace function supersede_pending(tenant text, schedule_id bigint, reason text,
                                  now timestamptz)
returns table (id bigint, recipient text, occurrence_at timestamptz, state text)
language sql set search_path from current as $$
    update deliveries d set
        state = case when d.send_attempt is null then 'suppressed' else d.state end,
        reason = case when d.send_attempt is null then $3 else d.reason end,
        superseded = case when d.send_attempt is null then null else $3 end,
        lease_token = case when d.send_attempt is null then null else d.lease_token end,
        lease_expires_at = case when d.send_attempt is null then null
                                else d.lease_expires_at end,
        received = case when d.send_attempt is null then false else d.received end,
        updated_at = $4
    where d.schedule_id = $2 and d.tenant = $1
      and d.state in ('scheduled', 'leased', 'retrying') and d.superseded is null
    returning d.id, d.recipient, d.occurrence_at, d.state
$$;

revoke all on function supersede_pending(text, bigint, text, timestamptz) from public;
