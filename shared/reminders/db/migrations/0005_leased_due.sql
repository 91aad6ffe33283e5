-- The oldest due instant among live leases, in one index probe (the scanner's lateness figure
-- reads it every tick; walking every live lease grew with the in-flight budget).
create index deliveries_leased_due on deliveries (due_at) where state = 'leased';
