"""The application role the migrate custom resource creates, against the real embedded Postgres.

The setting mirrors RDS: the "master" is not a superuser but a CREATEROLE login that owns the
service's database and ran the migrations, as ``reminders_admin`` does on RDS. The role it
creates may read and write the service's tables and do nothing else.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from functions.migrate.handler import _app_login, _owns_database, ensure_app_role
from reminders import db
from reminders.db import migrate
from reminders.errors import ConfigError


@dataclass(frozen=True)
class Deployment:
    master_url: str
    app_url: str
    app_user: str
    database: str


def _roles_and_database() -> tuple[str, str, str]:
    suffix = f"{os.getpid()}_{id(object())}"
    return f"admin_{suffix}", f"app_{suffix}", f"rds_like_{suffix}"


@pytest.fixture
def deployment(pg_server: str) -> Iterator[Deployment]:
    admin, app, database = _roles_and_database()
    with db.connect(pg_server) as superuser:
        superuser.execute(
            # RDS's master user: CREATEDB and CREATEROLE, not a superuser.
            sql.SQL("create role {} login createdb createrole password 'admin-pw'").format(
                sql.Identifier(admin)
            )
        )
        superuser.execute(
            sql.SQL("create database {} owner {}").format(
                sql.Identifier(database), sql.Identifier(admin)
            )
        )
        # What a database created by RDS looks like: its owner owns the public schema.
        with db.connect(make_conninfo(pg_server, dbname=database)) as in_db:
            in_db.execute(sql.SQL("alter schema public owner to {}").format(sql.Identifier(admin)))
    master_url = make_conninfo(pg_server, dbname=database, user=admin, password="admin-pw")
    with db.connect(master_url) as master:
        migrate.apply(master)
    app_url = make_conninfo(pg_server, dbname=database, user=app, password="app-pw")
    try:
        yield Deployment(master_url, app_url, app, database)
    finally:
        db.drop_database(pg_server, database)
        with db.connect(pg_server) as superuser:
            for role in (app, admin):
                superuser.execute(sql.SQL("drop role if exists {}").format(sql.Identifier(role)))


def _create(deployment: Deployment, *, set_password: bool = True) -> bool:
    with db.connect(deployment.master_url) as master:
        return ensure_app_role(
            master, deployment.app_user, "app-pw", set_password=set_password, owns_database=True
        )


def _refused(conn: db.Connection, statement: str) -> None:
    with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
        conn.execute(statement)


def test_the_role_is_created_once_and_the_second_run_changes_nothing(
    deployment: Deployment,
) -> None:
    assert _create(deployment) is True
    assert _create(deployment, set_password=False) is False
    with db.connect(deployment.master_url) as master:
        row = master.execute(
            "select rolsuper, rolcreaterole, rolcreatedb, rolcanlogin, rolreplication,"
            " rolbypassrls from pg_roles where rolname = %s",
            (deployment.app_user,),
        ).fetchone()
    assert row == {
        "rolsuper": False,
        "rolcreaterole": False,
        "rolcreatedb": False,
        "rolcanlogin": True,
        "rolreplication": False,
        "rolbypassrls": False,
    }


def test_the_role_reads_and_writes_the_service_tables(deployment: Deployment) -> None:
    _create(deployment)
    with db.connect(deployment.app_url) as app:
        # An identity column (endpoints.id) works without any grant on its sequence.
        with app.transaction():
            app.execute("insert into tenants (id) values ('t-role')")
            app.execute(
                "insert into endpoints (tenant, url, secret) values"
                " ('t-role', 'https://example.com/hook', 'whsec_x')"
            )
            app.execute("update tenants set paused = true where id = 't-role'")
            assert app.execute("select paused from tenants where id = 't-role'").fetchone() == {
                "paused": True
            }
            app.execute("delete from endpoints where tenant = 't-role'")
            app.execute("delete from tenants where id = 't-role'")
        # The migrations table is readable, not writable.
        assert app.execute("select count(*) as n from schema_migrations").fetchone()
        _refused(app, "delete from schema_migrations")
        _refused(app, "insert into schema_migrations (version, name) values (999, 'x')")


def test_the_role_is_refused_ddl(deployment: Deployment) -> None:
    _create(deployment)
    with db.connect(deployment.app_url) as app:
        _refused(app, "create table public.mine (id int)")
        _refused(app, "create table mine (id int)")
        _refused(app, "create temporary table scratch (id int)")
        _refused(app, "create schema mine")
        _refused(app, "create index on deliveries (id)")
        _refused(app, "alter table deliveries add column extra int")
        _refused(app, "truncate deliveries")
        _refused(app, "create role anyone")
        # Not the owner: a drop is refused too (reported as "must be owner").
        with pytest.raises(psycopg.errors.InsufficientPrivilege), app.transaction():
            app.execute("drop table deliveries")


def test_the_role_cannot_reach_other_schemas(deployment: Deployment) -> None:
    with db.connect(deployment.master_url) as master:
        master.execute("create schema other")
        master.execute("create table other.secrets (id int)")
    _create(deployment)
    with db.connect(deployment.app_url) as app:
        _refused(app, "select * from other.secrets")
        _refused(app, "insert into other.secrets values (1)")


def test_a_table_added_by_a_later_migration_is_granted_on_the_next_run(
    deployment: Deployment,
) -> None:
    _create(deployment)
    with db.connect(deployment.master_url) as master:
        # As a later migration would (the migrator names its schema: a server connection
        # the pooler opened before the login's role settings keeps the server's defaults).
        master.execute("create table reminders.later_table (id int)")
    _create(deployment, set_password=False)
    with db.connect(deployment.app_url) as app:
        app.execute("insert into later_table values (1)")
        assert app.execute("select count(*) as n from later_table").fetchone() == {"n": 1}


def test_grants_added_by_hand_are_taken_back(deployment: Deployment) -> None:
    _create(deployment)
    with db.connect(deployment.master_url) as master:
        master.execute(
            sql.SQL("grant truncate, references, trigger on reminders.deliveries to {}").format(
                sql.Identifier(deployment.app_user)
            )
        )
    _create(deployment, set_password=False)
    with db.connect(deployment.app_url) as app:
        _refused(app, "truncate deliveries")


def test_the_password_is_set_on_create_and_when_the_secret_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import reminders.aws

    monkeypatch.setattr(reminders.aws, "read_db_secret", lambda arn: ("app", f"pw-of-{arn}"))
    create = {"RequestType": "Create", "ResourceProperties": {"AppSecretArn": "arn:1"}}
    same = {
        "RequestType": "Update",
        "ResourceProperties": {"AppSecretArn": "arn:1"},
        "OldResourceProperties": {"AppSecretArn": "arn:1"},
    }
    moved = {
        "RequestType": "Update",
        "ResourceProperties": {"AppSecretArn": "arn:2"},
        "OldResourceProperties": {"AppSecretArn": "arn:1"},
    }
    assert _app_login(create) == ("app", "pw-of-arn:1", True)
    # Rotation owns the password once the role exists: an ordinary update leaves it alone.
    assert _app_login(same) == ("app", "pw-of-arn:1", False)
    assert _app_login(moved) == ("app", "pw-of-arn:2", True)
    assert _app_login({"RequestType": "Create", "ResourceProperties": {}}) is None



@pytest.fixture
def shop(deployment: Deployment, pg_server: str) -> Iterator[str]:
    """An application's own login in the same database, with a schema of its own and the
    defaults an application may rely on: PUBLIC may make temporary tables and create in
    ``public``. Yields its connection URL."""
    login = f"shop_{deployment.app_user}"
    role = sql.Identifier(login)
    with db.connect(pg_server) as superuser:
        superuser.execute(sql.SQL("create role {} login password 'shop-pw'").format(role))
    with db.connect(make_conninfo(pg_server, dbname=deployment.database)) as in_db:
        in_db.execute(sql.SQL("grant temporary on database {} to public").format(
            sql.Identifier(deployment.database)))
        in_db.execute("grant create on schema public to public")
        in_db.execute(sql.SQL("create schema shop authorization {}").format(role))
    try:
        yield make_conninfo(deployment.master_url, user=login, password="shop-pw")
    finally:
        with db.connect(make_conninfo(pg_server, dbname=deployment.database)) as in_db:
            in_db.execute(sql.SQL("drop owned by {}").format(role))
        with db.connect(pg_server) as superuser:
            superuser.execute(sql.SQL("drop role {}").format(role))


def _creates_its_own_tables(url: str) -> None:
    with db.connect(url) as conn, conn.transaction():
        conn.execute("create table shop.bookings (id int)")
        conn.execute("create table public.orders (id int)")
        conn.execute("create temporary table scratch (id int)")


@pytest.mark.parametrize("schema", ["reminders", "public"])
def test_an_application_in_the_same_database_keeps_its_rights(
    deployment: Deployment, shop: str, schema: str
) -> None:
    """The service's schema installed into an application's existing database: the
    migrations and the role's grants change nothing outside the service's schema."""
    with db.connect(deployment.master_url) as master:
        migrate.apply(master, schema)
        ensure_app_role(master, deployment.app_user, "app-pw", set_password=True,
                        owns_database=False, schema=schema)
    _creates_its_own_tables(shop)
    if schema != "public":  # in `public` the application decides (here: anyone creates)
        with db.connect(deployment.app_url) as app:
            _refused(app, f"create table {schema}.mine (id int)")
            _refused(app, "create schema mine")
            _refused(app, "alter table deliveries add column extra int")


def test_in_a_database_the_stack_created_nobody_else_creates(
    deployment: Deployment, shop: str
) -> None:
    _create(deployment)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        _creates_its_own_tables(shop)


def test_only_the_stack_says_it_owns_the_database() -> None:
    assert _owns_database({"ResourceProperties": {"OwnsDatabase": "true"}}) is True
    assert _owns_database({"ResourceProperties": {"OwnsDatabase": "false"}}) is False
    assert _owns_database({"ResourceProperties": {}}) is False
    assert _owns_database({}) is False
    with pytest.raises(ConfigError, match="OwnsDatabase"):
        _owns_database({"ResourceProperties": {"OwnsDatabase": "yes"}})


def test_the_service_role_s_session_limits_come_from_the_resource_properties() -> None:
    from functions.migrate.handler import _service_session

    event = {"ResourceProperties": {"LockTimeoutMs": "700", "StatementTimeoutMs": "9000"}}
    assert _service_session(event, "reminders") == db.SessionDefaults(
        schema="reminders", lock_timeout_ms=700, statement_timeout_ms=9000)
    assert _service_session({}, "svc") == db.SessionDefaults(schema="svc")
    with pytest.raises(ConfigError, match="LockTimeoutMs must be a whole number"):
        _service_session({"ResourceProperties": {"LockTimeoutMs": "5s"}}, "reminders")


def test_the_service_role_starts_its_sessions_with_them(deployment: Deployment) -> None:
    with db.connect(deployment.master_url) as master:
        ensure_app_role(master, deployment.app_user, "app-pw", set_password=True,
                        owns_database=True, session=db.SessionDefaults(
                            schema="reminders", lock_timeout_ms=700, statement_timeout_ms=9000))
    with db.connect(deployment.app_url) as app:  # through the pooler, a new session
        row = app.execute("select current_setting('search_path') as path,"
                          " current_setting('lock_timeout') as lock,"
                          " current_setting('statement_timeout') as statement").fetchone()
    assert row == {"path": "reminders", "lock": "700ms", "statement": "9s"}
