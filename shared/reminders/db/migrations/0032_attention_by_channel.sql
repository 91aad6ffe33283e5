-- The Attention page filtered by channel (alone or with the other filters): one range per
-- parked state of this index, merged in due order (deliveries_parked_page_by_state), so a
-- channel nobody's parked rows use is a probe, not a walk of every parked row (1,410 buffers
-- at 1,000,000 deliveries), and a channel's page reads a page.
create index deliveries_parked_channel_state on deliveries (channel, state, due_at, id)
    where state in ('unknown', 'dead', 'failed', 'stale');
