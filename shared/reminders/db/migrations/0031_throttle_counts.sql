-- Provider throttles counted by the minute (pacing.py): each send of a paced channel or
-- endpoint that its provider throttled adds one to its key's row for that minute, in one of a
-- few slots (so consumers throttled at the same moment rarely wait on one row), and `status`
-- reads an hour of them as at most 60 minutes x 8 slots rows a key, however many sends were
-- throttled. last_at: the latest throttle the row counts. No foreign key: a rate removed while
-- a batch records its throttles must not fail the batch; rows of a removed key are not read
-- (status starts from channel_rates) and go with the rest after a day.
create table rate_throttles (
    key text not null,
    minute timestamptz not null,
    slot smallint not null check (slot between 0 and 7),
    throttles bigint not null check (throttles > 0),
    last_at timestamptz not null,
    primary key (key, minute, slot)
);
-- `status` shows the endpoints throttled in the last hour first, the latest first, without
-- reading every paced endpoint (channel_rates is written only by rate changes and AIMD's
-- halvings, at most once a second a key).
create index channel_rates_throttled on channel_rates (throttled_at desc, key)
    where throttled_at is not null;
