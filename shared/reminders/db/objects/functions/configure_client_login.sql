-- An application login's session defaults, as role settings in this database: the statement
-- timeout of tenant_defaults (client_statement_timeout_ms), so one application's runaway
-- statement is cancelled rather than holding the shared database. Written by grant_tenant, and
-- again by every migration run for each mapped login (configure_client_logins). Answers
-- whether the login exists.
create or replace function configure_client_login(login text) returns boolean
language plpgsql set search_path from current as $$
#variable_conflict use_variable
declare
    timeout_ms integer;
begin
    if not exists (select 1 from pg_roles r where r.rolname = login) then
        return false;
    end if;
    select d.client_statement_timeout_ms into timeout_ms from tenant_defaults d;
    execute format('alter role %I in database %I set statement_timeout = %L', login,
                   current_database(), timeout_ms || 'ms');
    return true;
end $$;

revoke all on function configure_client_login(text) from public;
