-- The tenants list counts a tenant's active schedules up to a bound (operator.COUNTED_SCHEDULES):
-- these entries only, never the cancelled and ended schedules of its history.
create index schedules_tenant_active on schedules (tenant) where state = 'active';
