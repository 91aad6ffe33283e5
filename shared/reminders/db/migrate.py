"""Forward-only numbered migrations, applied in order, each once, under an advisory lock."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from reminders import db

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_LOCK_KEY = 0x52454D49  # any constant shared by every migrator
# Numbers assigned to migrations being written on other branches: until they land, the gap they
# leave is allowed. Empty again once every number up to the highest exists.
RESERVED: frozenset[int] = frozenset({6})


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
    top = versions[-1] if versions else 0
    expected = [v for v in range(1, top + 1) if v not in RESERVED or v in versions]
    if versions != expected:
        raise RuntimeError(f"migrations must be numbered 0001.. without gaps, found {versions}")
    return found


def apply(conn: db.Connection) -> list[int]:
    """Apply every migration not yet applied; return the versions applied now."""
    applied_now: list[int] = []
    with db.transaction(conn):
        db.execute_script(conn, f"select pg_advisory_xact_lock({_LOCK_KEY})")
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
    return applied_now
