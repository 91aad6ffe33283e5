-- Throughput as it happens (`reminders throughput`, the console's live overview): the attempts
-- finished in a window, by minute, channel and outcome, read as an index range over the window
-- however long the ledger is. Open attempts (finished_at null) are not in it.
create index attempts_finished on attempts (finished_at) include (tenant, delivery_id, outcome)
    where finished_at is not null;

-- The Attention page of one tenant's deliveries in one parked state (the usual worklist: "acme's
-- dead ones"), a page off the index in due order, however many the tenant has: without it the
-- page read every one of the tenant's deliveries in that state and sorted them.
create index deliveries_parked_tenant_state on deliveries (tenant, state, due_at, id)
    where state in ('unknown', 'dead', 'failed', 'stale');
