-- The calling application's tenant: by the login it authenticated as (session_user, which
-- SET ROLE cannot change), never by an argument.
create or replace function my_tenant() returns text
language plpgsql stable security definer set search_path from current as $$
declare
    found_tenant text;
begin
    select t.tenant into found_tenant from tenant_logins t where t.login = session_user;
    if found_tenant is null then
        raise exception using errcode = 'RM403', message = format(
            'login %s is not an application login of any tenant; the operator maps it with '
            'grant_tenant(login, tenant)', quote_literal(session_user));
    end if;
    return found_tenant;
end $$;

revoke all on function my_tenant() from public;
grant execute on function my_tenant() to reminders_client;
