-- The operator's undoing of grant_tenant; answers whether the login was mapped.
create or replace function revoke_tenant(login text) returns boolean
language plpgsql set search_path from current as $$
#variable_conflict use_variable
begin
    delete from tenant_logins t where t.login = revoke_tenant.login;
    return found;
end $$;

revoke all on function revoke_tenant(text) from public;
