-- Stop sending to a recipient on a channel; answers whether the opt-out is new. Pending
-- deliveries stay and are suppressed when they come due (opting back in before then restores
-- them). It takes the row locks of the recipient's pending deliveries before it commits, so an
-- attempt start either commits before it or sees it.
create or replace function opt_out_for(tenant text, recipient text, channel text,
                            now timestamptz default now())
returns boolean
language plpgsql set search_path from current as $$
#variable_conflict use_variable
declare
    person text;
    added integer;
begin
    perform check_tenant(tenant);
    perform check_channel(channel);
    person := check_recipient(recipient);
    insert into tenants (id) values (tenant) on conflict on constraint tenants_pkey do nothing;
    insert into opt_outs (tenant, recipient, channel, created_at)
    values (tenant, person, channel, now) on conflict do nothing;
    get diagnostics added = row_count;
    perform 1 from deliveries d
    where d.tenant = tenant and d.recipient = person and d.channel = channel
      and d.state in ('scheduled', 'leased', 'retrying')
    order by d.id
    for update;
    return added > 0;
end $$;

revoke all on function opt_out_for(text, text, text, timestamptz) from public;
