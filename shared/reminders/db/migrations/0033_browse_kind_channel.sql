-- The Deliveries page filtered by a kind or a channel few deliveries have: their own range of
-- one of these, in due order (the page's first order), so five rows of a kind among 300,000
-- are read as five, not found by walking the due index to its end (8,140 buffers). Sorted by
-- last change, the planner reads the same range and sorts it when the kind's rows are few (the
-- index's statistics say so); a kind most rows have walks the last-change index as before.
-- The kind's index is on the expression `kind || ''`, which the Deliveries page's statements
-- filter by, and nothing else does: an index led by the kind itself was taken by the
-- retention purge for its per-kind range (read the whole kind, then sorted: 7,782 buffers to
-- purge ten beside 100,000 rows kept longer), where only the terminal-age index
-- (deliveries_terminal_kind_age, migration 0020) reads just the rows it removes.
create index deliveries_browse_kind_due on deliveries ((kind || ''), due_at, id);
create index deliveries_browse_channel_due on deliveries (channel, due_at, id);
