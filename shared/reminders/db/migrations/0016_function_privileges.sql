-- Functions are executable by PUBLIC unless revoked. 0009 revoked it for the functions that
-- existed then, and its `alter default privileges in schema ... revoke` could not take back
-- the global default (a schema's default privileges only add to the global ones), so every
-- function a later migration made (0010-0014's trigger functions, check_url_characters, the
-- new schedule_for) was executable by any login, a tenant's included. Revoked again, and the
-- migrating role's own default is changed, so functions made from now on are nobody's but
-- their owner's until granted: reminders_client keeps exactly the client functions 0009
-- granted, and the service's role is granted all of them by the migrate function.
do $$
begin
    execute format('revoke all on all functions in schema %I from public', current_schema());
end $$;
alter default privileges revoke execute on functions from public;
