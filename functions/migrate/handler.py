"""CloudFormation custom resource: apply the database migrations on create and update, then
create or update the application role that scanner, consumer and redrive log in as.

The migrate function connects with the master credentials (``REMINDERS_DB_SECRET_ARN``); the
application role's login is the secret named by the resource property ``AppSecretArn``. The
role gets DML on the service's tables and nothing else: no DDL, no other schema, no writes to
``schema_migrations``, and no temporary tables in a database the stack created. Every statement
is idempotent, so the grants are re-applied after every migration run (a new table is granted
the moment it exists).

What is changed is the service's own schema. Database-wide defaults (PUBLIC's CREATE and
TEMPORARY on the database) are taken back only when the resource property ``OwnsDatabase`` is
``"true"``, which the stack passes for the database it creates: in an application's existing
database they belong to the application, whose own logins may rely on them.
"""

from __future__ import annotations

import os
from typing import Any

from psycopg import sql

from reminders import config, db
from reminders.db import migrate
from reminders.errors import ConfigError
from reminders.observability import logger

if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):  # validate the settings at cold start
    config.load()

# The migrator's own bookkeeping; the service role may read it, never write it.
MIGRATIONS_TABLE = "schema_migrations"
# Which login is which tenant's application: the operator's (``grant_tenant``); the service
# role may read it, never write it.
READ_ONLY_TABLES = (MIGRATIONS_TABLE, "tenant_logins")
APP_TABLE_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE")


def ensure_app_role(
    conn: db.Connection, username: str, password: str, *, set_password: bool,
    owns_database: bool, schema: str = config.DEFAULT_SCHEMA,
    session: db.SessionDefaults | None = None,
) -> bool:
    """Create the application role, or bring an existing one back to exactly its grants.

    The password is set when the role is created and when ``set_password`` is true (a new
    secret); otherwise it is left alone, because the secret's rotation owns it from then on.
    Returns whether the role was created. Runs as the master user (on RDS a member of
    rds_superuser with CREATEROLE, not a superuser), so it only uses what such a role may do.
    The grants are on the service's schema (``REMINDERS_DB_SCHEMA``), wherever it lives. This
    is the service's own role (scanner, consumer, redrive), not ``reminders_client``, the role
    applications are granted (migration 0009), which may only call the SQL API.

    ``owns_database``: the database was created for the service (by the stack), so PUBLIC's
    database-wide CREATE and TEMPORARY are revoked too, and the role cannot make temporary
    tables. Otherwise (the service's schema in an application's database) nothing outside the
    service's schema changes, and the role keeps whatever PUBLIC is granted there.

    ``session``: the role's session defaults in this database (its ``search_path`` is the
    service's schema; lock and statement timeouts), written as role settings every run.
    """
    if session is not None:
        schema = session.schema
    role = sql.Identifier(username)
    schema_name = config.check_schema(schema)
    schema_id = sql.Identifier(schema_name)
    with db.transaction(conn):
        database = conn.execute("select current_database() as name").fetchone()
        assert database is not None
        found = conn.execute(
            "select rolcreatedb, rolcreaterole from pg_roles where rolname = %s", (username,)
        ).fetchone()
        exists = found is not None
        # A new role is never superuser, createdb, createrole, replication or bypassrls (and
        # only a superuser could add the first, third and fourth later); an existing one loses
        # createdb and createrole if someone gave them. PostgreSQL 16+ lets a role change those
        # attributes only if it holds them itself, so they are named only when set.
        attributes = [sql.SQL("login")]
        if found is not None and found["rolcreatedb"]:
            attributes.append(sql.SQL("nocreatedb"))
        if found is not None and found["rolcreaterole"]:
            attributes.append(sql.SQL("nocreaterole"))
        options = sql.SQL(" ").join(attributes)
        if not exists:
            conn.execute(
                sql.SQL("create role {} with {} password {}").format(
                    role, options, sql.Literal(password)
                )
            )
        elif set_password:
            conn.execute(
                sql.SQL("alter role {} with {} password {}").format(
                    role, options, sql.Literal(password)
                )
            )
        else:
            conn.execute(sql.SQL("alter role {} with {}").format(role, options))

        db_name = sql.Identifier(database["name"])
        if owns_database:
            # Nobody creates schemas or temporary tables in the service's database by
            # default; the owner (the master user) keeps every right through ownership.
            conn.execute(sql.SQL("revoke create, temporary on database {} from public").format(
                db_name))
        conn.execute(sql.SQL("grant connect on database {} to {}").format(db_name, role))
        if owns_database or schema_name != "public":
            # The service's schema only: an application's `public` is the application's.
            conn.execute(sql.SQL("revoke create on schema {} from public").format(schema_id))
        conn.execute(sql.SQL("grant usage on schema {} to {}").format(schema_id, role))

        tables = [
            row["tablename"]
            for row in conn.execute(
                "select tablename from pg_tables where schemaname = %s order by tablename",
                (schema_name,),
            ).fetchall()
        ]
        dml = sql.SQL(", ").join(sql.SQL(p) for p in APP_TABLE_PRIVILEGES)
        for table in tables:
            target = sql.Identifier(schema_name, table)
            # Exactly these privileges: anything granted before (by hand, or by an older
            # version of this function) is taken back first.
            conn.execute(sql.SQL("revoke all on table {} from {}").format(target, role))
            if table in READ_ONLY_TABLES:
                conn.execute(sql.SQL("grant select on table {} to {}").format(target, role))
            else:
                conn.execute(sql.SQL("grant {} on table {} to {}").format(dml, target, role))
        # The scanner expands recurring schedules recorded through SQL and advances series
        # through the SQL API's functions (invoker's rights: the grants above decide).
        conn.execute(sql.SQL("grant execute on all functions in schema {} to {}").format(
            schema_id, role))
        db.configure_login(conn, session or db.SessionDefaults(schema=schema_name), username)
    return not exists


def _service_session(event: dict[str, Any], schema: str) -> db.SessionDefaults:
    """The service role's session defaults from the resource properties ``LockTimeoutMs`` and
    ``StatementTimeoutMs`` (absent: the service's defaults)."""
    properties = event.get("ResourceProperties") or {}
    defaults = db.SessionDefaults(schema=schema)
    values = {}
    for prop, field, low, high in (("LockTimeoutMs", "lock_timeout_ms", 1, 600_000),
                                   ("StatementTimeoutMs", "statement_timeout_ms", 100, 900_000)):
        raw = str(properties.get(prop, getattr(defaults, field)))
        if not raw.isdigit() or not low <= int(raw) <= high:
            raise ConfigError(f"resource property {prop} must be a whole number of "
                              f"milliseconds from {low} to {high}, got {raw!r}")
        values[field] = int(raw)
    return db.SessionDefaults(schema=schema, **values)


def _owns_database(event: dict[str, Any]) -> bool:
    """Whether the stack created the database (resource property ``OwnsDatabase``, absent:
    no, so an existing database's defaults are never changed by mistake)."""
    value = str((event.get("ResourceProperties") or {}).get("OwnsDatabase", "false"))
    if value not in ("true", "false"):
        raise ConfigError(f"resource property OwnsDatabase must be \"true\" or \"false\", "
                          f"got {value!r}")
    return value == "true"


def _app_login(event: dict[str, Any]) -> tuple[str, str, bool] | None:
    """The application role's (username, password, set_password) from the request, or None
    when the resource names no application secret (a local run)."""
    properties = event.get("ResourceProperties") or {}
    secret_arn = properties.get("AppSecretArn")
    if not secret_arn:
        return None
    from reminders.aws import read_db_secret

    username, password = read_db_secret(str(secret_arn))
    old = (event.get("OldResourceProperties") or {}).get("AppSecretArn")
    set_password = event.get("RequestType") == "Create" or old != secret_arn
    return username, password, set_password


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    request = event.get("RequestType", "Create")
    if request == "Delete":  # the data outlives the stack; nothing to undo
        return {"PhysicalResourceId": event.get("PhysicalResourceId", "reminders-schema")}
    settings = config.load()
    owns_database = _owns_database(event)
    login = _app_login(event)
    with db.connect(settings.database_url, prepare=settings.db_prepare) as conn:
        applied = migrate.apply(conn, settings.db_schema)
        created = None
        if login is not None:
            username, password, set_password = login
            created = ensure_app_role(conn, username, password, set_password=set_password,
                                      owns_database=owns_database,
                                      session=_service_session(event, settings.db_schema))
    logger.info("migrations applied", extra={"applied": applied, "app_role_created": created})
    return {"PhysicalResourceId": "reminders-schema",
            "Data": {"Applied": ",".join(map(str, applied)) or "none"}}
