-- Who did it, and why, for every operator action.
-- An action on one delivery (reconcile, retry) is its delivery_events row; it now names who.
alter table delivery_events add column who text;

-- An action on a tenant (pause, resume), an endpoint (add, remove, rotate its secret), a kind
-- (set) or a schedule (cancel): one row each. `show` lists, with a delivery, the latest ones on
-- its tenant, its endpoint, its kind and its schedule.
create table operator_actions (
    id       bigint generated always as identity primary key,
    at       timestamptz not null,
    who      text not null,
    action   text not null,
    object   text not null check (object in ('tenant', 'endpoint', 'kind', 'schedule')),
    tenant   text,   -- null: it concerns every tenant (a shared endpoint, a kind)
    name     text not null,  -- the tenant, the endpoint's URL, the kind or the schedule key
    reason   text
);
create index operator_actions_object on operator_actions (object, name, id);
