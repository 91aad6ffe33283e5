-- Who did it, and why, for every operator action.
-- An action on one delivery (reconcile, retry) is its delivery_events row; it now names who.
alter table delivery_events add column who text;

-- An action on a tenant (pause, resume), an endpoint (add, remove, rotate its secret), a kind
-- (set), a schedule (cancel) or a filtered set of deliveries (a bulk reconcile, whose
-- deliveries each keep their own event too): one row each, through the command line, the
-- console or the operations function. `show` lists, with a delivery, the latest ones on
-- its tenant, its endpoint, its kind and its schedule.
create table operator_actions (
    id       bigint generated always as identity primary key,
    at       timestamptz not null,
    who      text not null,
    action   text not null,
    object   text not null
             check (object in ('tenant', 'endpoint', 'kind', 'schedule', 'deliveries')),
    tenant   text,   -- null: it concerns every tenant (a shared endpoint, a kind)
    name     text not null,  -- the tenant, the endpoint's URL, the kind, the schedule key or
                             -- the filters of a set of deliveries
    reason   text,
    via      text not null default 'cli' check (via in ('cli', 'console', 'ops')),
    detail   jsonb not null default '{}'::jsonb   -- e.g. a bulk action's filters and counts
);
create index operator_actions_object on operator_actions (object, name, id);
create index operator_actions_at on operator_actions (at, id);
