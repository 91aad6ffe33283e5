-- The trigger functions on deliveries (0011-0013) resolved their names (due_queue,
-- delivery_counts, schedules) on the search path of whoever fired them. An administrator's
-- UPDATE from psql with the default search path failed (relation "due_queue" does not exist)
-- or, where an application login may create in public, wrote that login's tables of the same
-- names and ran its triggers with the administrator's rights. Each now has the search path
-- every other function of the service has (this schema, then pg_temp), fixed in its
-- definition. On Postgres 17 and later a function's SET search_path costs no re-plan of its
-- statements (the search path is the same at every call); measured on the 100-row lease
-- statement and a consumer batch's writes, alternating with and without: 0.97x and 1.00x.
alter function delivery_counts_inserted() set search_path from current;
alter function delivery_counts_updated() set search_path from current;
alter function delivery_counts_deleted() set search_path from current;
alter function delivery_counts_truncated() set search_path from current;
alter function due_queue_inserted() set search_path from current;
alter function due_queue_changed() set search_path from current;
alter function due_queue_deleted() set search_path from current;
alter function due_queue_truncated() set search_path from current;
