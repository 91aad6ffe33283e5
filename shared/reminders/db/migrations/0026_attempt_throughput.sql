-- Throughput as it happens (`reminders throughput`, the console's live overview): the attempts
-- finished in a window, by minute, channel and outcome, read as an index range over the window
-- however long the ledger is. Open attempts (finished_at null) are not in it.
create index attempts_finished on attempts (finished_at) include (tenant, delivery_id, outcome)
    where finished_at is not null;
