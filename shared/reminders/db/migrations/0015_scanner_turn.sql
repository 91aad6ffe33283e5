-- Scanners take turns for a whole tick. Until now the turn was a session advisory lock, which
-- a pooler in transaction mode breaks (the unlock can run on another server connection, and
-- the lock stays held on the first one for good) and RDS Proxy pins. The turn is now this row:
-- taken by one statement when free or expired, ended by its holder's token.
create table scanner_turn (
    id         smallint primary key default 1 check (id = 1),
    holder     uuid,
    held_until timestamptz
);
insert into scanner_turn default values;
