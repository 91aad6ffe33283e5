-- The Deliveries page filtered by a kind or a channel few deliveries have: their own range of
-- one of these, in due order (the page's first order), so five rows of a kind among 300,000
-- are read as five, not found by walking the due index to its end (8,140 buffers). Sorted by
-- last change, the planner reads the same range and sorts it when the kind's rows are few (the
-- column statistics say so); a kind most rows have walks the last-change index as before.
create index deliveries_browse_kind_due on deliveries (kind, due_at, id);
create index deliveries_browse_channel_due on deliveries (channel, due_at, id);
