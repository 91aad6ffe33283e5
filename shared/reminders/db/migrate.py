"""Forward-only numbered migrations, applied in order, each once, under an advisory lock."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from reminders import db
from reminders.config import DEFAULT_SCHEMA, check_schema
from reminders.errors import ConfigError

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_LOCK_KEY = 0x52454D49  # any constant shared by every migrator


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


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
    """Apply every migration not yet applied to the service's schema (created if missing);
    return the versions applied now. The migrations name no schema: they run with
    ``search_path`` set to it, and ``schema_migrations`` lives in it too. Every run also
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
        db.configure_login(conn, defaults)
    return applied_now


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
