-- The Attention page filtered by kind (alone, with a tenant, with a state) or by recipient, and
-- the Deliveries page filtered by recipient, a keyset page at a time however large the table:
-- a delivery carries its schedule's kind (0020: filled on every insert by deliveries_kind, and
-- fixed once the schedule exists by schedules_kind_fixed), so the pages filter on d.kind and
-- read one range of these per parked state (deliveries_parked_page_by_state), where the filter
-- on the schedule's kind was applied after the join (1,166 buffers for a tenant and kind's page
-- at 1,000,000 rows). A recipient nobody has is one probe, not a walk of the whole due order.
create index deliveries_parked_kind_state on deliveries (kind, state, due_at, id)
    where state in ('unknown', 'dead', 'failed', 'stale');
create index deliveries_parked_tenant_kind_state on deliveries (tenant, kind, state, due_at, id)
    where state in ('unknown', 'dead', 'failed', 'stale');
create index deliveries_parked_recipient_state on deliveries (recipient, state, due_at, id)
    where state in ('unknown', 'dead', 'failed', 'stale');
create index deliveries_browse_recipient_due on deliveries (recipient, due_at, id);
