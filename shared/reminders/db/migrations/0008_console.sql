-- The console's reads, each an index range however large the table:
-- parked deliveries (the operator's worklist) by due time, a page at a time;
create index deliveries_parked on deliveries (due_at, id)
    where state in ('unknown', 'dead', 'failed', 'stale');
-- sends by when they were sent (a sent row's updated_at), with the occurrence they were due
-- for, so lateness over the last hour or day is an index-only range;
create index deliveries_sent_at on deliveries (updated_at) include (occurrence_at)
    where state = 'sent';
-- and what operators did, with who and why: bulk reconciles, tenant pauses and resumes
-- (each reconciled delivery also keeps its own operator event).
create table operator_actions (
    id bigint generated always as identity primary key,
    at timestamptz not null,
    actor text not null,
    via text not null check (via in ('cli', 'console')),
    action text not null,
    tenant text null,
    reason text not null check (reason <> ''),
    detail jsonb not null default '{}'::jsonb
);
create index operator_actions_at on operator_actions (at, id);
