-- The console's list of every delivery, in any state, a keyset page at a time however large
-- the table: by due time (oldest first) and by last change (newest first).
create index deliveries_browse_due on deliveries (due_at, id);
create index deliveries_browse_updated on deliveries (updated_at, id);
-- A tenant's deliveries in either order (the console's usual filter).
create index deliveries_browse_tenant_due on deliveries (tenant, due_at, id);
create index deliveries_browse_tenant_updated on deliveries (tenant, updated_at, id);
