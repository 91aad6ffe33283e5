-- Each tenant's due work in lease order: the scanner takes a share from every tenant with due
-- work (fair across tenants) and finds the oldest due per tenant without walking a backlog.
create index deliveries_tenant_due on deliveries (tenant, due_at, id)
    where state in ('scheduled', 'retrying');
