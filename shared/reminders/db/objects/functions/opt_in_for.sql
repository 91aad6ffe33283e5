-- Undo an opt-out; answers whether there was one.
create or replace function opt_in_for(tenant text, recipient text, channel text) returns boolean
language plpgsql set search_path from current as $$
#variable_conflict use_variable
declare
    person text;
    removed integer;
begin
    perform check_tenant(tenant);
    perform check_channel(channel);
    person := check_recipient(recipient);
    delete from opt_outs o
    where o.tenant = tenant and o.recipient = person and o.channel = channel;
    get diagnostics removed = row_count;
    return removed > 0;
end $$;

revoke all on function opt_in_for(text, text, text) from public;
