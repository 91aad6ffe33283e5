"""Migrations applied to an empty database give exactly the checked-in schema.

The expected schema lives in ``expected_schema.txt`` next to this file. After adding a migration,
regenerate it with ``REMINDERS_UPDATE_SCHEMA=1 pytest tests/integration/test_migrations.py`` and
review the diff like any other change.
"""

from __future__ import annotations

import difflib
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from reminders import db
from reminders.config import DEFAULT_SCHEMA
from reminders.db import migrate
from reminders.errors import ConfigError
from tests.conftest import PgCluster

SNAPSHOT = Path(__file__).with_name("expected_schema.txt")
UPDATE_ENV = "REMINDERS_UPDATE_SCHEMA"


@pytest.fixture
def empty_database(pg_cluster: PgCluster) -> Iterator[str]:
    """A database with nothing in it, on the server itself: these tests are of the migrator,
    each reading back on a session opened after it ran (the login's role settings apply to the
    sessions that start after them; through the pooler, a server connection opened earlier
    would keep the server's defaults). The migrations through the pooler, as the stack's
    custom resource runs them through RDS Proxy, are tests/infra/test_infra_app_role.py's."""
    pg_server = pg_cluster.direct
    name = f"migrate_{uuid.uuid4().hex[:12]}"
    url = db.create_database(pg_server, name)
    yield url
    with db.connect(pg_server) as admin:
        admin.execute(sql.SQL("drop database if exists {} with (force)").format(
            sql.Identifier(name)))


def render_schema(conn: db.Connection, schema: str = DEFAULT_SCHEMA, *,
                  bodies: bool = False) -> str:
    """The service's schema as sorted, stable text: tables and columns (type, nullability,
    default, identity), constraints (kind, name, definition), indexes, triggers, other
    relations (views) with their grants, and functions with their arguments, security, fixed
    settings (search_path) and grants. With ``bodies``, also each function's whole definition
    and each view's query: to compare two databases with each other (an upgraded one and a
    fresh one), not for the checked-in snapshot."""
    lines: list[str] = []
    tables = [r["relname"] for r in conn.execute(
        "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace"
        " where n.nspname = %s and c.relkind in ('r', 'p') order by c.relname", (schema,))]
    for table in tables:
        lines.append(f"table {table}")
        for col in conn.execute(
                "select a.attname, format_type(a.atttypid, a.atttypmod) as type, a.attnotnull,"
                "       pg_get_expr(d.adbin, d.adrelid) as default_expr, a.attidentity"
                " from pg_attribute a"
                " left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum"
                " where a.attrelid = %s::regclass and a.attnum > 0 and not a.attisdropped"
                " order by a.attnum", (f"{schema}.{table}",)):
            parts = [f"  column {col['attname']} {col['type']}",
                     "not null" if col["attnotnull"] else "null"]
            if col["attidentity"]:
                parts.append("identity " + {"a": "always", "d": "by default"}[col["attidentity"]])
            if col["default_expr"] is not None:
                parts.append(f"default {col['default_expr']}")
            lines.append(" ".join(parts))
        for con in conn.execute(
                "select conname, contype, pg_get_constraintdef(oid) as definition"
                " from pg_constraint where conrelid = %s::regclass"
                " order by contype, conname", (f"{schema}.{table}",)):
            kind = {"c": "check", "f": "foreign key", "p": "primary key", "u": "unique",
                    "x": "exclude", "n": "not null"}.get(con["contype"], con["contype"])
            if kind == "not null":
                continue  # shown on the column
            lines.append(f"  constraint {con['conname']} {kind}: {con['definition']}")
        for idx in conn.execute(
                "select indexname, indexdef from pg_indexes"
                " where schemaname = %s and tablename = %s order by indexname",
                (schema, table)):
            definition = re.sub(rf"\b{schema}\.", "", idx["indexdef"])
            lines.append(f"  index {idx['indexname']}: {definition}")
        for trg in conn.execute(
                "select tgname, pg_get_triggerdef(oid) as definition from pg_trigger"
                " where tgrelid = %s::regclass and not tgisinternal order by tgname",
                (f"{schema}.{table}",)):
            definition = re.sub(rf"\b{schema}\.", "", trg["definition"])
            lines.append(f"  trigger {trg['tgname']}: {definition}")
    others = conn.execute(
        "select c.relkind, c.relname from pg_class c"
        " join pg_namespace n on n.oid = c.relnamespace"
        " where n.nspname = %s and c.relkind not in ('r', 'p', 'i', 'S')"
        " order by c.relname", (schema,)).fetchall()
    for r in others:
        lines.append(f"relation {r['relname']} kind {r['relkind']}")
        lines += [f"  grant {g}" for g in _grants(conn, "pg_class", "relacl", "relowner",
                                                   f"{schema}.{r['relname']}", "regclass")]
        if bodies and r["relkind"] == "v":
            view = conn.execute("select pg_get_viewdef(%s::regclass) as d",
                                (f"{schema}.{r['relname']}",)).fetchone()
            lines.append(f"  query: {view['d'] if view else None}")
    functions = conn.execute(
        "select p.oid, p.proname, pg_get_function_identity_arguments(p.oid) as args,"
        "       pg_get_function_result(p.oid) as result, p.prosecdef, p.proconfig,"
        "       l.lanname, p.provolatile"
        " from pg_proc p join pg_namespace n on n.oid = p.pronamespace"
        " join pg_language l on l.oid = p.prolang"
        " where n.nspname = %s order by p.proname, args", (schema,)).fetchall()
    for r in functions:
        volatility = {"i": "immutable", "s": "stable", "v": "volatile"}[r["provolatile"]]
        lines.append(f"function {r['proname']}({r['args']}) -> {r['result']}"
                     + (" security definer" if r["prosecdef"] else "")
                     + f" language {r['lanname']} {volatility}")
        config = [re.sub(rf"\b{schema}\b", "<schema>", c) for c in r["proconfig"] or []]
        lines += [f"  set {c}" for c in config]
        lines += [f"  grant {g}" for g in _grants(conn, "pg_proc", "proacl", "proowner",
                                                   r["oid"], "oid")]
        if bodies:
            found = conn.execute("select pg_get_functiondef(%s) as d", (r["oid"],)).fetchone()
            lines.append(f"  definition: {found['d'] if found else None}")
    return "\n".join(lines) + "\n"


def _grants(conn: db.Connection, catalog: str, acl: str, owner: str, obj: object,
            cast: str) -> list[str]:
    """Who other than the owner may do what with one object (PUBLIC included)."""
    rows = conn.execute(
        f"select coalesce(nullif(r.rolname, ''), 'PUBLIC') as grantee,"
        f"       string_agg(a.privilege_type, ', ' order by a.privilege_type) as what"
        f" from {catalog} o cross join lateral aclexplode(o.{acl}) a"
        f" left join pg_roles r on r.oid = a.grantee"
        f" where o.oid = %s::{cast} and a.grantee <> o.{owner}"
        f" group by 1 order by 1", (obj,)).fetchall()
    return [f"{r['what']} to {r['grantee']}" for r in rows]


def test_migrations_are_numbered_from_one_without_gaps() -> None:
    found = migrate.available()
    assert [m.version for m in found] == list(range(1, len(found) + 1))
    assert found[0].version == 1 and found[0].name == "initial"
    for m in found:
        assert re.fullmatch(r"[a-z0-9_]+", m.name)
        assert m.sql.strip()


def test_migrating_an_empty_database_gives_the_expected_schema(empty_database: str) -> None:
    versions = [m.version for m in migrate.available()]
    with db.connect(empty_database) as conn:
        assert conn.execute("select count(*) as n from pg_tables where schemaname = %s",
                            (DEFAULT_SCHEMA,)).fetchone() == {"n": 0}
        assert migrate.apply(conn) == versions
        assert migrate.apply(conn) == []
    with db.connect(empty_database) as conn:
        recorded = [(r["version"], r["name"]) for r in conn.execute(
            "select version, name from schema_migrations order by version")]
        assert recorded == [(m.version, m.name) for m in migrate.available()]
        kinds = conn.execute("select name, stale_after, max_attempts from kinds").fetchall()
        assert kinds == [{"name": "default", "stale_after": None, "max_attempts": 8}]
        actual = render_schema(conn)
    if os.environ.get(UPDATE_ENV) == "1":
        SNAPSHOT.write_text(actual)
    assert SNAPSHOT.exists(), f"{SNAPSHOT.name} is missing; run with {UPDATE_ENV}=1 to create it"
    expected = SNAPSHOT.read_text()
    if actual != expected:
        diff = "".join(difflib.unified_diff(
            expected.splitlines(keepends=True), actual.splitlines(keepends=True),
            fromfile=f"{SNAPSHOT.name} (expected)", tofile="migrated database (actual)"))
        pytest.fail(f"schema differs from {SNAPSHOT.name}; if intended, rerun with "
                    f"{UPDATE_ENV}=1 and review the change:\n{diff}", pytrace=False)


def test_the_snapshot_render_is_deterministic(empty_database: str) -> None:
    with db.connect(empty_database) as conn:
        migrate.apply(conn)
    with db.connect(empty_database) as conn:
        first = render_schema(conn)
        assert render_schema(conn) == first
        conn.execute("alter table tenants add column note text")
        changed = render_schema(conn)
    assert "  column note text null" in changed.splitlines()
    assert "  column note text null" not in first.splitlines()


def test_a_migration_that_fails_applies_nothing(empty_database: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    real = migrate.available()
    broken = [*real, migrate.Migration(len(real) + 1, "broken",
                                       "create table half_done (id int); select 1/0;")]
    monkeypatch.setattr(migrate, "available", lambda: broken)
    with db.connect(empty_database) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            migrate.apply(conn)
        tables = conn.execute("select count(*) as n from pg_tables where schemaname = %s",
                              (DEFAULT_SCHEMA,)).fetchone()
        assert tables == {"n": 0}
        monkeypatch.setattr(migrate, "available", lambda: real)
        assert migrate.apply(conn) == [m.version for m in real]


def test_the_schema_installs_beside_an_applications_own_tables(empty_database: str) -> None:
    """An application's database with tables of the same names: the service's schema goes
    beside them, under the configured name, and neither side sees the other's rows."""
    with db.connect(empty_database) as app:
        app.execute("create table public.schedules (id int primary key, what text)")
        app.execute("create table public.deliveries (id int primary key)")
        app.execute("insert into public.schedules values (1, 'the application''s own')")
    with db.connect(empty_database) as conn:
        assert migrate.apply(conn, "svc_reminders") == [m.version for m in migrate.available()]
        assert migrate.apply(conn, "svc_reminders") == []
    with db.connect(empty_database) as conn:  # its search_path is the service's schema now
        assert conn.execute("select count(*) as n from schedules").fetchone() == {"n": 0}
        assert conn.execute("select version from schema_migrations order by version limit 1"
                            ).fetchone() == {"version": 1}
        assert render_schema(conn, "svc_reminders") == SNAPSHOT.read_text()
    with db.connect(empty_database) as app:
        assert app.execute("select what from public.schedules").fetchall() == [
            {"what": "the application's own"}]
        assert app.execute("select to_regclass('public.schema_migrations') as t").fetchone() == {
            "t": None}


def test_a_deployment_with_its_tables_in_public_is_not_migrated_beside_them(
        empty_database: str) -> None:
    with db.connect(empty_database) as conn:
        migrate.apply(conn, "public")
        with pytest.raises(ConfigError, match="REMINDERS_DB_SCHEMA=public"):
            migrate.apply(conn, "reminders")
        assert conn.execute("select to_regnamespace('reminders') as s").fetchone() == {"s": None}
