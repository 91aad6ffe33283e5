-- The console's reads, each an index range however large the table:
-- parked deliveries (the operator's worklist) by due time, a page at a time;
create index deliveries_parked on deliveries (due_at, id)
    where state in ('unknown', 'dead', 'failed', 'stale');
-- sends by when they were sent (a sent row's updated_at), with the occurrence they were due
-- for, so lateness over the last hour or day is an index-only range.
create index deliveries_sent_at on deliveries (updated_at) include (occurrence_at)
    where state = 'sent';
