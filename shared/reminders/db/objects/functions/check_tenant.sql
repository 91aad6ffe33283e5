-- A tenant id as every caller names it.
create or replace function check_tenant(tenant text) returns text
language plpgsql immutable set search_path from current as $$
begin
    if tenant is null or tenant !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$' then
        raise exception using errcode = 'RM400', message = format(
            'tenant must be 1-200 letters, digits or _.:- , got %s',
            coalesce(quote_literal(tenant), 'NULL'));
    end if;
    return tenant;
end $$;

revoke all on function check_tenant(text) from public;
