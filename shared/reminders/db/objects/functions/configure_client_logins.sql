-- Every mapped application login's session defaults again (configure_client_login): the
-- migrator runs it each time, as it writes the service login's. Answers the logins written.
create or replace function configure_client_logins() returns integer
language sql set search_path from current as $$
    select count(*)::integer from (
        select configure_client_login(t.login) as done from tenant_logins t order by t.login
    ) c where c.done
$$;

revoke all on function configure_client_logins() from public;
