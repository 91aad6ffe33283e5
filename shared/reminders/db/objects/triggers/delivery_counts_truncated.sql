-- delivery_counts (0011): emptied with the deliveries.
create or replace trigger delivery_counts_truncated after truncate on deliveries
    for each statement execute function delivery_counts_truncated();
