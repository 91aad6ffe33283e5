-- The zone names the service can expand a rule in: exactly those of the tzdata wheel the code
-- ships with (reminders.timezones.available_zones), which the migrator writes here on every
-- run whose list differs from the one recorded (schema_objects, name 'data/time_zones'). The
-- SQL API refuses any other zone at entry, as the Python API does; Postgres's own zone list
-- (pg_timezone_names) comes from the server's tzdata, another release on another schedule.
create table time_zones (
    name text primary key
);
