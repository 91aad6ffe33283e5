-- The operator maps an application's login role to its tenant (and back), and gives the login
-- its statement timeout (configure_client_login).
create or replace function grant_tenant(login text, tenant text) returns void
language plpgsql set search_path from current as $$
#variable_conflict use_variable
begin
    perform check_tenant(tenant);
    if not exists (select 1 from pg_roles r where r.rolname = login) then
        raise exception using errcode = 'RM404', message = format(
            'login: no role named %s', coalesce(quote_literal(login), 'NULL'));
    end if;
    insert into tenants (id) values (tenant) on conflict on constraint tenants_pkey do nothing;
    insert into tenant_logins as t (login, tenant) values (login, tenant)
    on conflict on constraint tenant_logins_pkey do update set tenant = excluded.tenant,
                                                     granted_at = now();
    perform configure_client_login(login);
end $$;

revoke all on function grant_tenant(text, text) from public;
