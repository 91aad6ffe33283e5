-- The Attention page filtered by tenant, by state or by both, a keyset page at a time however
-- many parked rows the tenant or the state has: one parked state's rows by due time, of one
-- tenant or of all (deliveries_parked_page_by_state reads one range of these per parked state
-- and merges them in due order). Only parked rows are in them.
create index deliveries_parked_tenant_state on deliveries (tenant, state, due_at, id)
    where state in ('unknown', 'dead', 'failed', 'stale');
create index deliveries_parked_state on deliveries (state, due_at, id)
    where state in ('unknown', 'dead', 'failed', 'stale');
