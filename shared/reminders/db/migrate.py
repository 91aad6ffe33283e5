"""Forward-only numbered migrations, applied in order, each once, under an advisory lock; then
the service's functions, views and triggers, each defined once in a file of its own
(``objects/<kind>/<name>.sql``) and re-applied whenever that file changes.

Tables, indexes and data changes are numbered migrations (``migrations/NNNN_name.sql``), never
edited once shipped. A function, view or trigger is a repeatable object, as Flyway's repeatable
migrations or Graphile Migrate's ``current.sql`` are: its file holds its latest definition
(``create or replace``), with its grants, and ``schema_objects`` records each file's digest.
Every run, in the same transaction and under the same lock, after the numbered migrations,
applies each file whose digest differs from the recorded one or whose object is not in the
catalog (a numbered migration dropped it, for instance to change a view's columns).

The order is fixed: functions, then views, then triggers, each kind by file name. Function
bodies are not checked when they are created (``check_function_bodies`` off, as pg_dump
restores them), so a function may call one whose file sorts after it; a view that reads
another view sorts after it by name. An object that goes away is dropped by a numbered
migration, in the same change that removes its file. A change of a function's arguments or
result type, or of a view's columns other than added at the end, is made by a numbered
migration that drops the old one first (``create or replace`` cannot): the file then creates it
anew. Numbered migrations run before the objects are re-applied, so none may rely on an
object's new definition.

One table is data of the code rather than of a migration: ``time_zones``, the zone names of the
tzdata wheel the code ships with, written when that list changes (recorded in
``schema_objects`` as ``data/time_zones``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

from reminders import db, timezones
from reminders.config import DEFAULT_SCHEMA, check_schema
from reminders.errors import ConfigError

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_LOCK_KEY = 0x52454D49  # any constant shared by every migrator
_OBJECT = re.compile(r"^([a-z][a-z0-9_]*)\.sql$")
OBJECT_KINDS = ("functions", "views", "triggers")  # the order they are applied in


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


@dataclass(frozen=True)
class SqlObject:
    """One function, view or trigger: ``objects/<kind>/<name>.sql``, named as the object."""

    kind: str
    name: str
    sql: str

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.name}"

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def objects() -> list[SqlObject]:
    """Every repeatable object, in the order they are applied."""
    found: list[SqlObject] = []
    root = resources.files("reminders.db").joinpath("objects")
    for kind in OBJECT_KINDS:
        entries = sorted(root.joinpath(kind).iterdir(), key=lambda e: e.name)
        for entry in entries:
            if not entry.name.endswith(".sql"):
                continue
            match = _OBJECT.match(entry.name)
            if match is None:
                raise RuntimeError(f"objects/{kind}/{entry.name}: a file is named as its "
                                   f"object, lower case: name.sql")
            found.append(SqlObject(kind, match[1], entry.read_text()))
    return found


def available() -> list[Migration]:
    found = []
    for entry in resources.files("reminders.db").joinpath("migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations must be numbered 0001.. without gaps, found {versions}")
    return found


def apply(conn: db.Connection, schema: str = DEFAULT_SCHEMA, *,
          session: db.SessionDefaults | None = None) -> list[int]:
    """Apply every migration not yet applied to the service's schema (created if missing),
    then every repeatable object that changed (:func:`apply_objects`), in one transaction;
    return the versions applied now. Neither names a schema: they run with ``search_path``
    set to it (which the functions capture as their own), and ``schema_migrations`` and
    ``schema_objects`` live in it too. Every run also
    writes the migrating login's session defaults in this database (``session``, or the
    defaults for ``schema``): its later sessions find the service's tables, through a pooler
    that refuses startup options as RDS Proxy does."""
    check_schema(schema)
    defaults = session or db.SessionDefaults(schema=schema)
    if defaults.schema != schema:
        raise ValueError(f"session defaults for schema {defaults.schema!r}, migrating {schema!r}")
    applied_now: list[int] = []
    with db.transaction(conn):
        # A migration may wait for a lock or run long: the login's own timeouts (which this
        # run writes) are for the service's statements, not for these.
        db.execute_script(conn, "set local lock_timeout = 0; set local statement_timeout = 0")
        db.execute_script(conn, f"select pg_advisory_xact_lock({_LOCK_KEY})")
        _refuse_a_moved_schema(conn, schema)
        db.execute_script(conn, f"create schema if not exists {schema}")
        db.execute_script(conn, f"set local search_path to {schema}, pg_temp")
        db.execute_script(
            conn,
            "create table if not exists schema_migrations ("
            " version integer primary key, name text not null,"
            " applied_at timestamptz not null default now())",
        )
        done = {r["version"] for r in db.fetch_all(conn, "migrations_applied")}
        for migration in available():
            if migration.version in done:
                continue
            db.execute_script(conn, migration.sql)
            db.execute(conn, "migration_record", {"version": migration.version,
                                                 "name": migration.name})
            applied_now.append(migration.version)
        apply_objects(conn)
        db.configure_login(conn, defaults)
        # The application logins grant_tenant mapped: their statement timeout, again.
        if db.fetch_one(conn, "client_logins_configurable"):
            db.fetch_one(conn, "client_logins_configure")
    return applied_now


def apply_objects(conn: db.Connection) -> list[str]:
    """Apply every repeatable object whose file changed since it was last applied, or whose
    object is missing; return their keys (``functions/schedule_for``, ...). Runs inside
    :func:`apply`'s transaction, with ``search_path`` set to the service's schema."""
    db.execute_script(
        conn,
        "create table if not exists schema_objects ("
        " name text primary key, digest text not null,"
        " applied_at timestamptz not null default now())")
    recorded = {r["name"]: r["digest"] for r in db.fetch_all(conn, "schema_objects_recorded")}
    present = {(r["kind"], r["name"]) for r in db.fetch_all(conn, "schema_objects_present")}
    wanted = objects()
    applied: list[str] = []
    db.execute_script(conn, "set local check_function_bodies = off")
    for obj in wanted:
        if recorded.get(obj.key) == obj.digest and (obj.kind, obj.name) in present:
            continue
        db.execute_script(conn, obj.sql)
        db.execute(conn, "schema_object_record", {"name": obj.key, "digest": obj.digest})
        applied.append(obj.key)
    db.execute_script(conn, "set local check_function_bodies to default")
    if _sync_time_zones(conn, recorded.get(TIME_ZONES)):
        applied.append(TIME_ZONES)
    db.execute(conn, "schema_objects_forget", {"names": [*(o.key for o in wanted), TIME_ZONES]})
    return applied


TIME_ZONES = "data/time_zones"


def _sync_time_zones(conn: db.Connection, recorded: str | None) -> bool:
    """Make ``time_zones`` (migration 0019) the zone names of the tzdata wheel the code ships
    with, which the SQL API checks a rule's zone against, when the list differs from the one
    recorded; return whether it did."""
    if not db.fetch_all(conn, "time_zones_table"):
        return False  # a migrator stopped before 0019 (an upgrade test's older release)
    names = sorted(timezones.available_zones())
    digest = hashlib.sha256("\n".join(names).encode()).hexdigest()
    if digest == recorded:
        return False
    db.execute(conn, "time_zones_replace", {"names": names})
    db.execute(conn, "schema_object_record", {"name": TIME_ZONES, "digest": digest})
    return True


def _refuse_a_moved_schema(conn: db.Connection, schema: str) -> None:
    """A deployment from before the schema setting keeps its tables in ``public``: migrating a
    new, empty schema beside them would hide every reminder from the service."""
    if schema == "public":
        return
    found = conn.execute(
        "select to_regclass(%s) is not null as target, to_regclass('public.schema_migrations')"
        " is not null as legacy", (f"{schema}.schema_migrations",)).fetchone()
    if found is not None and found["legacy"] and not found["target"]:
        raise ConfigError(
            f"the service's tables are in schema public (public.schema_migrations exists) and "
            f"REMINDERS_DB_SCHEMA is {schema!r}: set REMINDERS_DB_SCHEMA=public, or move the "
            f"tables with ALTER TABLE ... SET SCHEMA {schema} first")
