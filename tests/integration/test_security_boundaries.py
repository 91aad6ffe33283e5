"""The security boundaries (docs/security.md), row by row, against what is actually granted: the
database's privileges after the migrations and the migrate function's grants (a tenant login's
``reminders_client``, the application role, the migrator's ownership), and the synthesized
template (which function holds which secret, the operator-read and operator-write policies
against the functions they name and serve, the functions' resource policies, the secrets key's
policy for its administrators). A grant missing from the table, or a row no longer true, fails
here."""

from __future__ import annotations

import fnmatch
import json
import re
import uuid
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from reminders import db, ops
from tests.aws_principals import OPERATOR_KINDS, readme_operator_policy

PAGE = Path(__file__).resolve().parents[2] / "docs" / "security.md"
BOUNDARIES = ("Tenant login", "Application role", "Migrator", "Operator read", "Operator write",
              "Console", "Key administrator")
TABLE_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")


@cache
def table() -> dict[str, dict[str, str]]:
    """The "Security boundaries" table of docs/security.md: boundary -> who, may, may_not."""
    section = PAGE.read_text().split("# Security boundaries\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, dict[str, str]] = {}
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith(("| Boundary", "|---")):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 4, line
        rows[cells[0]] = {"who": cells[1], "may": cells[2], "may_not": cells[3]}
    return rows


def ticked(cell: str) -> set[str]:
    """The names a cell writes as code."""
    return set(re.findall(r"`([^`]+)`", cell))


@cache
def template() -> Any:
    from reminders.local.roles import synthesized_template

    return synthesized_template({})


def functions_of(data: Any) -> dict[str, dict[str, Any]]:
    """The template's functions by their name in the table (scanner, ..., ops-read)."""
    from reminders.local.roles import SERVICE_FUNCTIONS, is_function

    found: dict[str, dict[str, Any]] = {}
    for name in (*SERVICE_FUNCTIONS, "migrate"):
        for resource in data["Resources"].values():
            if is_function(resource, name):
                found[name] = resource["Properties"]
    return found


def test_the_table_names_every_boundary() -> None:
    assert tuple(table()) == BOUNDARIES


# ---------------------------------------------------------------- the database


def _schema(conn: db.Connection) -> str:
    row = conn.execute("select current_schema() as s").fetchone()
    assert row is not None
    return str(row["s"])


def _executable(conn: db.Connection, schema: str, role: str) -> set[str]:
    return {r["name"] for r in conn.execute(
        "select p.proname as name from pg_proc p join pg_namespace n on n.oid = p.pronamespace "
        "where n.nspname = %s and has_function_privilege(%s, p.oid, 'EXECUTE')",
        (schema, role)).fetchall()}


def _relations(conn: db.Connection, schema: str) -> dict[str, int]:
    return {r["name"]: r["oid"] for r in conn.execute(
        "select c.relname as name, c.oid::int as oid from pg_class c join pg_namespace n "
        "on n.oid = c.relnamespace where n.nspname = %s and c.relkind in ('r', 'v', 'm', 'p')",
        (schema,)).fetchall()}


def _privileges(conn: db.Connection, role: str, oid: int) -> set[str]:
    return {p for p in TABLE_PRIVILEGES if conn.execute(
        "select has_table_privilege(%s, %s::oid, %s) as ok", (role, oid, p)).fetchone()
        == {"ok": True}}


def _may_create(conn: db.Connection, role: str, schema: str) -> bool:
    row = conn.execute("select has_schema_privilege(%s, %s, 'CREATE') as ok",
                       (role, schema)).fetchone()
    return row == {"ok": True}


def test_a_tenant_login_may_do_exactly_what_the_table_says(conn: db.Connection) -> None:
    row = table()["Tenant login"]
    assert {"reminders_client", "grant_tenant(login, tenant)"} <= ticked(row["who"])
    schema = _schema(conn)
    executable = _executable(conn, schema, "reminders_client")
    relations = _relations(conn, schema)
    readable = {name for name, oid in relations.items()
                if "SELECT" in _privileges(conn, "reminders_client", oid)}
    assert executable | readable == ticked(row["may"]), (executable, readable)
    assert "grant_tenant" not in executable
    # Never a table: the views only, and nothing but SELECT on them.
    tables = {r["tablename"] for r in conn.execute(
        "select tablename from pg_tables where schemaname = %s", (schema,)).fetchall()}
    assert not readable & tables
    assert {name: _privileges(conn, "reminders_client", oid) - {"SELECT"}
            for name, oid in relations.items()} == {name: set() for name in relations}
    assert not _may_create(conn, "reminders_client", schema)


@pytest.fixture
def app_role(conn: db.Connection) -> Any:
    """The application role as the migrate function makes it, in this database."""
    from functions.migrate.handler import ensure_app_role

    name = f"app_{uuid.uuid4().hex[:10]}"
    ensure_app_role(conn, name, uuid.uuid4().hex, set_password=True, owns_database=False,
                    schema=_schema(conn))
    yield name
    conn.execute(f'drop owned by "{name}"')
    conn.execute(f'drop role "{name}"')


def test_the_application_role_may_do_exactly_what_the_table_says(
        conn: db.Connection, app_role: str) -> None:
    row = table()["Application role"]
    schema = _schema(conn)
    tables = {r["tablename"]: r["oid"] for r in conn.execute(
        "select t.tablename, c.oid::int as oid from pg_tables t join pg_class c on "
        "c.relname = t.tablename join pg_namespace n on n.oid = c.relnamespace and "
        "n.nspname = t.schemaname where t.schemaname = %s", (schema,)).fetchall()}
    (dml,) = [t for t in ticked(row["may"]) if t.startswith("SELECT, ")]
    read_only = ticked(row["may"]) & set(tables)
    assert read_only == {"schema_migrations", "tenant_logins"}
    granted = {name: _privileges(conn, app_role, oid) for name, oid in tables.items()}
    assert granted == {name: {"SELECT"} if name in read_only else set(dml.split(", "))
                       for name in tables}
    functions = {r["name"] for r in conn.execute(
        "select p.proname as name from pg_proc p join pg_namespace n on n.oid = p.pronamespace "
        "where n.nspname = %s", (schema,)).fetchall()}
    assert _executable(conn, schema, app_role) == functions  # "every function"
    assert not _may_create(conn, app_role, schema)
    owned = conn.execute(
        "select (select count(*) from pg_class where relowner = r.oid) + (select count(*) "
        "from pg_proc where proowner = r.oid) + (select count(*) from pg_namespace where "
        "nspowner = r.oid) as n from pg_roles r where rolname = %s", (app_role,)).fetchone()
    assert owned == {"n": 0}
    # Who logs in as it: the functions given the application secret, and only they.
    data = template()
    app_secret = data["Outputs"]["AppDatabaseSecretArn"]["Value"]
    holders = {name for name, props in functions_of(data).items()
               if props.get("Environment", {}).get("Variables", {})
               .get("REMINDERS_DB_SECRET_ARN") == app_secret}
    assert holders == ticked(row["who"])


def test_the_migrator_owns_the_schema_and_everything_in_it(conn: db.Connection) -> None:
    row = table()["Migrator"]
    assert row["may"].startswith("owns the schema and every table, view, sequence and function")
    schema = _schema(conn)
    owners = conn.execute(
        "select (select nspowner from pg_namespace where nspname = %(s)s) as schema, "
        "array(select distinct c.relowner from pg_class c join pg_namespace n on n.oid = "
        "c.relnamespace where n.nspname = %(s)s) as relations, "
        "array(select distinct p.proowner from pg_proc p join pg_namespace n on n.oid = "
        "p.pronamespace where n.nspname = %(s)s) as functions", {"s": schema}).fetchone()
    assert owners is not None
    assert owners["relations"] == [owners["schema"]]
    assert owners["functions"] == [owners["schema"]]
    # The master secret: migrate's alone.
    data = template()
    master = data["Outputs"]["DatabaseSecretArn"]["Value"]
    holders = {name for name, props in functions_of(data).items()
               if props.get("Environment", {}).get("Variables", {})
               .get("REMINDERS_DB_SECRET_ARN") == master}
    assert holders == ticked(row["who"]) == {"migrate"}


# ---------------------------------------------------------------- the template


@pytest.mark.parametrize("kind", OPERATOR_KINDS)
def test_an_operator_may_invoke_exactly_its_own_operations_function(kind: str) -> None:
    from moto.iam.access_control import IAMPolicy, PermissionResult

    row = table()[f"Operator {kind}"]
    other = "write" if kind == "read" else "read"
    assert {c for c in ticked(row["may"]) if c in ops.COMMANDS} == ops.SERVED[kind]
    assert f"STACK-ops-{kind}" in ticked(row["may"])
    assert f"STACK-ops-{other}" in ticked(row["may_not"])
    data = template()
    functions = functions_of(data)
    for name in ("ops-read", "ops-write"):  # each serves what its row says
        assert functions[name]["Environment"]["Variables"]["REMINDERS_OPS_SERVES"] == \
            name.split("-")[1]
    region, account = "eu-west-1", "111122223333"
    arns = {k: f"arn:aws:lambda:{region}:{account}:function:{functions[f'ops-{k}']['FunctionName']}"
            for k in OPERATOR_KINDS}
    assert functions[f"ops-{kind}"]["FunctionName"] == f"Reminders-ops-{kind}"
    policy = readme_operator_policy(region=region, account=account, stack_name="Reminders",
                                    function_name="Reminders-ops", kind=kind)
    actions = {s["Action"] for s in policy["Statement"]}
    assert actions == {t for t in ticked(row["may"]) if re.fullmatch(r"[a-z]+:[A-Za-z]+", t)}
    evaluated = IAMPolicy({"policy_document": json.dumps(policy)})
    assert evaluated.is_action_permitted("lambda:InvokeFunction", arns[kind]) == \
        PermissionResult.PERMITTED
    assert evaluated.is_action_permitted("lambda:InvokeFunction", arns[other]) != \
        PermissionResult.PERMITTED
    # No resource policy lets anyone else invoke either function.
    ids = {logical_id for logical_id, resource in data["Resources"].items()
           if resource["Type"] == "AWS::Lambda::Function"
           and resource["Properties"] in (functions["ops-read"], functions["ops-write"])}
    assert len(ids) == 2
    permissions = [r for r in data["Resources"].values() if r["Type"] == "AWS::Lambda::Permission"
                   and any(i in json.dumps(r["Properties"]["FunctionName"]) for i in ids)]
    assert permissions == []


def test_the_console_acts_only_through_the_actions_the_table_names() -> None:
    pytest.importorskip("starlette")
    from datetime import UTC, datetime

    from reminders.console.app import create_app
    from reminders.console.serve import ConsoleContext

    app = create_app(ConsoleContext(connect=lambda: None, now=lambda: datetime.now(UTC),
                                    queues=dict, actor="test"))
    posts = {f"POST {getattr(route, 'path', '')}" for route in app.routes
             if "POST" in (getattr(route, "methods", None) or ())}
    assert posts == {t for t in ticked(table()["Console"]["may"]) if t.startswith("POST ")}


def test_a_key_administrator_may_do_exactly_what_the_table_says() -> None:
    row = table()["Key administrator"]
    data = template()
    (key,) = [r for r in data["Resources"].values() if r["Type"] == "AWS::KMS::Key"
              and any(s.get("Sid") == "AdministerTheKey"
                      for s in r["Properties"]["KeyPolicy"]["Statement"])]
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    (administer,) = [s for s in statements if s.get("Sid") == "AdministerTheKey"]
    admins = administer["Principal"]
    theirs = [s for s in statements if s["Principal"] == admins]
    assert {s["Sid"] for s in theirs} == {"AdministerTheKey", "GrantOnlyForAwsServices"}
    allowed = {a for s in theirs for a in (s["Action"] if isinstance(s["Action"], list)
                                           else [s["Action"]])}
    written = {t for t in ticked(row["may"]) if t.startswith("kms:")}
    assert allowed == written - {"kms:GrantIsForAWSResource"}
    (grant,) = [s for s in theirs if s["Sid"] == "GrantOnlyForAwsServices"]
    assert grant["Action"] == "kms:CreateGrant"
    assert grant["Condition"] == {"Bool": {"kms:GrantIsForAWSResource": "true"}}
    for use in ticked(row["may_not"]):
        assert not [a for a in allowed if fnmatch.fnmatchcase(use, a)], use
